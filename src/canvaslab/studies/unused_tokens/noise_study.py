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

The study runs on the study engine: a unit is a condition, a group is one (prompt, seed, budget), whose
no-plant baseline is generated once per group run. Each finished condition's record (with the plan hash
it ran under) is stored by the engine (``DIR/store``). The engine's plan is the registered plan's hash
plus what must stay constant across resumes (mode, dtype, device type, batch size): a rerun with another
one, or after ``plan.json`` was re-registered in place, is refused naming the field. At the end
``noise_study.json`` is written from the stored records alone, conditions in plan order: effects with
CIs, TOST p-values and verdicts, the answer to the question, the safeguard counts and the environment.
Nothing in it depends on when the run was interrupted, nor on which executor ran it.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict
from itertools import groupby
from pathlib import Path
from typing import Any, Callable

import torch

from canvaslab.choices import NOISE_BATCH_SIZE
from canvaslab.analysis.noise_study import (arm_of, class_means, conclusion, condition_outcomes, first_pass_conclusion,
                                            graded_conclusion, graded_effects, matched_cells, noise_study_effects,
                                            per_prompt_differences, prompt_of)
from canvaslab.environment import environment_fingerprint
from canvaslab.errors import CanvaslabError
from canvaslab.generation import generate
from canvaslab.invariant import generation_mode, mode_named, replaced_ops
from canvaslab.io import write_json_atomic
from canvaslab.models import LoadedModel, load_model
from canvaslab.scoring.prompting import encode_prompt
from canvaslab.studies.engine import Study, run_study, write_stored_views
from canvaslab.studies.engine.plan import registered_plan, start_fresh
from canvaslab.studies.unused_tokens.batch_safeguard import safeguard_entry, summarize_safeguard
from canvaslab.studies.unused_tokens.conditions import Condition, base_noise, enumerate_conditions, later_canvas_tokens
from canvaslab.studies.unused_tokens.graded import refuse_dtype
from canvaslab.studies.unused_tokens.first_pass import MIN_PROMPTS, FirstPassCapture
from canvaslab.studies.unused_tokens.plan import HASH_FILE, PLAN_FILE, NoisePlan, load_plan, plan_deviations
from canvaslab.studies.unused_tokens.planted_observer import Observation, PlantedPositionObserver
from canvaslab.studies.unused_tokens.vocab_scan import find_unused_tokens

OLD_RESULTS_FILE = "results.jsonl"  # the results log before the study engine
# The default design's 36 conditions of one (prompt, seed, budget) as one safeguard batch: one batched
# run per group instead of five at 8 rows. A pass costs about as much host time at 36 rows as at 8 on a GPU
# (a mini pass is launch-bound), and a batch of 36 mini canvases needs well under a GiB.
REPORT_FILE = "noise_study.json"
ProgressCallback = Callable[[int, int, str], None]


def load_plan_model(plan: NoisePlan, *, device: str = "cpu", dtype: str = "auto") -> LoadedModel:
    """The model the plan names, with this run's device and dtype."""
    return load_model(plan.model.spec, dtype=dtype, device=device, layers=plan.model.layers, seed=plan.model.model_seed)


def _encoded(loaded: LoadedModel, plan: NoisePlan, text: str) -> list[int]:
    """A prompt's ids as the plan encoded them: /3 plans through the chat template where there is one."""
    if plan.first_pass is not None:
        return encode_prompt(loaded.tokenizer, text)
    return list(loaded.tokenizer(text)["input_ids"])


def check_model_matches_plan(loaded: LoadedModel, plan: NoisePlan) -> None:
    """Refuse a model whose vocabulary, canvas, prompts' ids or generation defaults are not the plan's."""
    found = {
        "vocab_size": loaded.vocab_size,
        "canvas_length": loaded.model.config.canvas_length,
        "unused id blocks": [list(b) for b in find_unused_tokens(loaded.tokenizer).blocks],
        "prompt token ids": [_encoded(loaded, plan, p.text) for p in plan.factors.prompts],
        "generation defaults": loaded.generation_defaults,
    }
    planned = {
        "vocab_size": plan.model.vocab_size,
        "canvas_length": plan.model.canvas_length,
        "unused id blocks": plan.token_pools.unused_blocks,
        "prompt token ids": [p.token_ids for p in plan.factors.prompts],
        "generation defaults": plan.model.generation_defaults,
    }
    if plan.model.weights is not None:  # the same name may stand for retrained weights (models.weights)
        found["weights"], planned["weights"] = loaded.source.get("weights"), plan.model.weights
    for name, value in planned.items():
        if found[name] != value:
            shown = f" ({found[name]}, the plan's {value})" if name == "weights" else ""
            raise CanvaslabError(f"the loaded model's {name} differ from the plan's{shown}: this is not the model "
                                 f"{plan.model.spec!r} the plan was registered for")


