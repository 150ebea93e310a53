"""Run a registered noise-study plan: every condition alone, again inside a batch, resumable.

The conditions of each (prompt, seed, budget), in plan order, are cut into batches of ``batch_size``
(``planned_batches``). The batches depend on the plan and ``batch_size`` only, never on what a resumed
run still has to do: a condition's safeguard compares it inside the same batch whether the run was
interrupted or not, so a resumed run reports exactly what an uninterrupted one does. For each batch
holding a pending condition:

1. the matched no-plant baseline (the base noise, nothing planted), once per (prompt, seed, budget);
2. each pending condition alone, a batch of one: the analysed result. Its planted tokens go into the
   base noise through ``initial_canvas``; ``PlantedPositionObserver`` records what the model does there;
3. the whole batch as the rows of one batch (a lone condition twice), compared field by field with the
   single runs: the batch safeguard (``batch_safeguard``). Conditions of the batch already done are
   run again as rows, not recorded again.

Each finished condition is appended to ``results.jsonl`` with the plan hash it ran under
(``results_log``). The run refuses to start when ``plan.json`` no longer matches ``plan.sha256``, when the
results cite another plan hash (the plan changed after the first result), or when they were produced
under another mode, dtype, device type or batch size (mixing them would corrupt the paired analysis or
the safeguard). At the end it writes ``noise_study.json`` from the results file alone, conditions in plan
order: effects with CIs, TOST p-values and verdicts, the answer to the question, the safeguard counts
and the environment. Nothing in it depends on when the run was interrupted.
"""

from __future__ import annotations

from dataclasses import asdict
from itertools import groupby
from pathlib import Path
from typing import Any, Callable

import torch

from canvaslab.analysis.noise_study import class_means, conclusion, condition_outcomes, noise_study_effects
from canvaslab.environment import environment_fingerprint
from canvaslab.errors import CanvaslabError
from canvaslab.generation import generate
from canvaslab.invariant import generation_mode, replaced_ops
from canvaslab.io import write_json_atomic
from canvaslab.models import LoadedModel, load_model
from canvaslab.studies.unused_tokens.batch_safeguard import safeguard_entry, summarize_safeguard
from canvaslab.studies.unused_tokens.conditions import Condition, base_noise, enumerate_conditions
from canvaslab.studies.unused_tokens.plan import PLAN_FILE, NoisePlan, load_plan, plan_deviations
from canvaslab.studies.unused_tokens.planted_observer import Observation, PlantedPositionObserver
from canvaslab.studies.unused_tokens.results_log import ResultsLog
from canvaslab.studies.unused_tokens.vocab_scan import find_unused_tokens

RESULTS_FILE = "results.jsonl"
REPORT_FILE = "noise_study.json"
ProgressCallback = Callable[[int, int, str], None]


def load_plan_model(plan: NoisePlan, *, device: str = "cpu", dtype: str = "auto") -> LoadedModel:
    """The model the plan names, with this run's device and dtype."""
    return load_model(plan.model.spec, dtype=dtype, device=device, layers=plan.model.layers, seed=plan.model.model_seed)


def check_model_matches_plan(loaded: LoadedModel, plan: NoisePlan) -> None:
    """Refuse a model whose vocabulary, canvas, prompts' ids or generation defaults are not the plan's."""
    found = {
        "vocab_size": loaded.vocab_size,
        "canvas_length": loaded.model.config.canvas_length,
        "unused id blocks": [list(b) for b in find_unused_tokens(loaded.tokenizer).blocks],
        "prompt token ids": [list(loaded.tokenizer(p.text)["input_ids"]) for p in plan.factors.prompts],
        "generation defaults": loaded.generation_defaults,
    }
    planned = {
        "vocab_size": plan.model.vocab_size,
        "canvas_length": plan.model.canvas_length,
        "unused id blocks": plan.token_pools.unused_blocks,
        "prompt token ids": [p.token_ids for p in plan.factors.prompts],
        "generation defaults": plan.model.generation_defaults,
    }
    for name, value in planned.items():
        if found[name] != value:
            raise CanvaslabError(f"the loaded model's {name} differ from the plan's: this is not the model "
                                 f"{plan.model.spec!r} the plan was registered for")


def execution_settings(loaded: LoadedModel, mode: str, batch_size: int) -> dict[str, Any]:
    """What a run must keep constant across resumes: these change the numbers being compared."""
    return {"mode": mode, "dtype": str(loaded.model.dtype).removeprefix("torch."), "device_type": loaded.device.type,
            "batch_size": batch_size}


