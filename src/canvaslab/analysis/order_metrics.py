"""Commit-order measures (seed 003, REFERENCE §4), per generation and then per regime.

Every measure is defined on one generation (``measure_generation``); a regime's value is the mean over
its generations where the measure is defined (``aggregate_order_metrics``). Undefined cases - too few
content positions, everything committed in one call, a constant bin - are null with a reason and
counted, never averaged in as 0 and never a crash. Definitions: docs/trace-format.md.

Order is first-acceptance order: a position's commit call is the 0-based index, in call order, of the
first call whose accepted set holds it. Only content positions count: trailing EOS/padding commits first
and would drive tau towards -0.9 (seed 003). Content positions never accepted are excluded and counted.

Confidence intervals come from a prompt-clustered bootstrap: a regime's prompts are resampled with
replacement and each prompt's generations (its seeds) stay together, because generations of one prompt
are not independent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from canvaslab.analysis import validity
from canvaslab.errors import CanvaslabError
from canvaslab.capture.commit_trace import GenerationTrace, read_traces, record_problem

BLOCK_BINS: tuple[int, ...] = (4, 8, 16, 32, 64)
CONTROL_BLOCK = 16
CI_LEVEL = 0.95
DEFINITIONS = "docs/trace-format.md"
SIMPSON_NOTE = (
    "Pooling regimes mixes different base accuracies and entropy scales: seed 003 found pooled 0.437 while "
    "math alone was 0.749. simpson_prone tests for that Simpson reversal here (definition: docs/trace-format.md). "
    "Report the within-regime auroc; the pooled value is a diagnostic."
)
CHANCE = 0.5

# Why a per-generation measure is null.
FEWER_THAN_TWO = "fewer than 2 committed content positions"
NO_COMMITTED = "no committed content positions"
ONE_CALL = "all content positions committed in one call"
SAME_BIN_MEANS = "all bins have the same mean commit call"
# The measures with one value per bin size.
PER_BIN = ("block_tau", "token_block_tau", "control_block_tau", "control_token_block_tau", "block_bins")


@dataclass
class GenerationMeasures:
    """The measures of one generation; ``undefined`` maps each null measure to the reason."""

    generation_id: str
    regime: str
    prompt_id: str
    seed: int
    budget: int
    correct: bool | None
    content_positions: int
    canvas_length: int
    never_accepted: int
    accept_calls: int
    unaccept_events: int
    monotone: bool
    tau_b: float | None
    block_tau: dict[int, float | None]
    token_block_tau: dict[int, float | None]
    control_tau: float | None
    control_block_tau: dict[int, float | None]
    control_token_block_tau: dict[int, float | None]
    tokens_per_call: float | None
    same_call_fraction: float | None
    commit_entropy: float | None
    undefined: dict[str, str] = field(default_factory=dict)
    # Bins of each size that hold a committed content position: a block tau over 2 is +1 or -1 whatever the
    # canvas holds (an answer of 10 tokens spans 2 bins of 16 on any canvas).
    block_bins: dict[int, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        for name in PER_BIN:
            values[name] = {str(b): v for b, v in getattr(self, name).items()}
        return values


# ---------------------------------------------------------------- per generation


def measure_generation(trace: GenerationTrace) -> GenerationMeasures:
    """All measures of one generation, over its committed content positions."""
    accepted = _accepted_matrix(trace)
    content = np.asarray(trace.content, dtype=bool)
    commit = commit_calls(accepted)
    positions = np.flatnonzero(content & (commit >= 0))
    calls = commit[positions]
    entropy = np.asarray([call.entropy for call in trace.calls], dtype=np.float64)
    unaccepts = unaccept_events(accepted, content)

    undefined: dict[str, str] = {}

    def keep(name: str, result: tuple[float | None, str | None]) -> float | None:
        value, reason = result
        if reason is not None:
            undefined[name] = reason
        return value

    return GenerationMeasures(
        generation_id=trace.generation_id,
        regime=trace.regime,
        prompt_id=trace.prompt_id,
        seed=trace.seed,
        budget=trace.budget,
        correct=trace.correct,
        content_positions=int(content.sum()),
        canvas_length=int(content.size),
        never_accepted=int((content & (commit < 0)).sum()),
        accept_calls=len(trace.calls),
        unaccept_events=unaccepts,
        monotone=unaccepts == 0,
        tau_b=keep("tau_b", _tau_b(calls, positions, ONE_CALL)),
        block_tau={b: keep(f"block_tau_{b}", _block_tau(calls, positions, b)) for b in BLOCK_BINS},
        token_block_tau={b: keep(f"token_block_tau_{b}", _token_block_tau(calls, positions, b)) for b in BLOCK_BINS},
        control_tau=keep("control_tau", _control_tau(positions)),
        control_block_tau={
            b: keep(f"control_block_tau_{b}", _block_tau(positions // CONTROL_BLOCK, positions, b))
            for b in BLOCK_BINS
        },
        control_token_block_tau={
            b: keep(f"control_token_block_tau_{b}", _token_block_tau(positions // CONTROL_BLOCK, positions, b))
            for b in BLOCK_BINS
        },
        tokens_per_call=keep("tokens_per_call", _tokens_per_call(calls)),
        same_call_fraction=keep("same_call_fraction", _same_call_fraction(calls)),
        commit_entropy=keep("commit_entropy", _commit_entropy(entropy, calls, positions)),
        undefined=undefined,
        block_bins={b: int(np.unique(positions // b).size) for b in BLOCK_BINS},
    )


def _accepted_matrix(trace: GenerationTrace) -> np.ndarray:
    """(calls, positions) boolean: position p is in call i's accepted set."""
    accepted = np.zeros((len(trace.calls), len(trace.content)), dtype=bool)
    for index, call in enumerate(trace.calls):
        accepted[index, call.accepted] = True
    return accepted