def execution_settings(loaded: LoadedModel, mode: str, batch_size: int) -> dict[str, Any]:
    """What a run must keep constant across resumes: these change the numbers being compared."""
    return {"mode": mode, "dtype": str(loaded.model.dtype).removeprefix("torch."), "device_type": loaded.device.type,
            "batch_size": batch_size}


class _RowRunner:
    """Generates rows of one (prompt, seed, budget): planted conditions, or the no-plant baseline."""

    def __init__(self, loaded: LoadedModel, plan: NoisePlan, mode: str):
        self.loaded, self.plan, self.mode = loaded, plan, mode

    def _noise(self, condition: Condition) -> torch.Tensor:
        """The canvas a condition plants into: the base noise, or the later arm's registered canvas (/4)."""
        if condition.position == "later":
            tokens = later_canvas_tokens(self.plan, condition.prompt.prompt_id, condition.seed)
            return torch.tensor(tokens, dtype=torch.long, device=self.loaded.device)
        return base_noise(condition.seed, condition.stream, self.plan.model.canvas_length,
                          self.plan.model.vocab_size, self.loaded.device)

    def __call__(self, rows: list[Condition], plant: bool = True, reference: torch.Tensor | None = None,
                 capture: FirstPassCapture | None = None) -> list[Observation]:
        """``reference``: the group's no-plant first-pass log-probabilities (/3 plans); ``capture`` keeps this
        run's (row 0's) first-pass log-probabilities."""
        first, noise = rows[0], self._noise(rows[0])
        canvases = torch.stack([row.plant(noise) if plant else noise for row in rows])
        radius = self.plan.first_pass.neighbour_radius if self.plan.first_pass else 0
        observer = PlantedPositionObserver([row.positions if plant else () for row in rows],
                                           [row.tokens if plant else () for row in rows], reference, radius)
        planned = self.plan.generation
        output = generate(self.loaded, [first.prompt.token_ids] * len(rows), seed=first.seed, rng=planned["rng"],
                          requests=[row.stream for row in rows], observers=[observer, *([capture] if capture else [])],
                          mode=self.mode, copy_prompt_cache=planned["copy_prompt_cache"], initial_canvas=canvases,
                          generation={"max_denoising_steps": first.budget, "max_new_tokens": planned["max_new_tokens"]})
        return [observer.observation(i, row.tokens if plant else (), result)
                for i, (row, result) in enumerate(zip(rows, output.rows))]

    def baseline(self, member: Condition) -> tuple[dict, torch.Tensor | None]:
        """The group's no-plant run: its record, and its first-pass log-probabilities where the plan needs them."""
        capture = FirstPassCapture() if self.plan.first_pass else None
        observation = self([member], plant=False, capture=capture)[0]
        return {"observation": observation.to_record()}, None if capture is None else capture.logprobs[0]


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


def analysed_run(mode: str) -> str:
    """Which run of a condition is analysed: in invariant mode its batched row (the alone run checks it: they
    must be equal bit for bit), otherwise the condition alone (the batched rows check it)."""
    return "batched" if mode_named(mode).batch_invariant else "alone"


def _condition_record(condition: Condition, alone: Observation, copies: list[Observation], batch_rows: int,
                      baseline: dict, plan_hash: str, execution: dict) -> dict:
    analysed = copies[0] if analysed_run(execution["mode"]) == "batched" else alone
    observed = analysed.to_record()
    return {
        "kind": "condition", "plan_hash": plan_hash, "condition_id": condition.condition_id,
        "cell_id": condition.cell_id, "base_id": condition.base_id, "token_class": condition.token_class,
        "execution": execution, "observation": observed,
        "outcomes": condition_outcomes(observed, baseline["observation"], condition.budget),
        "safeguard": safeguard_entry(alone, copies, batch_rows),
    }


def _run_batch(run: _RowRunner, batch: list[Condition], todo: list[Condition], baseline: dict,
               reference: torch.Tensor | None, plan_hash: str, execution: dict) -> list[dict]:
    """Records for the ``todo`` conditions of ``batch``: each alone, and the whole batch as one batched run."""
    singles = [run([condition], reference=reference)[0] for condition in todo]
    rows = batch if len(batch) > 1 else batch * 2
    batched = run(rows, reference=reference)
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


