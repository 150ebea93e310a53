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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from canvaslab.analysis.batch_size import batch_study_summary
from canvaslab.capture import Capture, Recorder, compare_captures, detail
from canvaslab.capture.canvas_path import CanvasPathRecorder, token_texts
from canvaslab.capture.spread import positions_differing_per_pass
from canvaslab.environment import environment_fingerprint
from canvaslab.errors import CanvaslabError
from canvaslab.generation import generate
from canvaslab.invariant import Mode, mode_named, replaced_ops
from canvaslab.io import write_json_atomic
from canvaslab.prompts import BUILTIN_PROMPTS, Prompt
from canvaslab.scoring.prompting import encode_prompt
from canvaslab.studies.batch_size.design import batch_rows, check_prompt_lengths, check_row
from canvaslab.studies.batch_size.repeat_control import check_repeat_control, model_spec, run_repeat_control
from canvaslab.studies.engine import Study, run_study

RESULT_FILE = "batch_study.json"
# Part of the plan: records whose signatures were made another way are not resumed.
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
                mode: str | Mode = "stock", studied: int = 0) -> dict[str, Any]:
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
    removed = mode_named(mode).removes_padding_effect
    origin = PADDING_ORIGIN if padded and comparison.diverged and not removed else comparison.origin
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


def model_plan(loaded) -> dict[str, Any]:
    """How a worker loads ``loaded`` again (``load_model``'s arguments), for the plan; an in-memory model
    (not reloadable: the local executor only) is named by its source."""
    try:
        return model_spec(loaded)
    except CanvaslabError:
        return {"source": loaded.source, "dtype": str(loaded.model.dtype).removeprefix("torch."),
                "device": str(loaded.device)}


@dataclass
class _Worker:
    """A worker's model and what every unit of this study needs from it."""

    loaded: Any
    run: _Runner
    encoded: dict[str, list[int]]
    fillers: list[list[int]]
    environment: dict[str, Any]


class BatchSizeStudy(Study):
    """The study as the engine runs it. A unit is one prompt: its B=1 reference and its batched runs, one
    per batch size, compared on the same model and device (they must be: the comparison is byte for
    byte). The first prompt's unit also runs the repeat control."""

    name = "batch_size"
    unit_label = "prompts"

    def __init__(self, model: dict[str, Any], prompts: list[Prompt], settings: BatchStudySettings,
                 loaded=None):
        check_row(settings.row, settings.batch_sizes, settings.mode)
        if len({p.prompt_id for p in prompts}) != len(prompts):
            raise CanvaslabError("a prompt id is listed twice")
        self.model, self.prompts, self.settings, self.loaded = model, list(prompts), settings, loaded

    def __getstate__(self):  # a model stays in its process; Ray workers load their own
        return {**self.__dict__, "_loaded": None}

    @property
    def loaded(self):
        return self._loaded

    @loaded.setter
    def loaded(self, loaded) -> None:
        """The model of this process (the local executor's): its tokenizer checks the prompts as it is attached,
        before the engine registers the plan or runs a unit (for Ray, ``check_prompts`` before the run)."""
        if loaded is not None:
            self.encoded(loaded.tokenizer)
        self._loaded = loaded

    def check_prompts(self, tokenizer) -> None:
        self.encoded(tokenizer)

    def encoded(self, tokenizer) -> dict[str, list[int]]:
        """Each prompt's ids under the model's own tokenizer (a user turn of its chat template when it has one, as
        the model was trained to be asked), refused if too short for how the study feeds it."""
        encoded = {p.prompt_id: encode_prompt(tokenizer, p.text) for p in self.prompts}
        check_prompt_lengths(self.prompts, encoded, self.settings.copy_prompt_cache)
        return encoded

    def plan(self) -> dict[str, Any]:
        return {"model": self.model, "settings": asdict(self.settings),
                "prompts": [asdict(p) for p in self.prompts], "signature_scheme": SIGNATURE_SCHEME}

    def units(self) -> list[str]:
        return self.units_of_plan(self.plan())

    @staticmethod
    def units_of_plan(plan: dict[str, Any], folder: Path | None = None) -> list[str]:
        return [prompt["prompt_id"] for prompt in plan["prompts"]]

    def prepare(self) -> _Worker:
        loaded = self.loaded
        if loaded is None:
            from canvaslab.models import load_study_model

            loaded = load_study_model(self.model)
        encoded = self.encoded(loaded.tokenizer)
        texts = {p.text for p in self.prompts}
        environment = environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source,
                                              mode=self.settings.mode, replaced_ops=replaced_ops(self.settings.mode),
                                              rng=self.settings.rng)
        return _Worker(loaded, _Runner(loaded, self.settings), encoded,
                       # --fill mixed: the other study prompts first, then built-in ones, so one prompt can be studied
                       [encode_prompt(loaded.tokenizer, text) for text in BUILTIN_PROMPTS if text not in texts],
                       environment)

    def worker_info(self, state: _Worker) -> dict[str, Any]:
        return {"environment": state.environment}

    def run_group(self, state: _Worker, group: list[str], todo: list[str]):
        for prompt_id in todo:
            yield prompt_id, self._run_prompt(state, prompt_id)

    def _run_prompt(self, state: _Worker, prompt_id: str) -> dict[str, Any]:
        settings, index = self.settings, self.units().index(prompt_id)
        prompt, ids = self.prompts[index], state.encoded[prompt_id]
        reference = state.run([ids])
        signatures = {"1": capture_signature(reference[0])}
        repeat = None
        if index == 0:
            repeat = run_repeat_control(state.loaded, settings, ids, signatures["1"],
                                        lambda: capture_signature(state.run([ids])[0]))
        others = [state.encoded[p.prompt_id] for p in self.prompts if p.prompt_id != prompt_id] + state.fillers
        runs = []
        for batch_size in [b for b in settings.batch_sizes if b != 1]:
            rows = batch_rows(ids, others, batch_size, settings.fill, settings.row)
            result = compare_run(state.run, prompt, rows, reference, batch_size, settings.fill, settings.mode,
                                 settings.row)
            runs.append(result)
            signatures[str(batch_size)] = result["signature"]
        paths = [reference[1].canvas_path, *(r["canvas_path"] for r in runs)]
        return {"prompt_id": prompt_id, "runs": runs, "signatures": signatures, "repeat_control": repeat,
                "reference_canvas_path": reference[1].canvas_path,
                "canvas_token_text": token_texts(state.loaded.tokenizer, paths),
                "generation_defaults": state.loaded.generation_defaults,
                # which device made this prompt's comparison (reference and batched runs alike)
                "device": str(state.loaded.device), "device_name": state.environment["device"]}

    def write_views(self, folder, records: dict[str, dict[str, Any]], workers: dict[str, dict[str, Any]]):
        result = batch_study_view(self.plan(), records, workers)
        write_json_atomic(Path(folder) / RESULT_FILE, result)
        return result