def commit_calls(accepted: np.ndarray) -> np.ndarray:
    """Per position, the 0-based index of the first call that accepted it; -1 if none ever did."""
    if accepted.shape[0] == 0:
        return np.full(accepted.shape[1], -1)
    ever = accepted.any(axis=0)
    return np.where(ever, accepted.argmax(axis=0), -1)


def unaccept_events(accepted: np.ndarray, content: np.ndarray) -> int:
    """Count of (content position, call i) with the position accepted on call i and not on call i+1.

    Over content positions only: EOS/padding flipping in and out is not an un-accept of the answer.
    """
    dropped = accepted[:-1] & ~accepted[1:]
    return int(dropped[:, content].sum())


def _tau_b(
    x: np.ndarray, y: np.ndarray, x_constant: str, y_constant: str = "positions are constant"
) -> tuple[float | None, str | None]:
    """Kendall tau_b (tie-aware, scipy) of x against y, or None and why it is undefined."""
    if x.size < 2:
        return None, FEWER_THAN_TWO
    if np.all(x == x[0]):
        return None, x_constant
    if np.all(y == y[0]):
        return None, y_constant
    from scipy.stats import kendalltau  # the analysis extra, imported where it is used

    statistic = kendalltau(x, y, variant="b").statistic
    if not np.isfinite(statistic):
        return None, "tau_b is not finite"
    return float(statistic), None