def _report(plan: NoisePlan, plan_hash: str, records: list[dict], planned: list[Condition],
            environment: dict | None, execution: dict) -> dict[str, Any]:
    conditions = finished_conditions(records, planned)
    outcomes = [o["name"] for o in plan.outcomes]
    if plan.graded is not None:
        return _graded_report(plan, plan_hash, conditions, planned, environment, execution, outcomes)
    if plan.first_pass is not None:
        return _first_pass_report(plan, plan_hash, conditions, planned, environment, execution, outcomes)
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
        "execution": dict(sorted(execution.items())),  # as registered, whoever wrote the report
        "class_means": class_means(conditions, outcomes),
        "effects": effects,
        "conclusion": conclusion(effects, plan.analysis.primary_outcome),
        "safeguard": summarize_safeguard(conditions),
        "deviations_from_plan": plan_deviations(plan),
        "environment": environment,
    }


def _first_pass_report(plan: NoisePlan, plan_hash: str, conditions: list[dict], planned: list[Condition],
                       environment: dict | None, execution: dict, outcomes: list[str]) -> dict[str, Any]:
    """A /3 plan's report: effects over prompts, the decision table, the safeguard of this run's mode."""
    analysis = asdict(plan.analysis)
    effects = noise_study_effects(conditions, analysis, outcomes, unit="prompt", min_units=MIN_PROMPTS)
    cells = matched_cells(conditions)
    primary = analysis["primary_outcome"]
    shares = list(plan.first_pass.baseline_special_share.values())
    return {
        "study": "unused_tokens_noise", "plan_hash": plan_hash, "plan_file": PLAN_FILE, "schema": plan.schema,
        "question": plan.question, "design": plan.design, "conditions_total": len(planned),
        "conditions_run": len(conditions), "complete": len(conditions) == len(planned),
        "execution": dict(sorted(execution.items())), "analysed_run": analysed_run(execution["mode"]),
        "unit": "prompt", "prompts": len({prompt_of(cell) for cell in cells}),
        "class_means": class_means(conditions, outcomes), "effects": effects,
        "per_prompt": {f"{a} - {b}": per_prompt_differences(cells, a, b, primary) for a, b in analysis["comparisons"]},
        "conclusion": first_pass_conclusion(effects, primary),
        "safeguard": summarize_safeguard(conditions, plan.safeguard["compared"]),
        "first_pass": {"suite": plan.first_pass.suite, "split": plan.first_pass.split,
                       "chat_template": plan.first_pass.chat_template,
                       "no_plant_special_share": sum(shares) / len(shares) if shares else None,
                       "excluded_prompts": len(plan.first_pass.excluded_prompts), "power": plan.first_pass.power},
        "deviations_from_plan": plan_deviations(plan), "environment": environment,
    }


def _graded_report(plan: NoisePlan, plan_hash: str, conditions: list[dict], planned: list[Condition],
                   environment: dict | None, execution: dict, outcomes: list[str]) -> dict[str, Any]:
    """A /4 plan's report: the /3 report's fields, with effects, class means and answers per arm and stratum."""
    report = _first_pass_report(plan, plan_hash, conditions, planned, environment, execution, outcomes)
    analysis = asdict(plan.analysis)
    arms = {arm: [c for c in conditions if arm_of(c) == arm] for arm in plan.factors.positions}
    effects = graded_effects(arms, analysis, outcomes, min_units=MIN_PROMPTS)
    primary = analysis["primary_outcome"]
    per_prompt = {f"{arm}: {a} - {b}": per_prompt_differences(matched_cells(records), a, b, primary)
                  for arm, records in arms.items() for a, b in analysis["comparisons"]}
    later = plan.graded.later
    shares = list(later["committed_share"].values())
    return {**report, "effects": effects, "per_prompt": per_prompt,
            "class_means": {arm: class_means(records, outcomes) for arm, records in arms.items()},
            "conclusion": graded_conclusion(effects, primary),
            "graded": {"dtype": plan.graded.dtype, "strata": plan.graded.strata,
                       "later_passes": sorted(set(later["passes"].values())),
                       "later_committed_share": sum(shares) / len(shares) if shares else None}}


