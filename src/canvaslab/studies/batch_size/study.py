"""Run the batch-size study: row 0 alone (B=1) against row 0 inside batches of other sizes.

For every prompt: a B=1 reference capture, then a capture per batch size, compared byte for byte in
execution order (``canvaslab.capture``). A diverged run is re-run on both sides keeping the few full
tensors the element-level numbers need (first divergence, router scores, logits of that pass), so host
memory stays bounded. A repeat of B=1 checks that the machine is run-to-run deterministic at all, by default in a fresh
process (``repeat_control``): a resumed study compares signatures made in different processes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from canvaslab.capture import Capture, Recorder, compare_captures, detail
from canvaslab.capture.recorder import PassKey
from canvaslab.environment import environment_fingerprint
from canvaslab.generation import generate
from canvaslab.invariant import replaced_ops
from canvaslab.io import read_json, write_json_atomic
from canvaslab.prompts import BUILTIN_PROMPTS, Prompt
from canvaslab.studies.batch_size.design import batch_rows, common_classes, equivalence_classes
from canvaslab.studies.batch_size.repeat_control import check_repeat_control, run_repeat_control

RESULT_FILE = "batch_study.json"
PARTIAL_FILE = "batch_study.partial.json"
# Part of the study key: a partial file whose signatures were made another way is not resumed.
SIGNATURE_SCHEME = "sorted-pass-name-occurrence-v2"


@dataclass
class BatchStudySettings:
    batch_sizes: list[int]
    fill: str = "copies"
    copy_prompt_cache: bool = True
    rng: str = "row"
    mode: str = "stock"
    seed: int = 0
    generation: dict[str, Any] = field(default_factory=dict)
    record_ops: bool = True
    repeat_control: str = "fresh-process"  # or "same-process"

    def __post_init__(self) -> None:
        check_repeat_control(self.repeat_control)


def capture_signature(capture: Capture, reference: Capture | None = None, skip: Collection[PassKey] = ()) -> str:
    """A hash of row 0's recorded outputs, over the reference's calls: equal signatures mean identical runs.

    Calls only a batched run makes (e.g. attention once per sequence in invariant mode) are not row 0's;
    passes in ``skip`` are left out, as in the comparison.
    """
    outputs = {record.key: record.output for record in capture.records}
    keys = [record.key for record in (reference or capture).records if record.pass_key not in skip]
    # Sorted, not in execution order: some calls run in hash order (see capture.recorder), and signatures
    # are compared across processes (a resumed study, the fresh-process repeat control).
    material = "\n".join(sorted(f"{key[0].label()}|{key[1]}@{key[2]}={outputs.get(key)}" for key in keys))
    return hashlib.blake2b(material.encode(), digest_size=12).hexdigest()


# Reported instead of a numeric origin when row 0 had to be padded: a semantic cause, not rounding.
PADDING_ORIGIN = {
    "name": "left padding of row 0", "kind": "semantic", "op": None, "inputs_identical": False,
    "explanation": "row 0 was left-padded to the batch's longest prompt: transformers' generate then gives it "
                   "other input ids, an attention mask with padding and positions shifted by the padding "
                   "(a semantic batch dependence, not a numeric one)",
}


class _Runner:
    """Generates one batch under capture, for a fixed model and settings."""

    def __init__(self, loaded, settings: BatchStudySettings):
        self.loaded, self.settings = loaded, settings

    def __call__(self, rows: list[list[int]], keep=None):
        recorder = Recorder(self.loaded.model, len(rows), keep=keep, record_ops=self.settings.record_ops)
        with recorder:
            output = generate(self.loaded, rows, seed=self.settings.seed, rng=self.settings.rng, mode=self.settings.mode,
                              copy_prompt_cache=self.settings.copy_prompt_cache, observers=[recorder],
                              generation=self.settings.generation)
        return recorder.capture, output.rows[0]


def repeat_signature(loaded, settings: BatchStudySettings, prompt_ids: list[int]) -> str:
    """The signature of a B=1 run of ``prompt_ids``, as the study computes its reference's."""
    return capture_signature(_Runner(loaded, settings)([prompt_ids])[0], skip=passes_not_compared(settings))