def _block_tau(calls: np.ndarray, positions: np.ndarray, size: int) -> tuple[float | None, str | None]:
    """Bin-level block tau (seed 003's): tau_b between each bin's mean commit call and the bin's index.

    Bins are position // size; only bins holding a committed content position take part (a bin with
    one position has that position's call as its mean). Averaging a bin's calls cancels disorder inside
    the bin, so the value rises with ``size`` for a process with a coarse left-to-right drift, and is 1
    at every size for a strictly left-to-right one.
    """
    if calls.size == 0:
        return None, NO_COMMITTED
    bins, inverse = np.unique(positions // size, return_inverse=True)
    if bins.size < 2:
        return None, f"fewer than 2 non-empty bins of {size}"
    means = np.bincount(inverse, weights=calls) / np.bincount(inverse)
    return _tau_b(means, bins, SAME_BIN_MEANS)


def _token_block_tau(calls: np.ndarray, positions: np.ndarray, size: int) -> tuple[float | None, str | None]:
    """Token-level block tau: tau_b between each position's commit call and its bin, position // size.

    Not the paper's measure: the ties that coarser bins add make it fall with ``size`` even for a strictly
    left-to-right process; kept because it peaks at the block size of a block-autoregressive process.
    """
    return _tau_b(calls, positions // size, ONE_CALL, f"all content positions in one bin of {size}")


def _control_tau(positions: np.ndarray) -> tuple[float | None, str | None]:
    """tau_b of the block-sequential control (commit call = position // 16) on these positions.

    It is the ceiling a clean block-autoregressive process would reach on the same positions; ties
    inside each block keep it below 1 (0.94-0.96 in seed 003).
    """
    block = f"all content positions in one block of {CONTROL_BLOCK}"
    return _tau_b(positions // CONTROL_BLOCK, positions, block)


def _tokens_per_call(calls: np.ndarray) -> tuple[float | None, str | None]:
    """Committed content positions / calls that first-accepted at least one of them."""
    if calls.size == 0:
        return None, NO_COMMITTED
    return calls.size / np.unique(calls).size, None


def _same_call_fraction(calls: np.ndarray) -> tuple[float | None, str | None]:
    """Share of pairs of committed content positions that share their commit call (order unresolved)."""
    if calls.size < 2:
        return None, FEWER_THAN_TWO
    per_call = np.bincount(calls)
    same = float((per_call * (per_call - 1)).sum()) / 2
    return same / (calls.size * (calls.size - 1) / 2), None


def _commit_entropy(
    entropy: np.ndarray, calls: np.ndarray, positions: np.ndarray
) -> tuple[float | None, str | None]:
    """Mean over committed content positions of the entropy each had on its commit call (nats)."""
    if calls.size == 0:
        return None, NO_COMMITTED
    return float(entropy[calls, positions].mean()), None


# ---------------------------------------------------------------- per regime


def compute_order_metrics(
    traces: Iterable[GenerationTrace] | str | Path, n_bootstrap: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """Measure every generation and aggregate per regime (``order_metrics.json``).

    ``traces`` is an iterable of ``GenerationTrace`` or a trace file path; a path also fills ``source``
    (path and sha256) so a result names the exact file it came from.
    """
    path = Path(traces) if isinstance(traces, (str, Path)) else None
    checked = read_traces(path) if path else (_checked(trace) for trace in traces)
    measures = [measure_generation(trace) for trace in checked]
    source = {"path": str(path), "sha256": _sha256(path)} if path else None
    return aggregate_order_metrics(measures, n_bootstrap=n_bootstrap, seed=seed, source=source)


def _checked(trace: GenerationTrace) -> GenerationTrace:
    """Hold in-memory traces to the file format's rules, so both inputs give the same answers."""
    problem = record_problem(trace.to_record())
    if problem is not None:
        raise CanvaslabError(f"generation {trace.generation_id!r}: {problem}")
    return trace


def aggregate_order_metrics(
    measures: Sequence[GenerationMeasures],
    n_bootstrap: int = 1000,
    seed: int = 0,
    source: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Per-regime summaries (regimes in order of first appearance) and the pooled AUROC."""
    if not measures:
        raise CanvaslabError("no traces to measure")
    if n_bootstrap < 0 or seed < 0:
        raise CanvaslabError(f"n_bootstrap and seed must be >= 0 (got {n_bootstrap} and {seed})")
    by_regime: dict[str, list[GenerationMeasures]] = {}
    for row in measures:
        by_regime.setdefault(row.regime, []).append(row)
    regimes = {name: summarize_regime(rows, n_bootstrap, seed) for name, rows in by_regime.items()}
    return {
        "source": source,
        "n_generations": len(measures),
        "n_bootstrap": n_bootstrap,
        "bootstrap_seed": seed,
        "ci_level": CI_LEVEL,
        "definitions": DEFINITIONS,
        "regimes": regimes,
        "pooled_auroc": _pooled_auroc(measures, regimes),
    }


def summarize_regime(rows: Sequence[GenerationMeasures], n_bootstrap: int, seed: int) -> dict[str, Any]:
    """One regime: means over generations where defined, CIs from the prompt-clustered bootstrap.

    ``null_reasons`` says why a regime-level value is null. The bootstrap generator is seeded from
    (seed, regime name), so a regime's CIs do not depend on which other regimes share the file.
    """
    notes: dict[str, str] = {}
    rng = np.random.default_rng([seed, _stable_int(rows[0].regime)])
    weights = prompt_bootstrap_weights([row.prompt_id for row in rows], n_bootstrap, rng)
    summary: dict[str, Any] = {
        "n_generations": len(rows),
        "n_prompts": len({row.prompt_id for row in rows}),
    }
    summary.update(_order_summary(rows, weights, notes))
    summary.update(_commit_summary(rows, notes))
    summary.update(_correctness_summary(rows, weights, notes))
    summary["undefined"] = count_undefined(rows)
    summary["null_reasons"] = notes
    summary["canvas_length"] = max(row.canvas_length for row in rows)
    summary["support"] = _supports(rows, summary, n_bootstrap)
    summary["validity"] = {name: ruling.to_dict() for name, (ruling, _) in validity.regime_rulings(summary).items()}
    return summary


def _supports(rows: Sequence[GenerationMeasures], summary: dict[str, Any], n_bootstrap: int) -> dict[str, Any]:
    """The counts each statistic with an interval rests on (``canvaslab.analysis.validity``'s rules read them)."""
    supports = {"tau_b": _support([(row.prompt_id, row.tau_b) for row in rows])}
    for name in ("block_tau", "token_block_tau"):
        for size in BLOCK_BINS:
            support = _support([(row.prompt_id, getattr(row, name)[size]) for row in rows])
            if name == "block_tau":
                support.update(_bins_support([row.block_bins[size] for row in rows if row.block_tau[size] is not None],
                                             validity.bins_on_canvas(summary["canvas_length"], size)))
            supports[f"{name}_{size}"] = support
    if summary["auroc"] is not None:
        usable = [row for row in rows if row.correct is not None and row.commit_entropy is not None]
        right = sum(bool(row.correct) for row in usable)
        minority_correct = right < len(usable) - right
        skipped = summary["auroc_ci_resamples_skipped"]
        supports["auroc"] = {
            "generations": len(usable), "clusters": len({row.prompt_id for row in usable}),
            "minority": min(right, len(usable) - right),
            "minority_name": "right answer" if minority_correct else "wrong answer",
            "minority_clusters": len({row.prompt_id for row in usable if bool(row.correct) == minority_correct}),
            "resamples": n_bootstrap, "resamples_used": None if skipped is None else n_bootstrap - skipped,
        }
    return supports


def _bins_support(spans: Sequence[int], canvas_bins: int) -> dict[str, Any]:
    """A block tau's bins: the fewest its generations' answers occupy, and how many occupy fewer than 3."""
    if not spans:
        return {"bins": canvas_bins}
    return {"bins": min(spans), "narrow": sum(span < validity.MIN_BINS for span in spans)}


def _support(values: Sequence[tuple[str, float | None]]) -> dict[str, Any]:
    defined = [(prompt, value) for prompt, value in values if value is not None]
    distinct = {value for _, value in defined}
    return {"generations": len(defined), "clusters": len({prompt for prompt, _ in defined}),
            "zero_variance": len(defined) > 1 and len(distinct) == 1}


def _order_summary(
    rows: Sequence[GenerationMeasures], weights: np.ndarray, notes: dict[str, str]
) -> dict[str, Any]:
    """tau_b and both block taus per bin (+ CIs), the block-sequential control, tau_b on monotone generations."""
    prompt_ids = [row.prompt_id for row in rows]

    def mean_and_ci(values: Sequence[float | None], name: str) -> tuple[float | None, list[float] | None]:
        array = _as_array(values)
        return _mean(array, name, notes), _note(notes, f"{name}_ci", *bootstrap_mean_ci(array, weights, prompt_ids))

    summary: dict[str, Any] = {}
    summary["tau_b"], summary["tau_b_ci"] = mean_and_ci([row.tau_b for row in rows], "tau_b")
    for name in ("block_tau", "token_block_tau"):
        per_bin = {b: mean_and_ci([getattr(row, name)[b] for row in rows], f"{name}_{b}") for b in BLOCK_BINS}
        summary[name] = {str(b): value for b, (value, _) in per_bin.items()}
        summary[f"{name}_ci"] = {str(b): ci for b, (_, ci) in per_bin.items()}
    summary["control_tau"] = _mean([row.control_tau for row in rows], "control_tau", notes)
    for name in ("control_block_tau", "control_token_block_tau"):
        summary[name] = {
            str(b): _mean([getattr(row, name)[b] for row in rows], f"{name}_{b}", notes) for b in BLOCK_BINS
        }
    monotone = [row.tau_b for row in rows if row.monotone]
    if not monotone:
        notes["tau_b_monotone"] = "no monotone generations"
    summary["tau_b_monotone"] = _mean(monotone, "tau_b_monotone", notes) if monotone else None
    return summary


def _commit_summary(rows: Sequence[GenerationMeasures], notes: dict[str, str]) -> dict[str, Any]:
    """Batching (tokens per call, same-call pairs), un-accepts, calls used and commit entropy."""
    calls = np.array([row.accept_calls for row in rows])
    budgets = sorted({row.budget for row in rows})
    return {
        "tokens_per_call": _mean([row.tokens_per_call for row in rows], "tokens_per_call", notes),
        "same_call_fraction": _mean([row.same_call_fraction for row in rows], "same_call_fraction", notes),
        "unaccept_events": float(np.mean([row.unaccept_events for row in rows])),
        "unaccept_events_total": int(sum(row.unaccept_events for row in rows)),
        "monotone_fraction": float(np.mean([row.monotone for row in rows])),
        "accept_calls": {
            "mean": float(calls.mean()),
            "min": int(calls.min()),
            "max": int(calls.max()),
            "budget": budgets[0] if len(budgets) == 1 else budgets,
        },
        "commit_entropy_mean": _mean([row.commit_entropy for row in rows], "commit_entropy_mean", notes),
        "never_accepted_total": int(sum(row.never_accepted for row in rows)),
    }


def _mean(values: Sequence[float | None] | np.ndarray, name: str, notes: dict[str, str]) -> float | None:
    """Mean over the defined values; None (and a note) when no generation defines it."""
    array = _as_array(values)
    if not np.isfinite(array).any():
        notes[name] = "undefined in every generation"
        return None
    return float(np.nanmean(array))


def count_undefined(rows: Sequence[GenerationMeasures]) -> dict[str, dict[str, Any]]:
    """Per measure, how many generations were excluded and why (measures with no exclusions omitted)."""
    counts: dict[str, dict[str, Any]] = {}
    for row in rows:
        for name, reason in row.undefined.items():
            entry = counts.setdefault(name, {"n": 0, "reasons": {}})
            entry["n"] += 1
            entry["reasons"][reason] = entry["reasons"].get(reason, 0) + 1
    return counts


# ---------------------------------------------------------------- bootstrap


def prompt_bootstrap_weights(
    prompt_ids: Sequence[str], n_bootstrap: int, rng: np.random.Generator
) -> np.ndarray:
    """(n_bootstrap, generations) multiplicity of each generation in each prompt-clustered resample.

    Drawing k prompts with replacement gives multinomial(k, uniform) counts per prompt; every
    generation of a prompt gets its prompt's count, so a prompt's seeds stay together.
    """
    prompts, index = np.unique(np.asarray(prompt_ids), return_inverse=True)
    draws = rng.multinomial(prompts.size, np.full(prompts.size, 1.0 / prompts.size), size=n_bootstrap)
    return draws[:, index]


def bootstrap_mean_ci(
    values: np.ndarray, weights: np.ndarray, prompt_ids: Sequence[str]
) -> tuple[list[float] | None, str | None]:
    """Percentile CI of the mean over defined (finite) values, across the resamples in ``weights``."""
    defined = np.isfinite(values)
    problem = _ci_problem(weights, [prompt for prompt, ok in zip(prompt_ids, defined) if ok])
    if problem:
        return None, problem
    w = weights[:, defined]
    totals = w.sum(axis=1)
    means = (w[totals > 0] @ values[defined]) / totals[totals > 0]
    return _percentiles(means), None


def bootstrap_auroc_ci(
    labels: np.ndarray, scores: np.ndarray, weights: np.ndarray, prompt_ids: Sequence[str]
) -> tuple[list[float] | None, str | None, int]:
    """Percentile CI of the AUROC across resamples; resamples holding one class only are skipped."""
    problem = _ci_problem(weights, prompt_ids)
    if problem:
        return None, problem, 0
    from sklearn.metrics import roc_auc_score  # the analysis extra, imported where it is used

    aurocs = []
    for row in weights:
        if row[labels].sum() == 0 or row[~labels].sum() == 0:
            continue
        drawn = row > 0
        aurocs.append(roc_auc_score(labels[drawn], scores[drawn], sample_weight=row[drawn]))
    skipped = weights.shape[0] - len(aurocs)
    if not aurocs:
        return None, "every bootstrap resample held one class only", skipped
    return _percentiles(np.asarray(aurocs)), None, skipped


def _ci_problem(weights: np.ndarray, prompt_ids: Sequence[str]) -> str | None:
    if weights.shape[0] == 0:
        return "bootstrap disabled (n_bootstrap = 0)"
    if len(set(prompt_ids)) < 2:
        return "fewer than 2 prompts with a defined value: nothing for the bootstrap to resample"
    return None


def _percentiles(stats: np.ndarray) -> list[float]:
    tail = 100 * (1 - CI_LEVEL) / 2
    low, high = np.percentile(stats, [tail, 100 - tail])
    return [float(low), float(high)]


# ---------------------------------------------------------------- confidence vs correctness


def _correctness_summary(
    rows: Sequence[GenerationMeasures], weights: np.ndarray, notes: dict[str, str]
) -> dict[str, Any]:
    """accuracy, auroc (+ CI) and reliability, over generations with ``correct`` not null.

    Score = negative commit entropy (confident = high), label = correct; generations with no committed
    content position have no score and are left out of auroc and reliability (not of accuracy).
    """
    scored = np.array([row.correct is not None for row in rows])
    summary: dict[str, Any] = {
        "n_scored": int(scored.sum()),
        "accuracy": None,
        "auroc": None,
        "auroc_ci": None,
        "auroc_ci_resamples_skipped": None,
        "reliability": None,
    }
    if not scored.any():
        for key in ("accuracy", "auroc", "auroc_ci", "reliability"):
            notes[key] = "no generation has correctness (correct is null)"
        return summary
    summary["accuracy"] = float(np.mean([row.correct for row in rows if row.correct is not None]))
    usable = scored & np.array([row.commit_entropy is not None for row in rows])
    labels = np.array([bool(row.correct) for row, ok in zip(rows, usable) if ok], dtype=bool)
    entropy = np.array([row.commit_entropy for row, ok in zip(rows, usable) if ok], dtype=np.float64)
    if entropy.size:
        summary["reliability"] = reliability_by_tertile(entropy, labels)
    else:
        notes["reliability"] = "no scored generation with committed content"
    value, reason = auroc(labels, -entropy)
    summary["auroc"] = _note(notes, "auroc", value, reason)
    if value is None:
        notes["auroc_ci"] = reason
        return summary
    prompt_ids = [row.prompt_id for row, ok in zip(rows, usable) if ok]
    ci, reason, skipped = bootstrap_auroc_ci(labels, -entropy, weights[:, usable], prompt_ids)
    summary["auroc_ci"] = _note(notes, "auroc_ci", ci, reason)
    summary["auroc_ci_resamples_skipped"] = skipped
    return summary


def auroc(labels: np.ndarray, scores: np.ndarray) -> tuple[float | None, str | None]:
    """sklearn's ROC AUC, or None and why (it needs both classes)."""
    if labels.size == 0:
        return None, "no scored generation with committed content"
    if labels.all() or not labels.any():
        return None, f"only one class (all {'correct' if labels.all() else 'incorrect'})"
    from sklearn.metrics import roc_auc_score  # the analysis extra, imported where it is used

    return float(roc_auc_score(labels, scores)), None


def reliability_by_tertile(entropy: np.ndarray, correct: np.ndarray) -> list[dict[str, Any]]:
    """Accuracy within commit-entropy tertiles (1 = lowest entropy = most confident).

    Cut points are the 1/3 and 2/3 quantiles; tertile 1 is entropy <= q1, 2 is q1 < entropy <= q2,
    3 is entropy > q2, so tied entropies share a tertile and tertiles may differ in size or be empty.
    """
    edges = np.quantile(entropy, [1 / 3, 2 / 3])
    tertile = np.digitize(entropy, edges, right=True)
    curve = []
    for index in range(3):
        members = tertile == index
        found = bool(members.any())
        curve.append({
            "tertile": index + 1,
            "entropy_range": [float(entropy[members].min()), float(entropy[members].max())]
            if found else None,
            "n": int(members.sum()),
            "accuracy": float(correct[members].mean()) if found else None,
        })
    return curve


def _pooled_auroc(measures: Sequence[GenerationMeasures], regimes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The AUROC over all regimes together, as a diagnostic, and the Simpson test against the regimes'."""
    usable = [row for row in measures if row.correct is not None and row.commit_entropy is not None]
    labels = np.array([bool(row.correct) for row in usable])
    scores = -np.array([row.commit_entropy for row in usable], dtype=np.float64)
    value, reason = auroc(labels, scores)
    pooled: dict[str, Any] = {"value": value, "n": len(usable)}
    if reason is not None:
        pooled["reason"] = reason
    flag, criteria, why = simpson_test(value, regimes)
    pooled.update(simpson_prone=flag, simpson_criteria=criteria, note=SIMPSON_NOTE)
    if why is not None:
        pooled["simpson_reason"] = why
    return pooled


def simpson_test(
    pooled: float | None, regimes: dict[str, dict[str, Any]]
) -> tuple[bool | None, dict[str, Any] | None, str | None]:
    """Does pooling misrepresent the within-regime AUROCs? (flag, criteria, why the flag is null).

    Compared: the regimes whose within-regime AUROC is defined (at least 2 needed). The flag is raised
    when either criterion holds:

    - ``opposite_side_of_chance``: the pooled AUROC is strictly on one side of 0.5 and every regime
      off chance has its AUROC strictly on the other (at least one such regime). A regime is off chance
      when its CI excludes 0.5, or, without a CI, when its AUROC is not 0.5; a regime whose CI holds 0.5
      has no direction to reverse and is not asked (seed 003: math 0.749 above, factual 0.471 at chance,
      pooled 0.437 below).
    - ``outside_every_within_ci``: the pooled AUROC lies outside the CI of every compared regime
      (null when one of them has no CI).
    """
    within = {name: (s["auroc"], s["auroc_ci"]) for name, s in regimes.items() if s["auroc"] is not None}
    if pooled is None:
        return None, None, "the pooled AUROC is undefined"
    if len(within) < 2:
        return None, None, "fewer than 2 regimes with a within-regime AUROC"
    off_chance = {name: value for name, (value, ci) in within.items() if _off_chance(value, ci)}
    side = _side_of_chance(pooled)
    opposite = bool(off_chance) and side != 0 and all(_side_of_chance(v) == -side for v in off_chance.values())
    cis = [ci for _, ci in within.values()]
    outside = None if any(ci is None for ci in cis) else all(not ci[0] <= pooled <= ci[1] for ci in cis)
    criteria = {
        "opposite_side_of_chance": opposite,
        "outside_every_within_ci": outside,
        "regimes_compared": list(within),
        "regimes_off_chance": list(off_chance),
    }
    return opposite or bool(outside), criteria, None


def _off_chance(value: float, ci: list[float] | None) -> bool:
    return value != CHANCE if ci is None else not ci[0] <= CHANCE <= ci[1]


def _side_of_chance(value: float) -> int:
    return int(value > CHANCE) - int(value < CHANCE)


# ---------------------------------------------------------------- small helpers


def _as_array(values: Sequence[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def _note(notes: dict[str, str], key: str, value: Any, reason: str | None) -> Any:
    if reason is not None:
        notes[key] = reason
    return value


def _stable_int(text: str) -> int:
    """A process-independent integer for ``text`` (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