def batch_study_view(plan: dict[str, Any], records: dict[str, dict[str, Any]],
                     workers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``batch_study.json`` from the stored prompt records alone (prompts in plan order)."""
    order = [p["prompt_id"] for p in plan["prompts"]]
    done = [records[pid] for pid in order if pid in records]
    repeat = records[order[0]]["repeat_control"] if order and order[0] in records else None
    summary = batch_study_summary(done, repeat)
    model = plan["model"]
    first = done[0] if done else {}
    config = {"model": model.get("spec", model.get("source")), "dtype": model.get("dtype"),
              "device": first.get("device", model.get("device")), "layers": model.get("layers"),
              "model_seed": model.get("seed"), "generation": first.get("generation_defaults"),
              "settings": plan["settings"], "prompts": plan["prompts"], "signature_scheme": plan["signature_scheme"]}
    text: dict[str, str] = {}
    for record in done:
        text.update(record["canvas_token_text"])
    return {
        "study": "batch_size",
        "config": config,
        "environment": next((w["environment"] for w in workers.values() if "environment" in w), None),
        "equivalence_classes_per_prompt": summary["equivalence_classes_per_prompt"],
        "runs": summary["runs"],
        "repeat_control": repeat,
        "summary": summary["summary"],
        # Row 0's B=1 denoising path per prompt and the text of every token on a recorded path.
        "reference_canvas_paths": {r["prompt_id"]: r["reference_canvas_path"] for r in done},
        "canvas_token_text": dict(sorted(text.items(), key=lambda item: int(item[0]))),
        "complete": len(done) == len(order),
    }


def run_batch_study(loaded, prompts: list[Prompt], settings: BatchStudySettings, *, out_dir: str | Path | None = None,
                    progress: Callable[[int, int, str], None] | None = None, **engine: Any) -> dict[str, Any]:
    """Run (or resume) the study on ``loaded``; with ``out_dir`` every finished prompt is stored and a rerun
    resumes. ``progress(done, total, doing)`` counts finished prompts; ``engine``: ``run_study``'s options."""
    study = BatchSizeStudy(model_plan(loaded), prompts, settings, loaded=loaded)
    result, outcome = run_study(study, out_dir, progress=progress, **engine)
    if outcome.failed:  # a summary over the prompts that did run would read as the whole study's
        raise CanvaslabError(f"the batch-size study is incomplete: {outcome.line('prompts')}")
    return result
