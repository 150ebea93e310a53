"""Build a ``/3`` plan: choose the prompts, find their content positions, size the confirmatory design.

Registration runs the model once per prompt and seed: the first pass of the matched no-plant canvas (the base
noise, nothing planted), alone, in invariant mode. Its argmax says which canvas positions the model fills with
content; those positions, and nothing the conditions will produce, go into the plan. The prompts come in turn
from each regime of the suite's split, in the suite's seeded rank order, so a design is the same on every
machine.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterator

import torch

from canvaslab.choices import SUITE_REGIMES
from canvaslab.errors import CanvaslabError
from canvaslab.generation import generate
from canvaslab.models import LoadedModel
from canvaslab.scoring.probes import Probe, load_probe_suite
from canvaslab.scoring.prompting import encode_prompt, uses_chat_template
from canvaslab.studies.unused_tokens import first_pass
from canvaslab.studies.unused_tokens.conditions import base_noise
from canvaslab.studies.unused_tokens.model_facts import ModelFacts
from canvaslab.studies.unused_tokens.plan import (QUESTION, Analysis, Factors, NoisePlan, PlannedPrompt,
                                                  TOKEN_CLASSES)
from canvaslab.studies.unused_tokens.token_pools import TokenPools

CONTENT_MODE = "invariant"  # a batch of one; invariant so the positions are those the analysed rows see


def _in_turn(probes: list[Probe], regimes: list[str]) -> Iterator[Probe]:
    """The probes, one per regime in turn, each regime in its rank order."""
    queues = {regime: [p for p in probes if p.regime == regime] for regime in regimes}
    while any(queues.values()):
        for regime in regimes:
            if queues[regime]:
                yield queues[regime].pop(0)


def _no_plant_first_pass(loaded: LoadedModel, token_ids: list[int], prompt_id: str, seed: int, canvas: int,
                         vocab: int) -> Any:
    capture = first_pass.FirstPassCapture()
    noise = base_noise(seed, prompt_id, canvas, vocab, loaded.device)
    generate(loaded, [token_ids], seed=seed, rng="row", requests=[prompt_id], observers=[capture],
             mode=CONTENT_MODE, generation={"max_denoising_steps": 1, "max_new_tokens": canvas},
             initial_canvas=noise[None])
    return capture.logprobs[0]


def _not_content(pools: TokenPools, vocab: int) -> set[int]:
    return set(pools.excluded_ids) | {int(i) for i in pools.ids("unused", vocab)}


def _choose_prompts(loaded: LoadedModel, facts: ModelFacts, pools: TokenPools, levels: first_pass.FirstPassLevels,
                    suite: str, seeds: list[int], wanted: int | None) -> tuple[list[PlannedPrompt], dict, dict, list]:
    regimes = list(SUITE_REGIMES[suite])
    probes = load_probe_suite(regimes, levels.split, seed=seeds[0], suite=suite)
    quota = {regime: levels.per_regime for regime in regimes} if levels.per_regime is not None else None
    skip, largest = _not_content(pools, facts.vocab_size), max(levels.counts)
    chosen, positions, special, excluded = [], {}, {}, []
    for probe in _in_turn(probes, regimes):
        if (quota is not None and quota[probe.regime] == 0) or (wanted is not None and len(chosen) >= wanted):
            continue
        ids = encode_prompt(loaded.tokenizer, probe.prompt)
        found = {}
        for seed in seeds:
            logprobs = _no_plant_first_pass(loaded, ids, probe.probe_id, seed, facts.canvas_length, facts.vocab_size)
            found[first_pass.base_key(probe.probe_id, seed)] = first_pass.content_positions(logprobs, skip)
        few = [key for key, (where, _) in found.items() if len(where) < largest]
        if few:
            excluded.append({"prompt_id": probe.probe_id, "regime": probe.regime,
                             "reason": f"fewer than {largest} content positions in the no-plant first pass ({few[0]})"})
            continue
        chosen.append(PlannedPrompt(probe.probe_id, probe.prompt, ids))
        positions.update({key: where for key, (where, _) in found.items()})
        special.update({key: share for key, (_, share) in found.items()})
        if quota is not None:
            quota[probe.regime] -= 1
    return chosen, positions, special, excluded


def check_choices(design: str, margin: float | None, seed: int, pilot: Path | None) -> None:
    """The /3 options' rules, before any model loads."""
    if (design == "confirmatory") != (pilot is not None):
        raise CanvaslabError("--pilot DIR is needed by --design confirmatory, and only by it: the confirmatory "
                             "design is sized from its pilot's variance")
    if margin is not None and not (margin > 0 and math.isfinite(margin)):
        raise CanvaslabError(f"--margin must be a positive finite number, got {margin}")
    if seed < 0:
        raise CanvaslabError(f"--seed must be >= 0, got {seed}")


