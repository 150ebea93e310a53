"""Run the batch-size study: a prompt alone (B=1) against the same prompt as one row (row 0 unless
``row`` says otherwise) of batches of other sizes.

For every prompt: a B=1 reference capture, then a capture per batch size, compared byte for byte in
execution order (``canvaslab.capture``), every pass, the prompt's own included: when it is encoded inside
the batch, left-padded, over the row's real positions. A diverged run is re-run on both sides keeping the few full
tensors the element-level numbers need (first divergence, router scores, logits of that pass), so host
memory stays bounded. A repeat of B=1 checks that the machine is run-to-run deterministic at all, by default in a fresh
process (``repeat_control``): a resumed study compares signatures made in different processes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from canvaslab.analysis.batch_classes import common_classes, equivalence_classes
from canvaslab.capture import Capture, Recorder, compare_captures, detail
from canvaslab.capture.canvas_path import CanvasPathRecorder, token_texts
from canvaslab.capture.spread import positions_differing_per_pass
from canvaslab.environment import environment_fingerprint
from canvaslab.errors import CanvaslabError
from canvaslab.generation import generate
from canvaslab.invariant import replaced_ops
from canvaslab.io import read_json, write_json_atomic
from canvaslab.prompts import BUILTIN_PROMPTS, Prompt
from canvaslab.studies.batch_size.design import batch_rows, check_row
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
    row: int = 0  # the studied prompt's row in every batch of more than one row

    def __post_init__(self) -> None:
        check_repeat_control(self.repeat_control)


def capture_signature(capture: Capture, reference: Capture | None = None) -> str:
    """A hash of the studied row's recorded outputs, over the reference's calls: equal signatures mean
    identical runs. Calls only a batched run makes (e.g. attention once per sequence in invariant mode)
    are not the row's."""
    outputs = {record.key: record.output for record in capture.records}
    keys = [record.key for record in (reference or capture).records]
    # Sorted, not in execution order: some calls run in hash order (see capture.recorder), and signatures
    # are compared across processes (a resumed study, the fresh-process repeat control).
    material = "\n".join(sorted(f"{key[0].label()}|{key[1]}@{key[2]}={outputs.get(key)}" for key in keys))
    return hashlib.blake2b(material.encode(), digest_size=12).hexdigest()


# Reported instead of a numeric origin when the studied row had to be padded: a semantic cause, not rounding.
PADDING_ORIGIN = {
    "name": "left padding of the studied row", "kind": "semantic", "op": None, "inputs_identical": False,
    "explanation": "the studied row was left-padded to the batch's longest prompt: transformers' generate then gives it "
                   "other input ids, an attention mask with padding and positions shifted by the padding "
                   "(a semantic batch dependence, not a numeric one)",
}


class _Runner:
    """Generates one batch under capture, for a fixed model and settings."""

    def __init__(self, loaded, settings: BatchStudySettings):
        self.loaded, self.settings = loaded, settings

    def __call__(self, rows: list[list[int]], keep=None, row: int = 0):
        # Without the copied prompt cache the prompt is encoded in the batch, left-padded to the widest one.
        padding = 0 if self.settings.copy_prompt_cache else max(map(len, rows)) - len(rows[row])
        recorder = Recorder(self.loaded.model, len(rows), keep=keep, record_ops=self.settings.record_ops, row=row,
                            prompt_padding=padding)
        path = CanvasPathRecorder(row)
        with recorder:
            output = generate(self.loaded, rows, seed=self.settings.seed, rng=self.settings.rng, mode=self.settings.mode,
                              copy_prompt_cache=self.settings.copy_prompt_cache, observers=[recorder, path],
                              generation=self.settings.generation)
        # The studied row's denoising path rides on its row result: the report replays it pass by pass.
        output.rows[row].canvas_path = path.path(output.rows[row].passes)
        return recorder.capture, output.rows[row]


def repeat_signature(loaded, settings: BatchStudySettings, prompt_ids: list[int]) -> str:
    """The signature of a B=1 run of ``prompt_ids``, as the study computes its reference's."""
    return capture_signature(_Runner(loaded, settings)([prompt_ids])[0])


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


