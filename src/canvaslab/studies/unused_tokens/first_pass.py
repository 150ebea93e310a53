"""The first-pass designs (plan schema ``/3``): an outcome with variance, prompts in the model's own format,
planted where the model is answering, and a confirmatory size that comes from a pilot's variance.

Why these designs exist. The ``/2`` designs' primary outcome is binary (the first pass's argmax at a planted
position equals the planted token); a small model that never predicts a planted token back gives it zero
variance, and every run ends "inconclusive" by construction. They also plant in thirds of the canvas, while a
model answering a short question predicts ``<pad>`` over most of the canvas: a plant there asks a model that is
not answering. The ``/3`` designs therefore

- encode each prompt with the model's chat template where its tokenizer has one (``scoring.prompting``), taking
  the prompts from a probe suite, the pilot from its exploratory split and the confirmatory run from its
  confirmatory split (disjoint by construction);
- plant only at *content positions*: canvas positions where the matched no-plant canvas's first pass predicts an
  ordinary token (not a special or unused id). They are computed once, when the plan is registered, by running
  that first pass for every prompt and seed (the only model run before the plan exists), and written into the
  plan; prompts with fewer content positions than the largest count are left out and listed with the reason;
- measure, at each planted position, how much the plant raises the log-probability the model gives the planted
  token there (``planted_logprob_boost``, the primary outcome), and how far it moves its neighbours'
  distributions (``neighbour_kl``);
- analyse per prompt (the independent unit), with the number of prompts sized from a pilot's standard
  deviation (``confirmatory_size``).

The first pass does not depend on the denoising budget (the decoder has no time input and the first pass always
runs at the largest temperature scale), so the ``/3`` designs run one pass per condition (budget 1).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from canvaslab.analysis.power import sd_upper_limit, t_test_power, tost_power, units_for_power
from canvaslab.errors import CanvaslabError
from canvaslab.io import MiB, NotRegularFile, UnreadableFile, parse_json, read_bytes

SCHEMA_ID = "canvaslab.noise-study.plan/3"
PRIMARY_OUTCOME = "planted_logprob_boost"
NEIGHBOUR_RADIUS = 2
MIN_PROMPTS = 5  # fewer independent prompts give no interval (the decision rule says "insufficient data")
PLANNED_POWER = 0.8  # for the joint answer; each of the two comparisons is sized for PER_COMPARISON_POWER
PER_COMPARISON_POWER = 0.9  # two comparisons at 0.9 each: both succeed with probability >= 0.8 (union bound)
SD_CONFIDENCE = 0.8  # the pilot's sd enters the sizing as its one-sided 80% upper confidence limit
REPORT_LIMIT = 64 * MiB
MAX_PILOT_PROMPTS = 100_000
MAX_RADIUS = 16
COMPARISONS = ("unused - random", "unused - rare")


@dataclass(frozen=True)
class FirstPassLevels:
    """One ``/3`` design: where its prompts come from and how many conditions each gets."""

    split: str
    per_regime: int | None  # None: sized from the pilot (the confirmatory design)
    counts: tuple[int, ...]
    seeds: int
    why: str


DESIGNS: dict[str, FirstPassLevels] = {
    "pilot": FirstPassLevels(
        split="exploratory", per_regime=2, counts=(1, 3), seeds=2,
        why="The pilot: 2 prompts per regime from the suite's exploratory split x 2 seeds x 2 counts (one token; "
            "three) x 3 token classes. It estimates the per-prompt standard deviation of the primary outcome's "
            "paired differences, from which the confirmatory design is sized; its prompts are never used again "
            "(the confirmatory design draws from the confirmatory split)."),
    "confirmatory": FirstPassLevels(
        split="confirmatory", per_regime=None, counts=(1, 3), seeds=2,
        why="The confirmatory design: as the pilot, on prompts of the suite's confirmatory split, as many as the "
            "pilot's variance asks for (see first_pass.power), taken in turn from each regime."),
    "smoke": FirstPassLevels(
        split="exploratory", per_regime=1, counts=(1, 2), seeds=1,
        why="One prompt per regime, one seed: the design's machinery in seconds on a CPU, not a study."),
}

OUTCOMES: tuple[dict[str, str], ...] = (
    {"name": "planted_logprob_boost", "level": "position", "unit": "nats",
     "definition": "first pass, the sampler's distribution: log p(planted token at its position | planted canvas) "
                   "minus log p(the same token at the same position | the matched no-plant canvas). An ordinary "
                   "token the model reads as content is predicted back more readily once it is there (a boost); "
                   "a symbol the model reads as 'no content here', as it reads its mask, gives no boost"},
    {"name": "neighbour_kl", "level": "position", "unit": "nats",
     "definition": f"first pass: KL(planted || no-plant) of the distributions at the positions within "
                   f"{NEIGHBOUR_RADIUS} of a planted position (planted ones excluded), averaged over them: how much "
                   "the plant is read by its context"},
    {"name": "first_pass_keeps", "level": "position", "unit": "proportion",
     "definition": "the first pass's argmax at a planted position equals the planted token"},
    {"name": "first_entropy", "level": "position", "unit": "nats",
     "definition": "entropy of the sampler's distribution at a planted position on the first pass"},
)
MARGINS = {"planted_logprob_boost": 0.25, "neighbour_kl": 0.05, "first_pass_keeps": 0.05, "first_entropy": 0.1}
MARGIN_WHY = (
    "planted_logprob_boost: 0.25 nats, a factor exp(0.25) = 1.28 in the probability the model gives a token back "
    "at its own position. A hidden mask symbol would differ from an ordinary token by whole nats (an ordinary "
    "token read as content is typically predicted back with several times its no-plant probability; a mask-like "
    "symbol with none of that); a difference under 28% in how much a planted token is echoed is smaller than "
    "the differences between ordinary tokens of different frequency, so it would not make a symbol a mask. "
    "neighbour_kl: 0.05 nats of mean divergence at the neighbours, about a tenth of a typical first-pass "
    "entropy at content positions. first_pass_keeps and first_entropy keep the /2 margins.")
DECISION_RULE = (
    "Unit of analysis: the prompt. For each prompt, each comparison (unused - random, unused - rare) and each "
    "outcome: the mean over the prompt's matched cells (count x seed) of the cell's difference, a position-level "
    "outcome first averaged over the cell's planted positions. Over prompts: mean difference with a 95% t "
    "confidence interval and TOST against +-margin, verdicts as in canvaslab.analysis.tost ('equivalent', "
    "'different', 'inconclusive'); fewer than 5 prompts: 'insufficient data' (no interval from fewer). "
    "Answer, from the primary outcome's two verdicts (vs random, vs rare): "
    "both 'different' with unused lower than both controls -> 'yes' (unused tokens are read less as content than "
    "ordinary tokens, as a mask would be); both 'equivalent' -> 'no'; lower than random and equivalent to rare -> "
    "'like rare tokens' (what separates unused tokens is their frequency, not a mask role); equivalent to random "
    "and lower than rare -> 'no' (rare tokens, not unused ones, stand out); unused higher than a control (a "
    "'different' verdict with a positive mean) -> 'no' (read more as content: the opposite of a mask); 'different' "
    "from both with opposite signs -> 'between the controls'; any 'inconclusive' or 'insufficient data' -> "
    "'inconclusive'. 'Lower' and 'higher' need more than a significant difference: the 95% interval must lie wholly "
    "beyond -margin or +margin (a difference that may be smaller than the margin decides nothing, and counts as "
    "'inconclusive' in the table); 'equivalent' is the TOST verdict. Secondary outcomes are reported by the same "
    "rule, without multiplicity correction.")
SAFEGUARD_WHY = (
    "mode invariant: the analysed result of each condition is its row of a batched run (the conditions of one "
    "prompt and seed, cut into batches of --batch-size); the safeguard runs each condition alone and must find "
    "it equal bit for bit (0 firings expected). mode stock: the analysed result is the condition alone; the "
    "safeguard runs it as a row of the same batches and counts the differences (the batch dependence seed 000 "
    "found). Both counts are reported.")


@dataclass
class FirstPassDesign:
    """What a ``/3`` plan adds to the ``/2`` fields."""

    suite: str
    split: str
    regimes: list[str]
    chat_template: bool
    neighbour_radius: int
    content_positions: dict[str, list[int]]  # "prompt_id/s<seed>" -> canvas positions, ascending
    baseline_special_share: dict[str, float]  # "prompt_id/s<seed>" -> share of canvas positions predicted special
    excluded_prompts: list[dict[str, str]]
    margin_why: str
    registration: dict[str, Any]  # how the content positions were computed: mode, device type, dtype, torch
    power: dict[str, Any] | None = field(default=None)


def base_key(prompt_id: str, seed: int) -> str:
    return f"{prompt_id}/s{seed}"


class FirstPassCapture:
    """An accept observer keeping row 0's first-pass log-probabilities (float32, on the model's device)."""

    def __init__(self) -> None:
        self.logprobs: torch.Tensor | None = None

    def on_accept(self, *, logits: torch.Tensor, **_: Any) -> None:
        if self.logprobs is None:
            self.logprobs = torch.log_softmax(logits.float(), dim=-1)


def first_pass_outcomes(logprobs: torch.Tensor, reference: torch.Tensor, positions: list[int],
                        planted: list[int], radius: int = NEIGHBOUR_RADIUS) -> dict[str, list[float | None]]:
    """Per planted position: the planted token's log-probability boost over ``reference`` (the no-plant first
    pass) and the mean KL(planted || no-plant) at its neighbours (None when it has none that are not planted).
    ``logprobs``, ``reference``: ``(canvas, vocab)`` log-probabilities of one row."""
    length, taken = logprobs.shape[0], set(positions)
    boosts, divergences = [], []
    for position, token in zip(positions, planted):
        boosts.append(float(logprobs[position, token] - reference[position, token]))
        neighbours = [j for j in range(position - radius, position + radius + 1)
                      if 0 <= j < length and j not in taken]
        if not neighbours:
            divergences.append(None)
            continue
        index = torch.tensor(neighbours, device=logprobs.device)
        own, ref = logprobs.index_select(0, index), reference.index_select(0, index)
        divergences.append(float((own.exp() * (own - ref)).sum(dim=-1).mean()))
    return {"boost": boosts, "neighbour_kl": divergences}


def content_positions(logprobs: torch.Tensor, not_content: set[int]) -> tuple[list[int], float]:
    """Canvas positions whose first-pass argmax is an ordinary token, and the share predicted otherwise."""
    predicted = logprobs.argmax(dim=-1).tolist()
    positions = [i for i, token in enumerate(predicted) if token not in not_content]
    return positions, 1.0 - len(positions) / len(predicted)


def _pilot_report(pilot_dir: Path, digest: str) -> tuple[dict[str, Any], str]:
    """The pilot's finished report (bounded, no link followed) and the sha256 of the bytes parsed."""
    from canvaslab.studies.unused_tokens.noise_study import REPORT_FILE

    path = pilot_dir / REPORT_FILE
    try:
        raw = read_bytes(path, max_bytes=REPORT_LIMIT)
        report = parse_json(raw, source=path)
    except (OSError, ValueError, NotRegularFile, UnreadableFile) as error:
        raise CanvaslabError(f"--pilot {pilot_dir}: no readable {REPORT_FILE} ({error}): run the pilot to the end "
                             "first") from None
    if not isinstance(report, dict) or report.get("plan_hash") != digest or report.get("complete") is not True:
        raise CanvaslabError(f"--pilot {pilot_dir}: {REPORT_FILE} is not the finished report of its registered plan: "
                             "run the pilot to the end first (`canvaslab noise-study run`)")
    return report, hashlib.sha256(raw).hexdigest()