class NoiseStudy(Study):
    """The registered plan in ``plan_dir`` as the engine runs it (see the module docstring)."""

    name = "unused_tokens"
    unit_label = "conditions"

    def __init__(self, plan_dir: Path, plan: NoisePlan, plan_hash: str, execution: dict[str, Any], device: str,
                 loaded: LoadedModel | None = None):
        self.plan_dir, self.registered, self.plan_hash = Path(plan_dir), plan, plan_hash
        self.execution, self.device, self.loaded = execution, device, loaded

    def __getstate__(self):
        return {**self.__dict__, "loaded": None}

    def plan(self) -> dict[str, Any]:
        return {"registered_plan_sha256": self.plan_hash, "execution": self.execution}

    def conditions(self) -> list[Condition]:
        return enumerate_conditions(self.registered)

    def units(self) -> list[str]:
        return [condition.condition_id for condition in self.conditions()]

    @staticmethod
    def units_of_plan(plan: dict[str, Any], folder: Path) -> list[str]:
        """The condition ids of the plan registered in ``folder`` (``plan`` only names it by its hash, which must be
        the folder's plan's: else the store's records were made under another plan, refused in one line)."""
        registered, digest = load_plan(folder)
        cited = str(plan["registered_plan_sha256"])
        if digest != cited:
            raise CanvaslabError(f"{folder}: its store was made under plan {cited[:12]}..., but its plan.json is plan "
                                 f"{digest[:12]}...: the plan was replaced after the study ran; restore it, or run "
                                 "the study again in a new folder")
        return [condition.condition_id for condition in enumerate_conditions(registered)]

    def groups(self) -> list[list[str]]:
        return [[c.condition_id for c in group]
                for _, group in groupby(self.conditions(), key=lambda condition: condition.base_id)]

    def prepare(self) -> _RowRunner:
        loaded = self.loaded or load_plan_model(self.registered, device=self.device, dtype=self.execution["dtype"])
        check_model_matches_plan(loaded, self.registered)
        return _RowRunner(loaded, self.registered, self.execution["mode"])

    def worker_info(self, run: _RowRunner) -> dict[str, Any]:
        mode = self.execution["mode"]
        return {"environment": environment_fingerprint(run.loaded.model, run.loaded.device,
                                                       model_source=run.loaded.source, mode=mode,
                                                       replaced_ops=replaced_ops(mode),
                                                       rng=self.registered.generation["rng"])}

    def run_group(self, run: _RowRunner, group: list[str], todo: list[str]):
        """The group's baseline once, then each planned safeguard batch holding a ``todo`` condition."""
        members = [c for c in self.conditions() if c.condition_id in set(group)]
        baseline, reference = run.baseline(members[0])
        for batch in planned_batches(members, self.execution["batch_size"]):
            pending = [condition for condition in batch if condition.condition_id in todo]
            if pending:
                for record in _run_batch(run, batch, pending, baseline, reference, self.plan_hash, self.execution):
                    yield record["condition_id"], record

    def write_views(self, folder, records, workers) -> dict[str, Any]:
        environment = next((w["environment"] for w in workers.values() if "environment" in w), None)
        report = _report(self.registered, self.plan_hash, list(records.values()), self.conditions(), environment,
                         self.execution)
        write_json_atomic(Path(folder) / REPORT_FILE, report)
        return report


def _refuse_old_results(plan_dir: Path) -> None:
    if (plan_dir / OLD_RESULTS_FILE).exists():
        raise CanvaslabError(f"{plan_dir / OLD_RESULTS_FILE} was written by an older canvaslab (before the study "
                             "engine); run the plan in a new folder (copy plan.json and plan.sha256)")


def run_noise_study(plan_dir: str | Path, loaded: LoadedModel | None = None, *, device: str = "cpu",
                    dtype: str = "auto", batch_size: int = NOISE_BATCH_SIZE, mode: str = "stock",
                    limit: int | None = None, progress: ProgressCallback | None = None, **engine: Any) -> dict[str, Any]:
    """Run (or resume) the plan in ``plan_dir``; returns what it writes to ``noise_study.json``.

    ``loaded`` defaults to the plan's model on ``device``/``dtype``; ``limit`` caps the conditions run this
    time; ``progress(done, total, doing)`` counts finished conditions; ``engine``: ``run_study``'s options.
    """
    if batch_size < 1 or (limit is not None and limit < 1):
        raise CanvaslabError(f"--batch-size and --limit must be at least 1 (got {batch_size} and {limit})")
    plan_dir = Path(plan_dir)
    plan, plan_hash = load_plan(plan_dir)
    dtype = refuse_dtype(plan, dtype)  # before any model loads
    if loaded is not None and plan.graded is not None and str(loaded.model.dtype) != f"torch.{dtype}":
        raise CanvaslabError(f"the model is loaded in {loaded.model.dtype}, this plan runs in {dtype} only")
    _refuse_old_results(plan_dir)
    if engine.pop("fresh", False):  # start the registered plan over: the old folder is kept, its plan copied back
        kept = start_fresh(plan_dir)
        plan_dir.mkdir()
        for name in (PLAN_FILE, HASH_FILE):
            shutil.copy2(kept / name, plan_dir / name)
    if engine.get("executor", "local") == "local":
        loaded = loaded or load_plan_model(plan, device=device, dtype=dtype)
        check_model_matches_plan(loaded, plan)
        with generation_mode(loaded.model, mode):  # an unknown or unavailable mode fails here, before any run
            pass
        execution = execution_settings(loaded, mode, batch_size)
    else:
        execution = {"mode": mode, "dtype": _dtype_name(plan, dtype), "device_type": device.split(":")[0],
                     "batch_size": batch_size}
    study = NoiseStudy(plan_dir, plan, plan_hash, execution, device, loaded=loaded)
    report, outcome = run_study(study, plan_dir, progress=progress, limit=limit, **engine)
    report = dict(report)
    report["outcome"] = {"ran": outcome.ran, "skipped": outcome.skipped, "failed": outcome.failed,
                         "by_others": outcome.by_others}
    return report