def _row_summary(row) -> dict[str, Any]:
    return {"text": row.text, "tokens": row.tokens, "stop_passes": row.stop_passes, "passes": row.passes,
            "eos_position": row.eos_position}


def _first_divergence(comparison, details) -> dict[str, Any] | None:
    first = comparison.first
    if first is None:
        return None
    key = first.pass_key
    return {"pass": key.label(), "canvas": key.canvas, "phase": key.phase, "step": key.step,
            "call": first.name, "kind": first.kind, "shape": list(first.shape),
            **({k: details["first"].get(k) for k in ("fraction_changed", "max_abs_diff")} if details else {})}


# Without the copied B=1 prompt cache, the whole prompt is encoded in this pass, and with --fill mixed row 0
# is left-padded to the batch's longest prompt there: another shape than at B=1, not comparable byte for
# byte. Every later pass reads its keys and values from the KV cache, and those passes are compared.
PADDED_PROMPT_PASS = PassKey(canvas=0, phase="encoder", step=0)


def passes_not_compared(settings: BatchStudySettings) -> set[PassKey]:
    """Passes left out of every comparison and signature of a study (the same for all its runs)."""
    return {PADDED_PROMPT_PASS} if settings.fill == "mixed" and not settings.copy_prompt_cache else set()


def compare_run(run: Callable, prompt: Prompt, rows, reference: tuple, batch_size: int, fill: str,
                mode: str = "stock", skip: Collection[PassKey] = ()) -> dict[str, Any]:
    """One run: row 0 of ``rows`` against the B=1 reference, with element-level details if it diverged."""
    ref_capture, ref_row = reference
    capture, row = run(rows)
    padded = len(rows[0]) < max(len(r) for r in rows)
    comparison = compare_captures(ref_capture, capture, skip)
    details = None
    if comparison.first is not None:
        targets = comparison.detail_targets(ref_capture)
        details = detail(comparison, run([rows[0]], keep=targets)[0], run(rows, keep=targets)[0])
    # Invariant mode removes padding's effect (per-row positions, padded keys dropped): no semantic cause.
    origin = PADDING_ORIGIN if padded and comparison.diverged and mode != "invariant" else comparison.origin
    return {
        "prompt_id": prompt.prompt_id,
        "batch_size": batch_size,
        "fill": fill,
        "diverged": comparison.diverged or row.tokens != ref_row.tokens,
        "text_changed": row.text != ref_row.text,
        "stop_changed": row.stop_point != ref_row.stop_point,
        "first_divergence": _first_divergence(comparison, details),
        "origin": origin,
        "router_scores_changed_pct": details and details["router_scores_changed_pct"],
        "final_logits_changed_pct": details and details["final_logits_changed_pct"],
        "spread_pass": comparison.spread_pass.label() if comparison.spread_pass else None,
        "positions_with_difference_per_layer": comparison.positions_per_layer,
        "canvas_positions": comparison.canvas_positions,
        "passes_total": comparison.passes_total,
        "passes_matching": comparison.passes_matching,
        "bytes_compared": comparison.bytes_compared,
        "structure_changed": comparison.structure_changed,
        "row0_left_padded": padded,
        "passes_not_compared": [key.label() for key in skip],
        "signature": capture_signature(capture, ref_capture, skip),
        "reference": _row_summary(ref_row),
        "run": _row_summary(row),
    }


def summarize(runs: list[dict], classes: list[list[int]], repeat_identical: bool) -> dict[str, Any]:
    return {
        "runs": len(runs),
        "diverged": sum(r["diverged"] for r in runs),
        "text_changed": sum(r["text_changed"] for r in runs),
        "stop_changed": sum(r["stop_changed"] for r in runs),
        "passes_total": sum(r["passes_total"] for r in runs),
        "passes_matching": sum(r["passes_matching"] for r in runs),
        "bytes_compared": sum(r["bytes_compared"] for r in runs),
        "equivalence_classes": classes,
        "repeat_control_identical": repeat_identical,
    }