def _pilot_sd(effects: Any, where: Path) -> tuple[dict[str, float], int]:
    """Each comparison's per-prompt sd of the primary outcome, and the fewest prompts any rests on."""
    bad = CanvaslabError(f"--pilot {where}: its report has no usable standard deviation of {PRIMARY_OUTCOME} for "
                         f"both comparisons (finite, above 0, from at least {MIN_PROMPTS} prompts)")
    if not isinstance(effects, list):
        raise bad
    primary = {e.get("comparison"): e for e in effects
               if isinstance(e, dict) and e.get("outcome") == PRIMARY_OUTCOME and isinstance(e.get("comparison"), str)}
    if set(primary) != set(COMPARISONS):
        raise bad
    sds, prompts = {}, []
    for name in COMPARISONS:
        sd, n = primary[name].get("sd"), primary[name].get("n_pairs")
        if isinstance(sd, bool) or not isinstance(sd, (int, float)) or not math.isfinite(sd) or sd <= 0 \
                or isinstance(n, bool) or not isinstance(n, int) or not MIN_PROMPTS <= n <= MAX_PILOT_PROMPTS:
            raise bad
        sds[name], prompts = float(sd), [*prompts, n]
    return sds, min(prompts)


def pilot_statistics(pilot_dir: Path, facts: Any, pools: Any, suite: str) -> dict[str, Any]:
    """The pilot's per-prompt sd of the primary outcome's differences, read from its finished report. The pilot
    must be a /3 pilot of the same model facts, token pools and suite: its variance is that of those."""
    from canvaslab.studies.unused_tokens.plan import load_plan

    plan, digest = load_plan(pilot_dir)
    if plan.schema != SCHEMA_ID or plan.design != "pilot":
        raise CanvaslabError(f"--pilot {pilot_dir}: holds a {plan.design!r} plan ({plan.schema}), not a pilot of "
                             f"{SCHEMA_ID}")
    if plan.model != facts:
        raise CanvaslabError(f"--pilot {pilot_dir}: its model ({plan.model.spec}, layers {plan.model.layers}, model "
                             f"seed {plan.model.model_seed}, weights {plan.model.weights}) is not this plan's "
                             f"({facts.spec}, layers {facts.layers}, model seed {facts.model_seed}, weights "
                             f"{facts.weights})")
    if plan.token_pools != pools:
        raise CanvaslabError(f"--pilot {pilot_dir}: its token pools differ from this plan's (rare control: "
                             f"{plan.token_pools.rare_source.get('kind')}, here {pools.rare_source.get('kind')}): "
                             "register with the pilot's --token-counts")
    if plan.first_pass.suite != suite:
        raise CanvaslabError(f"--pilot {pilot_dir}: its prompts come from suite {plan.first_pass.suite!r}, not "
                             f"{suite!r}: give the pilot's --suite")
    report, report_sha = _pilot_report(pilot_dir, digest)
    sds, prompts = _pilot_sd(report.get("effects"), pilot_dir)
    return {"pilot_plan_sha256": digest, "pilot_report_sha256": report_sha, "pilot_sd": sds,
            "pilot_prompts": prompts}