def _check_plan_unchanged(records: list[dict], plan_hash: str, results: Path) -> None:
    cited = sorted({str(r.get("plan_hash")) for r in records} - {plan_hash})
    if cited:
        raise CanvaslabError(f"{PLAN_FILE} changed after the first result was written: {results} cites plan "
                             f"{cited[0][:12]}..., the plan now hashes to {plan_hash[:12]}...; restore the "
                             "registered plan, or register the new one in a new folder")


def _check_same_execution(records: list[dict], execution: dict[str, Any], results: Path) -> None:
    if not records or records[0]["execution"] == execution:
        return
    theirs = records[0]["execution"]
    if "batch_size" not in theirs:
        raise CanvaslabError(f"{results} was written by an older canvaslab whose safeguard batches depended on "
                             "where a run was interrupted; resuming it would mix two batchings: run the plan "
                             "again in a new folder (copy plan.json and plan.sha256)")
    settings = ", ".join(f"{k} {v}" for k, v in theirs.items())
    flags = ", ".join(f"--{k.removesuffix('_type').replace('_', '-')} {v}" for k, v in theirs.items())
    raise CanvaslabError(f"{results} was produced with {settings}; resume with the same --mode, --dtype, --device "
                         f"and --batch-size ({flags}): mixing them would corrupt the paired analysis or the safeguard")


class _RowRunner:
    """Generates rows of one (prompt, seed, budget): planted conditions, or the no-plant baseline."""

    def __init__(self, loaded: LoadedModel, plan: NoisePlan, mode: str):
        self.loaded, self.plan, self.mode = loaded, plan, mode

    def _noise(self, condition: Condition) -> torch.Tensor:
        return base_noise(condition.seed, condition.stream, self.plan.model.canvas_length,
                          self.plan.model.vocab_size, self.loaded.device)

    def __call__(self, rows: list[Condition], plant: bool = True) -> list[Observation]:
        first, noise = rows[0], self._noise(rows[0])
        canvases = torch.stack([row.plant(noise) if plant else noise for row in rows])
        observer = PlantedPositionObserver([row.positions if plant else () for row in rows])
        planned = self.plan.generation
        output = generate(self.loaded, [first.prompt.token_ids] * len(rows), seed=first.seed, rng=planned["rng"],
                          requests=[row.stream for row in rows], observers=[observer], mode=self.mode,
                          generation={"max_denoising_steps": first.budget, "max_new_tokens": planned["max_new_tokens"]},
                          copy_prompt_cache=planned["copy_prompt_cache"], initial_canvas=canvases)
        return [observer.observation(i, row.tokens if plant else (), result)
                for i, (row, result) in enumerate(zip(rows, output.rows))]


def planned_batches(conditions: list[Condition], batch_size: int) -> list[list[Condition]]:
    """The safeguard's batches: each (prompt, seed, budget)'s conditions in plan order, cut every ``batch_size``.

    Built from all of the plan's conditions, not from those pending, so a condition's batch is the same
    in every run of the plan with this ``batch_size``, interrupted or not.
    """
    batches: list[list[Condition]] = []
    for _, group in groupby(conditions, key=lambda condition: condition.base_id):
        members = list(group)
        batches += [members[start:start + batch_size] for start in range(0, len(members), batch_size)]
    return batches


def _baseline_record(condition: Condition, observation: Observation, plan_hash: str, execution: dict) -> dict:
    return {"kind": "baseline", "plan_hash": plan_hash, "base_id": condition.base_id, "execution": execution,
            "observation": observation.to_record()}


def _condition_record(condition: Condition, single: Observation, copies: list[Observation], batch_rows: int,
                      baseline: dict, plan_hash: str, execution: dict) -> dict:
    observed = single.to_record()
    return {
        "kind": "condition", "plan_hash": plan_hash, "condition_id": condition.condition_id,
        "cell_id": condition.cell_id, "base_id": condition.base_id, "token_class": condition.token_class,
        "execution": execution, "observation": observed,
        "outcomes": condition_outcomes(observed, baseline["observation"], condition.budget),
        "safeguard": safeguard_entry(single, copies, batch_rows),
    }


