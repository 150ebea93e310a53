"""The frequency-graded designs (plan schema ``/4``): where unused tokens sit on the training-frequency curve.

Why these designs exist. The ``/3`` designs compare unused tokens with one "rare" control, the least frequent
ordinary tokens of the training pool. On ``mini`` those occur once or twice in 57.5M training tokens, while
unused tokens occur never: "unused like rare" is then nearly built in, and the ordinary ids that never occur at
all were left out. The ``/4`` designs therefore

- grade the controls by training-token frequency (``STRATA``): ordinary ids never seen, seen 1-2 times, 3-10,
  11-100 and more than 100 times, each stratum every ordinary id of its count range in the counts file, its
  size written into the plan; unused tokens are compared with each stratum, and the answer is per stratum;
- fix the model's dtype at float32 for registration and run alike: bf16 log-probabilities of tail tokens
  differed between a CPU and a GPU by more than the margin (a run in another dtype is refused);
- add a later-pass arm (``later``): plants on a partly clean canvas, the one the model's own no-plant
  generation holds after pass ``k``, where ``k`` is the first pass whose accepted set covers at least
  ``COMMITTED_TARGET`` of the canvas (or the generation's last pass). The committed positions hold the
  model's accepted tokens, every other position its starting noise; plants go only at positions not
  committed whose first pass on that canvas predicts content. The outcome is the first pass from that canvas
  (one pass: the temperature of a first pass, no self-conditioning from the passes before).

Sizing and analysis are those of ``/3``, per prompt, over more comparisons: every stratum in both arms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from canvaslab.analysis.power import sd_upper_limit, tost_power, units_for_power
from canvaslab.errors import CanvaslabError

SCHEMA_ID = "canvaslab.noise-study.plan/4"
DTYPE = "float32"
ARMS = ("content", "later")  # the factor ``positions``: the first pass on the noise, one pass at a later canvas
COMMITTED_TARGET = 0.5
PER_COMPARISON_POWER = 0.9
SD_CONFIDENCE = 0.8
MIN_PROMPTS = 5
# (name, fewest, most training occurrences; None: no upper end). Ordinary ids only: specials and unused excluded.
STRATA: tuple[tuple[str, int, int | None], ...] = (
    ("never_seen", 0, 0), ("seen_1_2", 1, 2), ("seen_3_10", 3, 10), ("seen_11_100", 11, 100), ("common", 101, None))
STRATUM_NAMES = tuple(name for name, _, _ in STRATA)
TOKEN_CLASSES = ("unused", *STRATUM_NAMES)
COMPARISONS = tuple(("unused", name) for name in STRATUM_NAMES)
STRATA_RULE = ("every ordinary id (not unused, not special) whose count in the training pool's token-counts file "
               "lies in the stratum's range; a condition draws its tokens uniformly from its stratum")
LATER_RULE = (f"the no-plant generation (invariant mode, alone, the model's budget) of each prompt and seed; k = the "
              f"first pass whose accepted set covers at least {COMMITTED_TARGET:.0%} of the canvas, else its last pass; "
              "the canvas: the tokens accepted at pass k where accepted, the starting noise elsewhere; planted "
              "positions: those not accepted whose first pass on that canvas predicts an ordinary token")


@dataclass(frozen=True)
class GradedLevels:
    split: str
    per_regime: int | None  # None: sized from the pilot
    counts: tuple[int, ...]
    seeds: int
    why: str


DESIGNS: dict[str, GradedLevels] = {
    "graded-pilot": GradedLevels(
        split="exploratory", per_regime=2, counts=(3,), seeds=1,
        why="The pilot of the frequency-graded design: 2 prompts per regime of the suite's exploratory split x 1 "
            "seed x 3 planted tokens x 6 token classes (unused and 5 frequency strata) x 2 arms (first pass, later "
            "pass). It estimates the per-prompt sd of every comparison's paired differences; with one seed it "
            "overestimates the sd of the two-seed confirmatory design (a conservative size)."),
    "graded-confirmatory": GradedLevels(
        split="confirmatory", per_regime=None, counts=(3,), seeds=2,
        why="The confirmatory frequency-graded design: as the pilot with 2 seeds, on prompts of the suite's "
            "confirmatory split, as many as the pilot's variance asks for (capped by --max-prompts, the power then "
            "stated), taken in turn from each regime."),
    "graded-smoke": GradedLevels(
        split="exploratory", per_regime=1, counts=(1,), seeds=1,
        why="One prompt per regime, one seed: the graded design's machinery in seconds on a CPU, not a study."),
}


@dataclass
class GradedDesign:
    """What a ``/4`` plan adds to a ``/3`` plan's fields."""

    dtype: str
    strata: list[dict[str, Any]]  # name, range, ids (ascending), id count
    counts_source: dict[str, Any]  # the counts file: path, sha256, tokens
    later: dict[str, Any]  # rule, committed target, and per "prompt/s<seed>": pass, share, canvas, positions