def report_noise_study(plan_dir: str | Path) -> dict[str, Any]:
    """Write ``noise_study.json`` from the conditions stored so far, running nothing (``complete`` is false
    while some are missing: the plan's decision rule is for the whole design)."""
    plan_dir = Path(plan_dir)
    plan, plan_hash = load_plan(plan_dir)
    _refuse_old_results(plan_dir)
    registered = registered_plan(plan_dir)
    if registered is None:
        raise CanvaslabError(f"nothing has run in {plan_dir} yet: `canvaslab noise-study run {plan_dir}` first")
    plan_part = registered.get("plan") if isinstance(registered, dict) else None
    execution = plan_part.get("execution") if isinstance(plan_part, dict) else None
    if not isinstance(execution, dict) or "device_type" not in execution or registered.get("study") != NoiseStudy.name:
        raise CanvaslabError(f"{plan_dir} holds the results of another study, not this noise study's")
    study = NoiseStudy(plan_dir, plan, plan_hash, execution, execution["device_type"])
    try:
        return write_stored_views(study, plan_dir)
    except OSError as error:  # e.g. a folder where noise_study.json or the store's records folder should be
        raise CanvaslabError(f"cannot read or write in {plan_dir}: {error}") from None


def _dtype_name(plan: NoisePlan, dtype: str) -> str:
    """The dtype a worker will load the plan's model in (``auto``: the model's own), without loading it."""
    if dtype != "auto":
        return dtype
    from canvaslab.models.presets import PRESETS

    preset = PRESETS.get(plan.model.spec)
    if preset is None:
        raise CanvaslabError("--executor ray needs --dtype for a model that is not a preset")
    return str(preset.default_dtype).removeprefix("torch.")


def _synchronize(loaded: LoadedModel) -> None:
    if loaded.device.type == "cuda":
        torch.cuda.synchronize(loaded.device)


def time_arms(plan_dir: str | Path, loaded: LoadedModel, *, batch_size: int = NOISE_BATCH_SIZE,
              groups: int | None = None) -> dict[str, Any]:
    """Wall time of a registered plan's conditions two ways, nothing stored: every condition as a row of its
    planned batches in invariant mode (how ``run --mode invariant`` gets its analysed results) against every
    condition alone in stock mode (the seeds' remedy: one sample at a time). The arms alternate group by group
    (a prompt and seed), so drift in the machine's speed falls on both; each group's no-plant baseline is run
    outside the timing. ``groups`` caps the groups timed (the first ones, in plan order)."""
    plan, _ = load_plan(plan_dir)
    check_model_matches_plan(loaded, plan)
    chosen = [list(members) for _, members in groupby(enumerate_conditions(plan), key=lambda c: c.base_id)][:groups]
    seconds = {"batched_invariant": 0.0, "alone_stock": 0.0}
    for members in chosen:
        for arm, mode, batched in (("batched_invariant", "invariant", True), ("alone_stock", "stock", False)):
            run = _RowRunner(loaded, plan, mode)
            _, reference = run.baseline(members[0])
            _synchronize(loaded)
            started = time.perf_counter()
            for rows in (planned_batches(members, batch_size) if batched else [[c] for c in members]):
                run(rows, reference=reference)
            _synchronize(loaded)
            seconds[arm] += time.perf_counter() - started
    conditions = sum(len(members) for members in chosen)
    return {"groups": len(chosen), "conditions": conditions, "batch_size": batch_size, "seconds": seconds,
            "conditions_per_s": {arm: conditions / value if value else None for arm, value in seconds.items()},
            "speedup_batched_invariant": seconds["alone_stock"] / seconds["batched_invariant"]
            if seconds["batched_invariant"] else None}