def build_first_pass_plan(loaded: LoadedModel, facts: ModelFacts, pools: TokenPools, *, design: str, seed: int,
                          margin: float | None, suite: str, statistics: dict[str, Any] | None,
                          dtype: str) -> NoisePlan:
    """The ``/3`` plan of ``design`` (``pilot``, ``confirmatory``, ``smoke``) for the loaded model;
    ``statistics``: the pilot's (``first_pass.pilot_statistics``), for the confirmatory design."""
    levels = first_pass.DESIGNS[design]
    margins = dict(first_pass.MARGINS, **({first_pass.PRIMARY_OUTCOME: float(margin)} if margin else {}))
    analysis = Analysis(comparisons=[["unused", "random"], ["unused", "rare"]],
                        primary_outcome=first_pass.PRIMARY_OUTCOME, margins=margins, alpha=0.05, ci_level=0.95,
                        decision_rule=first_pass.DECISION_RULE)
    size = None
    if statistics is not None:
        size = first_pass.confirmatory_size(statistics, margins[first_pass.PRIMARY_OUTCOME], analysis.alpha)
    seeds = [seed + i for i in range(levels.seeds)]
    prompts, positions, special, excluded = _choose_prompts(
        loaded, facts, pools, levels, suite, seeds, None if size is None else size["prompts_needed"])
    if len(prompts) < first_pass.MIN_PROMPTS and design != "smoke":
        raise CanvaslabError(f"only {len(prompts)} prompts of suite {suite!r} ({levels.split}) have enough content "
                             f"positions; the design needs at least {first_pass.MIN_PROMPTS}")
    if size is not None:
        size = {**size, **first_pass.achieved_power(size, len(prompts))}
    design_record = first_pass.FirstPassDesign(
        suite=suite, split=levels.split, regimes=list(SUITE_REGIMES[suite]),
        chat_template=uses_chat_template(loaded.tokenizer), neighbour_radius=first_pass.NEIGHBOUR_RADIUS,
        content_positions=positions, baseline_special_share=special, excluded_prompts=excluded,
        margin_why=first_pass.MARGIN_WHY, power=size,
        registration={"mode": CONTENT_MODE, "device_type": loaded.device.type,
                      "dtype": str(loaded.model.dtype).removeprefix("torch."), "dtype_asked": dtype,
                      "torch": torch.__version__})
    factors = Factors(token_classes=list(TOKEN_CLASSES), counts=list(levels.counts), positions=["content"],
                      prompts=prompts, seeds=seeds, budgets=[1])
    generation = {"rng": "row", "copy_prompt_cache": False, "max_new_tokens": facts.canvas_length,
                  "budget_sets": "max_denoising_steps (1: the first pass is the measurement)",
                  "other_settings": f"the model's generation_defaults; prompts encoded with "
                                    f"{'its chat template' if design_record.chat_template else 'no chat template'}"}
    safeguard = {"compared": ["tokens", "stop", "accept_passes", "predictions", "entropy", "logits", "first_pass"],
                 "rule": "the safeguard fires for a condition when any compared field of its checking run differs "
                         "from its analysed run, bit for bit", "why": first_pass.SAFEGUARD_WHY}
    return NoisePlan(schema=first_pass.SCHEMA_ID, question=QUESTION, design=design, design_why=levels.why,
                     seed=seed, model=facts, generation=generation, factors=factors, token_pools=pools,
                     outcomes=[dict(o) for o in first_pass.OUTCOMES], analysis=analysis, safeguard=safeguard,
                     first_pass=design_record)


def summary_of(plan: NoisePlan) -> dict[str, Any]:
    """What registration prints about a ``/3`` plan."""
    design = plan.first_pass
    shares = list(design.baseline_special_share.values())
    return {"prompts": len(plan.factors.prompts), "excluded": len(design.excluded_prompts),
            "chat_template": design.chat_template,
            "special_share": sum(shares) / len(shares) if shares else None,
            "power": asdict(design)["power"]}