def study_key(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _load_partial(out_dir: Path | None, key: str) -> dict[str, Any]:
    if out_dir is None or not (out_dir / PARTIAL_FILE).exists():
        return {}
    partial = read_json(out_dir / PARTIAL_FILE)
    return partial if partial.get("study_key") == key else {}


def run_batch_study(loaded, prompts: list[Prompt], settings: BatchStudySettings, *, out_dir: str | Path | None = None,
                    progress: Callable[[str], None] | None = None, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the study; with ``out_dir``, finished runs are saved after each one and a rerun resumes."""
    out_dir = Path(out_dir) if out_dir is not None else None
    config = {**(config or {}), "settings": asdict(settings), "prompts": [asdict(p) for p in prompts],
              "signature_scheme": SIGNATURE_SCHEME}
    key = study_key(config)
    partial = _load_partial(out_dir, key)
    runs: list[dict] = partial.get("runs", [])
    signatures: dict[str, dict[str, str]] = partial.get("signatures", {})
    repeat = partial.get("repeat_control")
    done = {(r["prompt_id"], r["batch_size"]) for r in runs}
    run = _Runner(loaded, settings)
    skip = passes_not_compared(settings)
    encoded = [loaded.tokenizer(p.text)["input_ids"] for p in prompts]
    # --fill mixed: the other study prompts first, then built-in prompts, so one prompt can be studied too
    fillers = [loaded.tokenizer(text)["input_ids"] for text in BUILTIN_PROMPTS if text not in {p.text for p in prompts}]
    notify = progress or (lambda message: None)
    for index, (prompt, ids) in enumerate(zip(prompts, encoded)):
        todo = [b for b in settings.batch_sizes if b != 1 and (prompt.prompt_id, b) not in done]
        if not todo and (repeat is not None or index):
            continue
        notify(f"{prompt.prompt_id}: B=1 reference")
        reference = run([ids])
        signatures.setdefault(prompt.prompt_id, {})["1"] = capture_signature(reference[0], skip=skip)
        if repeat is None:
            notify(f"{prompt.prompt_id}: B=1 repeat control ({settings.repeat_control})")
            repeat = run_repeat_control(loaded, settings, ids, signatures[prompt.prompt_id]["1"],
                                        lambda: capture_signature(run([ids])[0], skip=skip))
        others = encoded[:index] + encoded[index + 1:] + fillers
        for batch_size in todo:
            notify(f"{prompt.prompt_id}: B={batch_size}")
            rows = batch_rows(ids, others, batch_size, settings.fill)
            result = compare_run(run, prompt, rows, reference, batch_size, settings.fill, settings.mode, skip)
            runs.append(result)
            signatures[prompt.prompt_id][str(batch_size)] = result["signature"]
            if out_dir is not None:
                write_json_atomic(out_dir / PARTIAL_FILE, {"study_key": key, "runs": runs, "signatures": signatures,
                                                           "repeat_control": repeat})
    order = {(p.prompt_id, b): i for i, p in enumerate(prompts) for b in settings.batch_sizes}
    runs.sort(key=lambda r: order[(r["prompt_id"], r["batch_size"])])
    per_prompt = {pid: equivalence_classes({int(b): s for b, s in sigs.items()}) for pid, sigs in signatures.items()}
    classes = common_classes(list(per_prompt.values()))
    result = {
        "study": "batch_size",
        "config": config,
        "environment": environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source,
                                               mode=settings.mode, replaced_ops=replaced_ops(settings.mode),
                                               rng=settings.rng),
        "equivalence_classes_per_prompt": per_prompt,
        "runs": runs,
        "repeat_control": repeat,
        "summary": summarize(runs, classes, bool(repeat and repeat["identical"])),
    }
    if out_dir is not None:
        write_json_atomic(out_dir / RESULT_FILE, result)
        (out_dir / PARTIAL_FILE).unlink(missing_ok=True)
    return result