def confirmatory_size(statistics: dict[str, Any], margin: float, alpha: float) -> dict[str, Any]:
    """How many prompts the confirmatory design needs, and why (the plan records all of it)."""
    n_pilot = statistics["pilot_prompts"]
    if n_pilot < 2:
        raise CanvaslabError("the pilot has fewer than 2 prompts with results: it cannot estimate a variance")
    planning_sd = max(sd_upper_limit(sd, n_pilot, SD_CONFIDENCE) for sd in statistics["pilot_sd"].values())
    needed = units_for_power(planning_sd, margin, PER_COMPARISON_POWER, alpha=alpha, at_least=MIN_PROMPTS)
    return {**statistics, "planning_sd": planning_sd, "sd_confidence": SD_CONFIDENCE, "margin": margin,
            "alpha": alpha, "per_comparison_power_target": PER_COMPARISON_POWER,
            "joint_power_target": PLANNED_POWER, "prompts_needed": needed,
            "rule": f"planning sd = the largest one-sided {SD_CONFIDENCE:.0%} upper confidence limit of the pilot's "
                    "per-prompt sd over the two comparisons; prompts = the fewest giving TOST power "
                    f"{PER_COMPARISON_POWER} per comparison at a true difference of 0 (both comparisons then succeed "
                    f"with probability >= {PLANNED_POWER}), at least {MIN_PROMPTS}"}


