"""What a statistic's data can carry: one set of rules for every table, page, export and doc.

Every statistic is computed, but not every statistic may be printed as if it meant what its name says. A
bootstrap interval from 1 wrong answer, a "block tau" over 2 bins (a split share), a value set beside the paper's
on a canvas of another length: each is a number the data cannot carry. The rules below decide, from the counts a
statistic rests on (its ``Support``), what is printed: the value with its interval, the value alone with a flag,
the value read as what it is, or nothing. The commit-order and noise-study analyses store the rulings in their
JSON; the terminal tables, the report pages and the docs' generated evidence print through ``format_value``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping

# The findings' own rule: no interval from fewer than 5 independent units (prompts, or the minority class).
MIN_CLUSTERS = 5
MIN_MINORITY = 5
# A rank correlation over 2 bins is +1 or -1 per generation: its mean is a split share, not an order.
MIN_BINS = 3
# A bootstrap that drops more than this share of its resamples (one class only) is conditioned on the draw.
MAX_SKIPPED_SHARE = 0.05
# The paper (DiffusionGemma 26B, seed 003): canvas of 256 positions, block tau at bins of 4 to 64.
PAPER_CANVAS = 256
PAPER_BINS = (4, 8, 16, 32, 64)
ALPHA = 0.05

VALUE = "value"
SPLIT_SHARE = "split share"
OMITTED = "omitted"


@dataclass(frozen=True)
class Support:
    """The counts a statistic rests on; ``None`` where a count does not apply to it."""

    generations: int
    clusters: int
    bins: int | None = None
    narrow: int | None = None  # generations whose content spans fewer than MIN_BINS bins (block tau only)
    minority: int | None = None
    minority_name: str = "minority"
    minority_clusters: int | None = None
    resamples: int | None = None
    resamples_used: int | None = None
    zero_variance: bool = False


@dataclass(frozen=True)
class Ruling:
    """What may be printed: ``reading`` (value, split share or omitted), its interval, beside the paper."""

    reading: str = VALUE
    interval: bool = True
    paper: bool = False
    flags: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["flags"] = list(self.flags)
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "Ruling":
        return cls(reading=values["reading"], interval=values["interval"], paper=values["paper"],
                   flags=tuple(values["flags"]))


def bins_on_canvas(canvas_length: int, bin_size: int) -> int:
    """How many bins of ``bin_size`` a canvas of ``canvas_length`` positions holds (the last may be partial)."""
    return math.ceil(canvas_length / bin_size)


def paper_comparable(canvas_length: int | None, bin_size: int | None = None) -> bool:
    """The paper's values are comparable only on its canvas length and, for block tau, its bin sizes."""
    if canvas_length != PAPER_CANVAS:
        return False
    return bin_size is None or bin_size in PAPER_BINS


def interval_problems(support: Support) -> list[str]:
    """Why an interval may not be printed (empty: it may)."""
    problems = []
    if support.clusters < MIN_CLUSTERS:
        problems.append(f"{_count(support.clusters, 'prompt')} < {MIN_CLUSTERS}: no interval")
    if support.minority is not None and support.minority < MIN_MINORITY:
        problems.append(f"rests on {_count(support.minority, support.minority_name)} (< {MIN_MINORITY}): no interval")
    if support.minority_clusters is not None and support.minority_clusters < MIN_CLUSTERS:
        problems.append(f"the {support.minority_name}s come from {_count(support.minority_clusters, 'prompt')} "
                        f"(< {MIN_CLUSTERS}): no interval")
    if support.resamples and support.resamples_used is not None:
        skipped = support.resamples - support.resamples_used
        if skipped > MAX_SKIPPED_SHARE * support.resamples:
            problems.append(f"bootstrap skipped {skipped:,} of {support.resamples:,} resamples: no interval")
    return problems


def rule(support: Support, *, canvas_length: int | None = None, bin_size: int | None = None) -> Ruling:
    """The ruling for one statistic; ``bin_size`` marks a block tau (its bins come from ``support.bins``)."""
    flags = interval_problems(support)
    if support.zero_variance:
        flags.append("zero variance: every generation gives the same value")
    reading = VALUE
    if support.narrow and support.narrow < support.generations:
        flags.append(f"{support.narrow} of {support.generations} generations over fewer than {MIN_BINS} bins, "
                     "each +1 or -1")
    elif support.bins is not None and support.bins < MIN_BINS:
        reading = SPLIT_SHARE if support.bins == 2 else OMITTED
        flags.append(f"over {support.bins} bins: {'a split share' if reading == SPLIT_SHARE else 'no order'}, "
                     "not a block tau")
    paper = reading == VALUE and paper_comparable(canvas_length, bin_size)
    return Ruling(reading=reading, interval=not interval_problems(support) and reading != OMITTED, paper=paper,
                  flags=tuple(flags))


def split_share(tau: float) -> float:
    """A 2-bin tau is +1 (second half later) or -1 per generation: the share with +1 is (mean + 1) / 2."""
    return (tau + 1) / 2


