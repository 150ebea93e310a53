"""Build a ``/4`` (frequency-graded) plan: the strata from the counts file, then per prompt and seed the no-plant
generation that gives both arms' planted positions and the later arm's canvas (``graded`` explains the design).

The prompts come as in ``/3`` (``first_pass_plan``): in turn from each regime of the suite's split, in the suite's
seeded rank order. A prompt is left out, with the reason, when either arm of either seed has fewer content
positions than the largest count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from canvaslab.choices import SUITE_REGIMES
from canvaslab.errors import CanvaslabError
from canvaslab.generation import generate
from canvaslab.models import LoadedModel
from canvaslab.scoring.probes import load_probe_suite
from canvaslab.scoring.prompting import encode_prompt, uses_chat_template
from canvaslab.studies.unused_tokens import first_pass, graded
from canvaslab.studies.unused_tokens.conditions import base_noise
from canvaslab.studies.unused_tokens.first_pass_plan import CONTENT_MODE, _in_turn, _not_content
from canvaslab.studies.unused_tokens.model_facts import ModelFacts
from canvaslab.studies.unused_tokens.plan import QUESTION, Analysis, Factors, NoisePlan, PlannedPrompt
from canvaslab.studies.unused_tokens.token_pools import TokenPools, file_sha256, ordinary_ids
from canvaslab.studies.unused_tokens.vocab_scan import load_token_counts

DECISION_RULE = (
    "Unit of analysis: the prompt. For each arm (first pass on the noise: 'content'; one pass at the later canvas: "
    "'later'), each comparison (unused - stratum, for every frequency stratum) and each outcome: the mean over the "
    "prompt's matched cells (count x seed) of the cell's difference, a position-level outcome first averaged over "
    "the cell's planted positions. Over prompts: mean difference with a 95% t interval, TOST against +-margin and "
    "the two-sided t-test beside it ('equivalent', 'different', 'inconclusive'; fewer than 5 prompts: "
    "'insufficient data'). The answer is per arm and stratum, on the primary outcome: 'equivalent' (TOST), "
    "'lower' or 'higher' (the 95% interval wholly beyond -margin or +margin), else 'undecided'; an 'equivalent' "
    "whose two-sided test is significant is flagged beside it, never changed. Unused tokens sit on the frequency "
    "curve where they are equivalent to a stratum, or between the strata they are higher and lower than. No "
    "multiplicity correction: each stratum's answer is its own, at its own power.")


def _counts_source(path: Path, counts: np.ndarray) -> dict[str, Any]:
    return {"file": str(path), "sha256": file_sha256(path), "tokens": int(counts.sum())}


def graded_strata(pools: TokenPools, vocab: int, token_counts: str | Path | None) -> tuple[list[dict], dict]:
    """The frequency strata from the counts file (required) and its provenance."""
    if token_counts is None:
        raise CanvaslabError("the graded designs need --token-counts (the training pool's token_counts.npy): "
                             "the strata are training frequencies")
    path = Path(token_counts)
    if not path.is_file():
        raise CanvaslabError(f"--token-counts {path}: no such file")
    counts = load_token_counts(path)
    ordinary = np.zeros(vocab, dtype=bool)
    ordinary[ordinary_ids(pools, vocab)] = True
    strata = graded.stratum_ids(counts, ordinary)
    graded.check_strata(strata)
    return strata, _counts_source(path, counts)


def _one_pass(loaded: LoadedModel, ids: list[int], key: str, seed: int, canvas: torch.Tensor) -> torch.Tensor:
    capture = first_pass.FirstPassCapture()
    generate(loaded, [ids], seed=seed, rng="row", requests=[key], observers=[capture], mode=CONTENT_MODE,
             generation={"max_denoising_steps": 1, "max_new_tokens": canvas.shape[0]}, initial_canvas=canvas[None])
    return capture.logprobs[0]


def _arms_of(loaded: LoadedModel, ids: list[int], prompt_id: str, seed: int, facts: ModelFacts,
             skip: set[int]) -> dict[str, Any]:
    """One prompt and seed: the first arm's content positions and the later arm's canvas and positions."""
    noise = base_noise(seed, prompt_id, facts.canvas_length, facts.vocab_size, loaded.device)
    recorder = graded.PassRecorder()
    generate(loaded, [ids], seed=seed, rng="row", requests=[prompt_id], observers=[recorder], mode=CONTENT_MODE,
             generation={"max_new_tokens": facts.canvas_length}, initial_canvas=noise[None])
    first, special = first_pass.content_positions(recorder.first_logprobs, skip)
    k, canvas, committed = graded.later_canvas(noise.cpu(), recorder.masks, recorder.canvases)
    later_logprobs = _one_pass(loaded, ids, prompt_id, seed, torch.tensor(canvas, device=loaded.device))
    predicted, _ = first_pass.content_positions(later_logprobs, skip)
    taken = set(committed)
    return {"first": first, "special": special, "pass": k, "canvas": canvas, "committed": committed,
            "share": len(committed) / facts.canvas_length, "later": [p for p in predicted if p not in taken]}


def _choose(loaded: LoadedModel, facts: ModelFacts, pools: TokenPools, levels: graded.GradedLevels, suite: str,
            seeds: list[int], wanted: int | None) -> tuple[list[PlannedPrompt], dict[str, dict], list[dict]]:
    regimes = list(SUITE_REGIMES[suite])
    probes = load_probe_suite(regimes, levels.split, seed=seeds[0], suite=suite)
    quota = {regime: levels.per_regime for regime in regimes} if levels.per_regime is not None else None
    skip, largest = _not_content(pools, facts.vocab_size), max(levels.counts)
    chosen, found, excluded = [], {}, []
    for probe in _in_turn(probes, regimes):
        if (quota is not None and quota[probe.regime] == 0) or (wanted is not None and len(chosen) >= wanted):
            continue
        ids = encode_prompt(loaded.tokenizer, probe.prompt)
        arms = {first_pass.base_key(probe.probe_id, seed): _arms_of(loaded, ids, probe.probe_id, seed, facts, skip)
                for seed in seeds}
        few = [f"{key} {arm}" for key, got in arms.items() for arm in ("first", "later") if len(got[arm]) < largest]
        if few:
            excluded.append({"prompt_id": probe.probe_id, "regime": probe.regime,
                             "reason": f"fewer than {largest} content positions ({few[0]})"})
            continue
        chosen.append(PlannedPrompt(probe.probe_id, probe.prompt, ids))
        found.update(arms)
        if quota is not None:
            quota[probe.regime] -= 1
    return chosen, found, excluded


def build_graded_plan(loaded: LoadedModel, facts: ModelFacts, pools: TokenPools, *, design: str, seed: int,
                      margin: float | None, suite: str, statistics: dict[str, Any] | None,
                      token_counts: str | Path | None, max_prompts: int | None) -> NoisePlan:
    """The ``/4`` plan of ``design`` for the loaded (float32) model; ``statistics``: the graded pilot's."""
    if str(loaded.model.dtype) != f"torch.{graded.DTYPE}":
        raise CanvaslabError(f"the graded designs register in {graded.DTYPE}: give --dtype {graded.DTYPE} or auto")
    levels = graded.DESIGNS[design]
    strata, source = graded_strata(pools, facts.vocab_size, token_counts)
    if statistics is not None and statistics["pilot_counts_sha256"] != source["sha256"]:
        raise CanvaslabError("--pilot: its strata come from another --token-counts file: give the pilot's")
    margins = dict(first_pass.MARGINS, **({first_pass.PRIMARY_OUTCOME: float(margin)} if margin else {}))
    analysis = Analysis(comparisons=[list(pair) for pair in graded.COMPARISONS],
                        primary_outcome=first_pass.PRIMARY_OUTCOME, margins=margins, alpha=0.05, ci_level=0.95,
                        decision_rule=DECISION_RULE)
    size = None if statistics is None else graded.graded_size(statistics, margins[first_pass.PRIMARY_OUTCOME],
                                                              analysis.alpha, max_prompts)
    seeds = [seed + i for i in range(levels.seeds)]
    prompts, found, excluded = _choose(loaded, facts, pools, levels, suite, seeds,
                                       None if size is None else size["prompts_wanted"])
    if len(prompts) < graded.MIN_PROMPTS and design != "graded-smoke":
        raise CanvaslabError(f"only {len(prompts)} prompts of suite {suite!r} ({levels.split}) have enough content "
                             f"positions in both arms; the design needs at least {graded.MIN_PROMPTS}")
    if size is not None:
        size = {**size, **graded.graded_power(size, len(prompts))}
    keys = sorted(found)
    design_record = first_pass.FirstPassDesign(
        suite=suite, split=levels.split, regimes=list(SUITE_REGIMES[suite]),
        chat_template=uses_chat_template(loaded.tokenizer), neighbour_radius=first_pass.NEIGHBOUR_RADIUS,
        content_positions={key: found[key]["first"] for key in keys},
        baseline_special_share={key: found[key]["special"] for key in keys}, excluded_prompts=excluded,
        margin_why=first_pass.MARGIN_WHY, power=size,
        registration={"mode": CONTENT_MODE, "device_type": loaded.device.type, "dtype": graded.DTYPE,
                      "dtype_asked": graded.DTYPE, "torch": torch.__version__})
    later = {"rule": graded.LATER_RULE, "committed_target": graded.COMMITTED_TARGET,
             "passes": {key: found[key]["pass"] for key in keys},
             "committed_share": {key: found[key]["share"] for key in keys},
             "canvases": {key: found[key]["canvas"] for key in keys},
             "content_positions": {key: found[key]["later"] for key in keys}}
    factors = Factors(token_classes=list(graded.TOKEN_CLASSES), counts=list(levels.counts),
                      positions=list(graded.ARMS), prompts=prompts, seeds=seeds, budgets=[1])
    generation = {"rng": "row", "copy_prompt_cache": False, "max_new_tokens": facts.canvas_length,
                  "budget_sets": "max_denoising_steps (1: one pass is the measurement, from the noise or from the "
                                 "later canvas)",
                  "other_settings": f"the model's generation_defaults in {graded.DTYPE}; prompts encoded with "
                                    f"{'its chat template' if design_record.chat_template else 'no chat template'}"}
    safeguard = {"compared": ["tokens", "stop", "accept_passes", "predictions", "entropy", "logits", "first_pass"],
                 "rule": "the safeguard fires for a condition when any compared field of its checking run differs "
                         "from its analysed run, bit for bit", "why": first_pass.SAFEGUARD_WHY}
    pools = TokenPools(pools.unused_blocks, pools.excluded_ids, pools.rare_ids, pools.rare_source,
                       strata={s["name"]: s["ids"] for s in strata})
    return NoisePlan(schema=graded.SCHEMA_ID, question=QUESTION, design=design, design_why=levels.why, seed=seed,
                     model=facts, generation=generation, factors=factors, token_pools=pools,
                     outcomes=[dict(o) for o in first_pass.OUTCOMES], analysis=analysis, safeguard=safeguard,
                     first_pass=design_record,
                     graded=graded.GradedDesign(dtype=graded.DTYPE, counts_source=source, later=later,
                                                strata=[{k: v for k, v in s.items() if k != "ids"} for s in strata]))