def stratum_ids(counts: np.ndarray, ordinary: np.ndarray) -> list[dict[str, Any]]:
    """The strata of ``STRATA`` over the ordinary ids (``ordinary``: a mask over the vocabulary)."""
    if len(counts) != len(ordinary):
        raise CanvaslabError(f"--token-counts has {len(counts)} ids but the model's vocabulary has {len(ordinary)}: "
                             "count the training pool with the model's own tokenizer")
    strata = []
    for name, low, high in STRATA:
        inside = ordinary & (counts >= low) & (True if high is None else counts <= high)
        ids = [int(i) for i in np.flatnonzero(inside)]
        strata.append({"name": name, "range": [low, high], "ids": ids, "id_count": len(ids)})
    return strata


def check_strata(strata: list[dict[str, Any]]) -> None:
    empty = [s["name"] for s in strata if not s["ids"]]
    if empty:
        raise CanvaslabError(f"--token-counts: no ordinary id falls in the frequency strata {', '.join(empty)}: "
                             "the graded design needs every stratum")


class PassRecorder:
    """An accept observer keeping row 0's first-pass log-probabilities and, per pass, its accepted mask and canvas."""

    def __init__(self) -> None:
        self.first_logprobs: torch.Tensor | None = None
        self.masks: list[torch.Tensor] = []
        self.canvases: list[torch.Tensor] = []

    def on_accept(self, *, logits: torch.Tensor, accepted_mask: torch.Tensor, accepted_canvas: torch.Tensor,
                  **_: Any) -> None:
        if self.first_logprobs is None:
            self.first_logprobs = torch.log_softmax(logits[0].float(), dim=-1)
        self.masks.append(accepted_mask[0].detach().cpu().clone())
        self.canvases.append(accepted_canvas[0].detach().cpu().clone())


def later_canvas(noise: torch.Tensor, masks: list[torch.Tensor], canvases: list[torch.Tensor],
                 target: float = COMMITTED_TARGET) -> tuple[int, list[int], list[int]]:
    """The partly clean canvas of a no-plant generation: (k, 1-based; the canvas; its committed positions).

    ``masks``/``canvases``: the accepted mask and accepted canvas of each pass; ``noise``: the starting canvas."""
    if not masks:
        raise CanvaslabError("the no-plant generation ran no pass: there is no later canvas")
    length = noise.shape[0]
    shares = [int(mask.sum()) / length for mask in masks]
    k = next((index + 1 for index, share in enumerate(shares) if share >= target), len(masks))
    mask = masks[k - 1].bool()
    canvas = torch.where(mask, canvases[k - 1].to(noise.device), noise)
    return k, [int(t) for t in canvas.tolist()], [int(i) for i in torch.nonzero(mask).flatten().tolist()]


def check_graded_plan(plan: Any) -> None:
    """What the schema cannot say about a /4 plan, as one line."""
    graded = plan.graded
    if (plan.schema == SCHEMA_ID) != (graded is not None):
        raise CanvaslabError(f"plan.json: the graded design belongs to plan schema {SCHEMA_ID}, and only there")
    if graded is None:
        if "later" in plan.factors.positions:
            raise CanvaslabError(f"plan.json: position 'later' belongs to plan schema {SCHEMA_ID} only")
        return
    if graded.dtype != DTYPE:
        raise CanvaslabError(f"plan.json: graded.dtype must be {DTYPE}")
    keys = set(plan.first_pass.content_positions)
    largest, canvas = max(plan.factors.counts), plan.model.canvas_length
    for name in ("passes", "canvases", "content_positions"):
        if set(graded.later.get(name, {})) != keys:
            raise CanvaslabError(f"plan.json: graded.later.{name} must list every prompt and seed of the plan")
    for key in keys:
        tokens, where = graded.later["canvases"][key], graded.later["content_positions"][key]
        if len(tokens) != canvas or not all(0 <= t < plan.model.vocab_size for t in tokens):
            raise CanvaslabError(f"plan.json: graded.later.canvases[{key!r}] must hold {canvas} token ids")
        if len(set(where)) < largest or not all(0 <= p < canvas for p in where):
            raise CanvaslabError(f"plan.json: graded.later.content_positions[{key!r}] needs {largest} or more "
                                 f"distinct positions inside the canvas")