def format_value(value: float | None, ci: list[float] | None, ruling: Ruling | None, digits: int = 3,
                 support: Support | None = None) -> str:
    """``value [low, high]``, or what the ruling allows of it: the value alone, a split share, or ``-``."""
    if value is None or (ruling is not None and ruling.reading == OMITTED):
        return "-"
    if ruling is not None and ruling.reading == SPLIT_SHARE:
        share = split_share(value)
        if support is not None:
            later = round(share * support.generations)
            return f"split share {later}/{support.generations}"
        return f"split share {share:.{digits}f}"
    text = f"{value:.{digits}f}"
    if ci is not None and (ruling is None or ruling.interval):
        text += f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"
    return text


def flag_text(ruling: Ruling | None) -> str:
    """The ruling's flags as one parenthesised note ('' when none)."""
    return f" ({'; '.join(ruling.flags)})" if ruling is not None and ruling.flags else ""


def tost_contradiction(effect: Mapping[str, Any], alpha: float = ALPHA) -> str | None:
    """A TOST 'equivalent' that the two-sided test contradicts: inside the margin, yet not zero."""
    p, mean = effect.get("p_two_sided"), effect.get("mean_difference")
    if effect.get("verdict") == "equivalent" and _is_number(p) and p < alpha and _is_number(mean):
        return f"equivalent within the margin, yet different from zero: {mean:+.3f}, two-sided p = {p:.2g}"
    return None


def effect_interval_allowed(effect: Mapping[str, Any]) -> bool:
    """An effect's interval is printed only from at least ``MIN_CLUSTERS`` independent pairs."""
    n = effect.get("n_pairs")
    return _is_number(n) and n >= MIN_CLUSTERS


def effect_flags(effect: Mapping[str, Any], unit: str = "pair", alpha: float = ALPHA) -> list[str]:
    """The validity flags of one paired-difference effect (the noise study's)."""
    flags = []
    if effect.get("ci") is not None and not effect_interval_allowed(effect):
        n = effect.get("n_pairs")
        flags.append(f"{_count(n, unit) if _is_number(n) else 'too few ' + unit + 's'} < {MIN_CLUSTERS}: no interval")
    if effect.get("sd") == 0.0:
        flags.append("zero variance: no test")
    contradiction = tost_contradiction(effect, alpha)
    if contradiction:
        flags.append(contradiction)
    return flags


# ---------------------------------------------------------------- a commit-order regime


def regime_rulings(summary: Mapping[str, Any], n_bootstrap: int | None = None) -> dict[str, tuple[Ruling, Support]]:
    """Ruling and support of each statistic of a commit-order regime summary (``order_metrics.json``).

    Summaries written since the rules exist carry their ``support`` and ``canvas_length``; older ones are ruled
    from the counts they hold: generations defined, and as prompts the fewest that many generations can come
    from (exact with one generation per prompt; with several seeds a lower bound, so the rule errs towards
    printing no interval); the AUROC's classes from its accuracy.
    """
    canvas = summary.get("canvas_length")
    supports = _stored_supports(summary) if "support" in summary else _derived_supports(summary, n_bootstrap)
    rulings = {}
    for name, support in supports.items():
        bin_size = int(name.rsplit("_", 1)[1]) if name.startswith("block_tau_") else None
        if bin_size is not None and canvas is not None:  # files before the answers' own bins: the canvas's
            canvas_bins = bins_on_canvas(canvas, bin_size)
            support = replace(support, bins=canvas_bins if support.bins is None else min(support.bins, canvas_bins))
        paper_size = bin_size if bin_size is not None else None
        rulings[name] = (rule(support, canvas_length=canvas, bin_size=paper_size), support)
    return rulings


def _stored_supports(summary: Mapping[str, Any]) -> dict[str, Support]:
    return {name: Support(**values) for name, values in summary["support"].items()}


def _derived_supports(summary: Mapping[str, Any], n_bootstrap: int | None) -> dict[str, Support]:
    undefined = summary.get("undefined", {})
    prompts = summary.get("n_prompts", summary["n_generations"])  # files without it: every generation its own
    per_prompt = max(summary["n_generations"] / max(prompts, 1), 1)

    def clusters(generations: int) -> int:  # exact with one generation per prompt, else a lower bound
        return min(math.ceil(generations / per_prompt), prompts)

    supports = {}
    names = ["tau_b", *(f"{kind}_{size}" for kind in ("block_tau", "token_block_tau")
                        for size in summary.get("block_tau", {}))]
    for name in names:
        generations = summary["n_generations"] - undefined.get(name, {}).get("n", 0)
        supports[name] = Support(generations=generations, clusters=clusters(generations))
    if summary.get("auroc") is not None and summary.get("n_scored") and summary.get("accuracy") is not None:
        n, accuracy = summary["n_scored"], summary["accuracy"]
        right = round(accuracy * n)
        skipped = summary.get("auroc_ci_resamples_skipped")
        supports["auroc"] = Support(
            generations=n, clusters=clusters(n), minority=min(right, n - right),
            minority_name="right answer" if right < n - right else "wrong answer", resamples=n_bootstrap,
            resamples_used=None if n_bootstrap is None or skipped is None else n_bootstrap - skipped)
    return supports


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _count(n: int, name: str) -> str:
    return f"{n} {name}{'' if n == 1 else 's'}"