def graded_summary(plan: NoisePlan) -> list[str]:
    """What registration prints about a /4 plan beyond the /3 lines."""
    later = plan.graded.later
    shares = list(later["committed_share"].values())
    strata = ", ".join(f"{s['name']} {s['id_count']:,}" for s in plan.graded.strata)
    lines = [f"frequency strata (ids): {strata}; outcome dtype {plan.graded.dtype}",
             f"later arm: the canvas after pass k (k {min(later['passes'].values())}-{max(later['passes'].values())}), "
             f"{sum(shares) / len(shares):.0%} of the canvas committed on average"]
    power = plan.first_pass.power
    if power is not None:
        needed = "more than 100,000" if power["prompts_needed"] is None else power["prompts_needed"]
        lines.append(f"sized from the pilot: planning sd {power['planning_sd']:.3f} nats, {needed} prompts needed, "
                     f"{power['prompts_planned']} planned (cap {power['prompts_cap']}): TOST power "
                     f"{power['tost_power_per_comparison']:.2f} per comparison")
    return lines


def graded_pilot_statistics(pilot_dir: Path, facts: ModelFacts, suite: str) -> dict[str, Any]:
    """Every primary comparison's per-prompt sd, read from a finished graded pilot of the same model and suite."""
    from canvaslab.studies.unused_tokens.first_pass import _pilot_report
    from canvaslab.studies.unused_tokens.plan import load_plan

    plan, digest = load_plan(pilot_dir)
    if plan.schema != graded.SCHEMA_ID or plan.design != "graded-pilot":
        raise CanvaslabError(f"--pilot {pilot_dir}: holds a {plan.design!r} plan ({plan.schema}), not a graded-pilot "
                             f"of {graded.SCHEMA_ID}")
    if plan.model != facts:
        raise CanvaslabError(f"--pilot {pilot_dir}: its model ({plan.model.spec}, weights {plan.model.weights}) is not "
                             f"this plan's ({facts.spec}, weights {facts.weights})")
    if plan.first_pass.suite != suite:
        raise CanvaslabError(f"--pilot {pilot_dir}: its prompts come from suite {plan.first_pass.suite!r}, not "
                             f"{suite!r}: give the pilot's --suite")
    report, report_sha = _pilot_report(pilot_dir, digest)
    sds, prompts = graded.pilot_sds(report.get("effects"), pilot_dir, plan.analysis.primary_outcome)
    return {"pilot_plan_sha256": digest, "pilot_report_sha256": report_sha, "pilot_sd": sds,
            "pilot_prompts": prompts, "pilot_counts_sha256": plan.graded.counts_source["sha256"]}