def refuse_dtype(plan: Any, dtype: str) -> str:
    """The dtype a /4 plan runs in: its own (``auto``), never another."""
    graded = getattr(plan, "graded", None)
    if graded is None:
        return dtype
    if dtype not in ("auto", graded.dtype):
        raise CanvaslabError(f"--dtype {dtype}: this plan fixes the outcome's dtype at {graded.dtype} (bf16 "
                             f"log-probabilities of tail tokens differ between devices by more than the margin); "
                             f"run it with --dtype {graded.dtype} or auto")
    return graded.dtype


def pilot_sds(effects: Any, where: Any, primary: str) -> tuple[dict[str, float], int]:
    """Every primary comparison's per-prompt sd (``arm: comparison`` -> sd) of a finished graded pilot."""
    bad = CanvaslabError(f"--pilot {where}: its report has no usable per-prompt sd of {primary} for every stratum "
                         f"and arm (finite, above 0, from at least {MIN_PROMPTS} prompts)")
    wanted = {f"{arm}: unused - {name}" for arm in ARMS for name in STRATUM_NAMES}
    found = {f"{e.get('arm')}: {e.get('comparison')}": e for e in effects or []
             if isinstance(e, dict) and e.get("outcome") == primary}
    if not wanted <= set(found):
        raise bad
    sds, prompts = {}, []
    for name in sorted(wanted):
        sd, n = found[name].get("sd"), found[name].get("n_pairs")
        if not _finite(sd) or sd <= 0 or isinstance(n, bool) or not isinstance(n, int) or n < MIN_PROMPTS:
            raise bad
        sds[name], prompts = float(sd), [*prompts, n]
    return sds, min(prompts)


def graded_size(statistics: dict[str, Any], margin: float, alpha: float, cap: int | None) -> dict[str, Any]:
    """The prompts the confirmatory design needs (TOST power per comparison at the pilot's upper sd), and the cap."""
    n_pilot = statistics["pilot_prompts"]
    planning_sd = max(sd_upper_limit(sd, n_pilot, SD_CONFIDENCE) for sd in statistics["pilot_sd"].values())
    needed = units_for_power(planning_sd, margin, PER_COMPARISON_POWER, alpha=alpha, at_least=MIN_PROMPTS)
    wanted = needed if cap is None or (needed is not None and needed <= cap) else cap
    return {**statistics, "planning_sd": planning_sd, "sd_confidence": SD_CONFIDENCE, "margin": margin,
            "alpha": alpha, "per_comparison_power_target": PER_COMPARISON_POWER, "prompts_needed": needed,
            "prompts_cap": cap, "prompts_wanted": wanted,
            "rule": f"planning sd = the largest one-sided {SD_CONFIDENCE:.0%} upper confidence limit of the pilot's "
                    "per-prompt sd over every stratum and arm; prompts = the fewest giving TOST power "
                    f"{PER_COMPARISON_POWER} per comparison at a true difference of 0, at least {MIN_PROMPTS}; at most "
                    "the cap the run's time allows (--max-prompts), the power then stated"}


def graded_power(size: dict[str, Any], prompts: int) -> dict[str, Any]:
    """The power the planned prompts give at the planning sd, and each comparison's at its own pilot sd's upper
    limit (one noisy comparison sets the planning sd; the others may be far better powered)."""
    margin, alpha, n_pilot = size["margin"], size["alpha"], size.get("pilot_prompts")
    per = tost_power(prompts, size["planning_sd"], margin, alpha=alpha)
    each = {}
    for name, sd in size.get("pilot_sd", {}).items():
        upper = sd_upper_limit(sd, n_pilot, SD_CONFIDENCE) if n_pilot else sd
        each[name] = {"sd_upper_limit": upper, "tost_power": tost_power(prompts, upper, margin, alpha=alpha),
                      "prompts_needed": units_for_power(upper, margin, PER_COMPARISON_POWER, alpha=alpha,
                                                        at_least=MIN_PROMPTS)}
    return {"prompts_planned": prompts, "tost_power_per_comparison": per,
            "meets_target": bool(per >= PER_COMPARISON_POWER - 1e-9), "per_comparison": each}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