def _run_batch(run: _RowRunner, batch: list[Condition], todo: list[Condition], baseline: dict, plan_hash: str,
               execution: dict) -> list[dict]:
    """Records for the ``todo`` conditions of ``batch``: each alone, and the whole batch as one batched run."""
    singles = [run([condition])[0] for condition in todo]
    rows = batch if len(batch) > 1 else batch * 2
    batched = run(rows)
    return [_condition_record(condition, single, [obs for row, obs in zip(rows, batched) if row is condition],
                              len(rows), baseline, plan_hash, execution)
            for condition, single in zip(todo, singles)]


def finished_conditions(records: list[dict], conditions: list[Condition]) -> list[dict]:
    """One results line per finished condition (the first, should a line repeat), in plan order.

    The report is computed from these, so it does not depend on the order the lines were written in.
    """
    order = {condition.condition_id: index for index, condition in enumerate(conditions)}
    first: dict[str, dict] = {}
    for record in records:
        if record["kind"] == "condition":
            first.setdefault(record["condition_id"], record)
    return sorted(first.values(), key=lambda record: order[record["condition_id"]])


def _report(plan: NoisePlan, plan_hash: str, records: list[dict], planned: list[Condition], loaded: LoadedModel,
            execution: dict) -> dict[str, Any]:
    conditions = finished_conditions(records, planned)
    outcomes = [o["name"] for o in plan.outcomes]
    effects = noise_study_effects(conditions, asdict(plan.analysis), outcomes)
    return {
        "study": "unused_tokens_noise",
        "plan_hash": plan_hash,
        "plan_file": PLAN_FILE,
        "question": plan.question,
        "design": plan.design,
        "conditions_total": len(planned),
        "conditions_run": len(conditions),
        "complete": len(conditions) == len(planned),
        "execution": execution,
        "class_means": class_means(conditions, outcomes),
        "effects": effects,
        "conclusion": conclusion(effects, plan.analysis.primary_outcome),
        "safeguard": summarize_safeguard(conditions),
        "deviations_from_plan": plan_deviations(plan),
        "environment": environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source,
                                               mode=execution["mode"], replaced_ops=replaced_ops(execution["mode"]),
                                               rng=plan.generation["rng"]),
    }


def run_noise_study(plan_dir: str | Path, loaded: LoadedModel | None = None, *, device: str = "cpu",
                    dtype: str = "auto", batch_size: int = 8, mode: str = "stock", limit: int | None = None,
                    progress: ProgressCallback | None = None) -> dict[str, Any]:
    """Run (or resume) the plan in ``plan_dir``; returns what it writes to ``noise_study.json``.

    ``loaded`` defaults to the plan's model on ``device``/``dtype``; ``limit`` caps the conditions run this
    time; ``progress(done, total, condition_id)`` is called after each condition's line is written.
    """
    if batch_size < 1 or (limit is not None and limit < 1):
        raise CanvaslabError(f"--batch-size and --limit must be at least 1 (got {batch_size} and {limit})")
    plan_dir = Path(plan_dir)
    plan, plan_hash = load_plan(plan_dir)
    log = ResultsLog(plan_dir / RESULTS_FILE)
    records = log.read()
    _check_plan_unchanged(records, plan_hash, log.path)
    loaded = loaded or load_plan_model(plan, device=device, dtype=dtype)
    check_model_matches_plan(loaded, plan)
    with generation_mode(loaded.model, mode):  # an unknown or unavailable mode fails here, before any run
        pass
    execution = execution_settings(loaded, mode, batch_size)
    _check_same_execution(records, execution, log.path)
    conditions = enumerate_conditions(plan)
    done = {r["condition_id"] for r in records if r["kind"] == "condition"}
    baselines = {r["base_id"]: r for r in records if r["kind"] == "baseline"}
    selected = {c.condition_id for c in [c for c in conditions if c.condition_id not in done][:limit]}
    run = _RowRunner(loaded, plan, mode)
    for batch in planned_batches(conditions, batch_size):
        todo = [condition for condition in batch if condition.condition_id in selected]
        if not todo:
            continue
        base = batch[0]
        if base.base_id not in baselines:
            observation = run([base], plant=False)[0]
            baselines[base.base_id] = log.append(_baseline_record(base, observation, plan_hash, execution))
        for record in _run_batch(run, batch, todo, baselines[base.base_id], plan_hash, execution):
            records.append(log.append(record))
            done.add(record["condition_id"])
            if progress is not None:
                progress(len(done), len(conditions), record["condition_id"])
    report = _report(plan, plan_hash, records, conditions, loaded, execution)
    write_json_atomic(plan_dir / REPORT_FILE, report)
    return report