def compare_run(run: Callable, prompt: Prompt, rows, reference: tuple, batch_size: int, fill: str,
                mode: str = "stock", studied: int = 0) -> dict[str, Any]:
    """One run: row ``studied`` of ``rows`` against the B=1 reference, with element-level details if it diverged."""
    ref_capture, ref_row = reference
    capture, row = run(rows, row=studied)
    padded = len(rows[studied]) < max(len(r) for r in rows)
    comparison = compare_captures(ref_capture, capture)
    details = None
    if comparison.first is not None:
        targets = comparison.detail_targets(ref_capture)
        details = detail(comparison, run([rows[studied]], keep=targets)[0], run(rows, keep=targets, row=studied)[0])
    # Invariant mode removes padding's effect (per-row positions, padded keys dropped): no semantic cause.
    origin = PADDING_ORIGIN if padded and comparison.diverged and mode != "invariant" else comparison.origin
    return {
        "prompt_id": prompt.prompt_id,
        "batch_size": batch_size,
        "fill": fill,
        "row": studied,
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
        "left_padded": padded,
        "signature": capture_signature(capture, ref_capture),
        "spread_per_pass": positions_differing_per_pass(ref_capture, capture),
        "canvas_path": row.canvas_path,
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


def read_partial(out_dir: Path | None) -> dict[str, Any]:
    """The saved runs of an interrupted study in ``out_dir`` ({} if none); a damaged file is one clear error.

    Written atomically, the file is only damaged by hand or by another program; the study never guesses
    which runs it could trust."""
    path = None if out_dir is None else Path(out_dir) / PARTIAL_FILE
    if path is None or not path.exists():
        return {}
    try:
        partial = read_json(path)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise CanvaslabError(f"{path} is damaged ({error}); remove it to start the study over, "
                             "or use a new --out") from None
    if not isinstance(partial, dict) or not isinstance(partial.get("runs"), list):
        raise CanvaslabError(f"{path} is not a saved batch study; remove it to start the study over, "
                             "or use a new --out")
    return partial


def _load_partial(out_dir: Path | None, key: str) -> dict[str, Any]:
    partial = read_partial(out_dir)
    return partial if partial.get("study_key") == key else {}


def run_batch_study(loaded, prompts: list[Prompt], settings: BatchStudySettings, *, out_dir: str | Path | None = None,
                    progress: Callable[[int, int, str], None] | None = None,
                    config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the study; with ``out_dir``, finished runs are saved after each one and a rerun resumes.

    ``progress(done, total, doing)`` counts finished batched runs; it is called before each run
    (``doing`` names it) and once more when all are done."""
    check_row(settings.row, settings.batch_sizes, settings.mode)
    out_dir = Path(out_dir) if out_dir is not None else None
    config = {**(config or {}), "settings": asdict(settings), "prompts": [asdict(p) for p in prompts],
              "signature_scheme": SIGNATURE_SCHEME}
    key = study_key(config)
    partial = _load_partial(out_dir, key)
    runs: list[dict] = partial.get("runs", [])
    signatures: dict[str, dict[str, str]] = partial.get("signatures", {})
    repeat = partial.get("repeat_control")
    reference_paths: dict[str, dict] = partial.get("reference_canvas_paths", {})
    done = {(r["prompt_id"], r["batch_size"]) for r in runs}
    run = _Runner(loaded, settings)
    encoded = [loaded.tokenizer(p.text)["input_ids"] for p in prompts]
    # --fill mixed: the other study prompts first, then built-in prompts, so one prompt can be studied too
    fillers = [loaded.tokenizer(text)["input_ids"] for text in BUILTIN_PROMPTS if text not in {p.text for p in prompts}]
    total = len(prompts) * sum(1 for b in settings.batch_sizes if b != 1)
    notify = progress or (lambda done, total, doing: None)
    for index, (prompt, ids) in enumerate(zip(prompts, encoded)):
        todo = [b for b in settings.batch_sizes if b != 1 and (prompt.prompt_id, b) not in done]
        if not todo and (repeat is not None or index):
            continue
        notify(len(runs), total, f"{prompt.prompt_id}: B=1 reference")
        reference = run([ids])
        signatures.setdefault(prompt.prompt_id, {})["1"] = capture_signature(reference[0])
        reference_paths[prompt.prompt_id] = reference[1].canvas_path
        if repeat is None:
            notify(len(runs), total, f"{prompt.prompt_id}: B=1 repeat control ({settings.repeat_control})")
            repeat = run_repeat_control(loaded, settings, ids, signatures[prompt.prompt_id]["1"],
                                        lambda: capture_signature(run([ids])[0]))
        others = encoded[:index] + encoded[index + 1:] + fillers
        for batch_size in todo:
            notify(len(runs), total, f"{prompt.prompt_id}: B={batch_size}")
            rows = batch_rows(ids, others, batch_size, settings.fill, settings.row)
            result = compare_run(run, prompt, rows, reference, batch_size, settings.fill, settings.mode, settings.row)
            runs.append(result)
            signatures[prompt.prompt_id][str(batch_size)] = result["signature"]
            if out_dir is not None:
                write_json_atomic(out_dir / PARTIAL_FILE, {"study_key": key, "runs": runs, "signatures": signatures,
                                                           "repeat_control": repeat,
                                                           "reference_canvas_paths": reference_paths})
    notify(len(runs), total, "")
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
        # Row 0's B=1 denoising path per prompt and the text of every token on a recorded path.
        "reference_canvas_paths": reference_paths,
        "canvas_token_text": token_texts(loaded.tokenizer, [*reference_paths.values(), *(r["canvas_path"] for r in runs)]),
    }
    if out_dir is not None:
        write_json_atomic(out_dir / RESULT_FILE, result)
        (out_dir / PARTIAL_FILE).unlink(missing_ok=True)
    return result
