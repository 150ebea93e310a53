"""Synthetic study folders for the report tests, written in each study's own file format.

Batch studies carry planted differences (B >= 3 commits other tokens from pass 2 on), so the expected
canvas-grid counts are known. Order metrics and noise-study effects are computed by canvaslab's own
analysis code from synthetic traces and paired differences, not written by hand.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from canvaslab.analysis.tost import paired_equivalence
from canvaslab.analysis.order_metrics import compute_order_metrics
from canvaslab.io import write_json_atomic
from canvaslab.capture.commit_trace import AcceptCall, GenerationTrace, write_traces

ENVIRONMENT = {"device": "synthetic CPU", "dtype": "float32", "torch": "2.13.0", "transformers": "5.23.0"}


def _accepted(rng, width: int, step: int, passes: int) -> list[bool]:
    """More positions accepted as the passes go on."""
    return (rng.random(width) < (step + 1) / (passes + 1)).tolist()


def canvas_path(tokens: np.ndarray, accepted: list[list[bool]]) -> dict:
    return {"canvas_length": tokens.shape[1], "passes": [
        {"canvas": 0, "step": k, "tokens": tokens[k].tolist(), "accepted": "".join("1" if a else "0" for a in mask),
         "entropy": [round(0.01 * (i % 300), 4) for i in range(tokens.shape[1])]} for k, mask in enumerate(accepted)]}


def write_batch_study(folder, batch_sizes=(1, 2, 3, 4), passes=5, width=256, layers=2, prompts=1,
                      record_path=True, mode="stock"):
    """A batch_study.json; returns {(prompt, B): (tokens, accepted)} of every path, B=1 included."""
    rng = np.random.default_rng(0)
    runs, references, paths = [], {}, {}
    for p in range(prompts):
        prompt = f"builtin-{p}"
        tokens = rng.integers(0, 512, size=(passes, width))
        accepted = [_accepted(rng, width, k, passes) for k in range(passes)]
        references[prompt] = canvas_path(tokens, accepted)
        paths[(prompt, 1)] = (tokens, accepted)
        for b in batch_sizes[1:]:
            run_tokens = tokens.copy()
            if b >= 3:
                run_tokens[2:, : 5 + b % 7] += 1  # planted: other tokens at the first positions from pass 2 on
            paths[(prompt, b)] = (run_tokens, accepted)
            diverged = b >= 3
            spread = [{"pass": f"canvas 0 pass {k}", "canvas": 0, "step": k, "canvas_positions": width,
                       "layers": {f"layer {i}": (width // (layers - i) if diverged and k >= 1 else 0) for i in range(layers)}}
                      for k in range(passes)]
            record = {
                "prompt_id": prompt, "batch_size": b, "fill": "copies", "diverged": diverged, "text_changed": b >= 4,
                "stop_changed": False,
                "first_divergence": {"pass": "canvas 0 pass 1", "canvas": 0, "phase": "decoder", "step": 1,
                                     "call": "model.decoder.layers.0.router.proj", "kind": "module", "shape": [1, width, 8],
                                     "fraction_changed": 0.01, "max_abs_diff": 1e-7} if diverged else None,
                "origin": {"name": "model.decoder.layers.0.router.proj::linear", "kind": "op", "op": "linear",
                           "inputs_identical": True, "explanation": "created here"} if diverged else None,
                "router_scores_changed_pct": 0.051 if diverged else None,
                "final_logits_changed_pct": 98.82 if diverged else None,
                "spread_pass": "canvas 0 pass 1" if diverged else None,
                "positions_with_difference_per_layer": spread[1]["layers"] if diverged else {},
                "canvas_positions": width, "passes_total": passes, "passes_matching": 1 if diverged else passes,
                "bytes_compared": 1000 * passes, "structure_changed": None, "row0_left_padded": False,
                "passes_not_compared": [], "signature": "s" if not diverged else f"s{b}",
                "reference": {"text": "a", "tokens": [], "stop_passes": [passes], "passes": [passes], "eos_position": None},
                "run": {"text": "b" if b >= 4 else "a", "tokens": [], "stop_passes": [passes], "passes": [passes],
                        "eos_position": None},
            }
            if record_path:
                record["spread_per_pass"] = spread
                record["canvas_path"] = canvas_path(run_tokens, accepted)
            runs.append(record)
    classes = [[1, 2], *[[b] for b in batch_sizes[2:]]]
    data = {
        "study": "batch_size", "environment": {**ENVIRONMENT, "mode": mode},
        "config": {"prompts": [{"prompt_id": f"builtin-{p}", "text": "x"} for p in range(prompts)]},
        "equivalence_classes_per_prompt": {f"builtin-{p}": classes for p in range(prompts)},
        "runs": runs,
        "summary": {"runs": len(runs), "diverged": sum(r["diverged"] for r in runs),
                    "text_changed": sum(r["text_changed"] for r in runs), "stop_changed": 0,
                    "passes_total": sum(r["passes_total"] for r in runs),
                    "passes_matching": sum(r["passes_matching"] for r in runs),
                    "bytes_compared": sum(r["bytes_compared"] for r in runs), "equivalence_classes": classes,
                    "repeat_control_identical": True},
    }
    if record_path:
        data["reference_canvas_paths"] = references
        data["canvas_token_text"] = {str(i): f"tok{i}" for i in range(520)}
    write_json_atomic(folder / "batch_study.json", data)
    return paths


def write_order_study(folder, generations=24, regimes=("math", "factual"), calls=6, width=256, n_bootstrap=50):
    rng = np.random.default_rng(1)
    traces = []
    for g in range(generations):
        regime = regimes[g % len(regimes)]
        order = np.argsort(np.arange(width) + rng.normal(0, 40, width))
        content = (np.arange(width) < 200).tolist()
        call_list = []
        for c in range(calls):
            accepted = sorted(order[: (c + 1) * width // calls].tolist())
            if c == 2 and g % 3 == 0:
                accepted = accepted[1:]  # an un-accept
            call_list.append(AcceptCall(step=calls - c, accepted=accepted,
                                        entropy=np.round(rng.random(width) * 3, 3).tolist()))
        index = g // len(regimes)  # the regime's index-th generation: prompt index // 3, seed index % 3
        prompt = f"{regime}-{index // 3}"
        traces.append(GenerationTrace(f"{prompt}#{index % 3}", regime, prompt, index % 3, calls, content, call_list,
                                      correct=bool(rng.random() < 0.5),
                                      extra={"prompt": f"question {prompt}", "text": f"answer {g}"}))
    write_traces(folder / "traces.jsonl", traces)
    metrics = compute_order_metrics(folder / "traces.jsonl", n_bootstrap=n_bootstrap)
    baseline = {regime: {"n": 4, "n_scored": 4, "accuracy": 0.75} for regime in regimes}
    write_json_atomic(folder / "baseline.json", {"regimes": baseline, "generations": [
        {"probe_id": t.prompt_id, "regime": t.regime, "text": f"baseline says {t.prompt_id}", "correct": True}
        for t in traces if t.seed == 0]})
    write_json_atomic(folder / "order_metrics.json", {**metrics, "environment": {**ENVIRONMENT, "mode": "stock"},
                                                      "baseline": {"file": "baseline.json", "regimes": baseline}})
    return metrics


OUTCOMES = {"first_pass_keeps": 0.05, "final_replaced": 0.05, "first_entropy": 0.25, "text_changed": 0.1}


def write_noise_study(folder):
    rng = np.random.default_rng(2)
    plan = {"question": "do unused tokens act as masks?", "analysis": {"margins": OUTCOMES}}
    text = __import__("json").dumps(plan, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).hexdigest()
    (folder / "plan.json").write_text(text)
    (folder / "plan.sha256").write_text(f"{digest}  plan.json\n")
    effects = []
    for comparison in ("unused - frequent", "unused - rare"):
        for outcome, margin in OUTCOMES.items():
            test = paired_equivalence(rng.normal(0, margin / 4, 40).tolist(), margin)
            effects.append({"comparison": comparison, "outcome": outcome, "primary": outcome == "first_pass_keeps", **test})
    write_json_atomic(folder / "noise_study.json", {
        "study": "unused_tokens_noise", "plan_hash": digest, "conditions_total": 80, "conditions_run": 80,
        "effects": effects, "conclusion": {"answer": "no", "text": "equivalent on the primary outcome"},
        "safeguard": {"compared": 80, "fired": 3, "by_field": {"tokens": 2, "logits": 3}, "outcome_fields_changed": 2,
                      "fired_conditions": ["a", "b", "c"], "batch_rows": [4]},
        "environment": {**ENVIRONMENT, "mode": "stock"}})
    return effects


OPS = [f"op {i}" for i in range(17)]


def write_op_scan(folder, batch_sizes=(1, 2, 3, 4, 5, 8, 16, 32)):
    sizes = list(batch_sizes)
    stock = {op: {"shape": "(256, 64)", "classes": [sizes[: 1 + i % 3], sizes[1 + i % 3:]] if i % 2 else [sizes],
                  "invariant": not i % 2} for i, op in enumerate(OPS)}
    invariant = {op: {"shape": "(256, 64)", "classes": [sizes], "invariant": True} for op in OPS}
    write_json_atomic(folder / "op_scan.json", {"environment": ENVIRONMENT, "scans": [
        {"mode": "stock", "batch_sizes": sizes, "ops": stock}, {"mode": "invariant", "batch_sizes": sizes, "ops": invariant}]})
    return stock


@pytest.fixture(scope="module")
def study_folders(tmp_path_factory):
    """Every study in one folder each, plus an invariant-mode batch study for side-by-side columns."""
    root = tmp_path_factory.mktemp("studies")
    folders = {name: root / name for name in ("stock", "invariant", "order", "noise", "ops")}
    for folder in folders.values():
        folder.mkdir()
    paths = write_batch_study(folders["stock"])
    write_batch_study(folders["invariant"], mode="invariant")
    write_order_study(folders["order"])
    write_noise_study(folders["noise"])
    write_op_scan(folders["ops"])
    return {"folders": folders, "paths": paths}


@pytest.fixture(scope="session")
def writers():
    """The synthetic study writers above, for tests that need their own variant of a folder."""
    from types import SimpleNamespace

    return SimpleNamespace(batch_study=write_batch_study, order_study=write_order_study,
                           noise_study=write_noise_study, op_scan=write_op_scan)