def achieved_power(size: dict[str, Any], prompts: int) -> dict[str, Any]:
    """The power the prompts actually planned give, at the planning sd."""
    sd, margin, alpha = size["planning_sd"], size["margin"], size["alpha"]
    per = tost_power(prompts, sd, margin, alpha=alpha)
    return {"prompts_planned": prompts, "tost_power_per_comparison": per,
            "joint_power_lower_bound": max(0.0, 2 * per - 1),
            "t_test_power_at_margin": t_test_power(prompts, sd, margin, alpha=alpha),
            "meets_target": bool(max(0.0, 2 * per - 1) >= PLANNED_POWER - 1e-9)}


def check_plan(plan: Any) -> None:
    """What the schema cannot say about a /3 plan's first-pass design, as one line: content positions for every
    prompt and seed, enough of them, inside the canvas; a bounded neighbourhood."""
    design, factors = plan.first_pass, plan.factors
    if design is None:
        if "content" in factors.positions:
            raise CanvaslabError(f"plan.json: position 'content' belongs to plan schema {SCHEMA_ID} only")
        return
    expected = {base_key(prompt.prompt_id, seed) for prompt in factors.prompts for seed in factors.seeds}
    if set(design.content_positions) != expected:
        raise CanvaslabError("plan.json: first_pass.content_positions must list every prompt and seed of the plan")
    largest, canvas = max(factors.counts), plan.model.canvas_length
    for key, positions in design.content_positions.items():
        if len(set(positions)) < largest or not all(0 <= p < canvas for p in positions):
            raise CanvaslabError(f"plan.json: first_pass.content_positions[{key!r}] needs {largest} or more distinct "
                                 f"positions inside the canvas (0 to {canvas - 1})")
    if design.neighbour_radius > MAX_RADIUS:
        raise CanvaslabError(f"plan.json: first_pass.neighbour_radius is at most {MAX_RADIUS}")
