"""The commit-order study's panel: commit rasters, block tau against bin size as one small panel per regime
(beside its block-sequential control and the paper's values), batching and un-accepts, accept calls against
the budget, reliability and AUROC per regime, and the pooled AUROC beside the within-regime ones (Simpson's
paradox made visible). Every figure says how many generations and prompts each regime's numbers rest on.

Rasters show a few representative generations per regime (tau_b nearest the regime's median), so a
study of hundreds of generations draws as many rasters as it has regimes, times two.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from canvaslab.analysis import validity
from canvaslab.analysis.order_metrics import commit_calls
from canvaslab.reports.html import figures
from canvaslab.reports.html.markup import column, esc, notes, number, plural, table
from canvaslab.reports.html.order_drill import baseline_accuracy, drill_down
from canvaslab.reports.order_metrics import defined_in
from canvaslab.reports.readers.order_metrics import BLOCK_CURVES, OrderStudy, representative_traces

# Raster cell kinds: lightness orders them for greyscale too.
RASTER_KINDS = (("not accepted", "#F2F2F2"), ("accepted (not content)", "#9AC9E8"), ("accepted", "#0072B2"),
                ("commit call (first acceptance)", "#E69F00"), ("un-accepted on this call", "#000000"))
# The paper's bin-level block tau (seed 003, arXiv 2606.14620; REFERENCE §4), reported for math only: it rises
# smoothly with the bin size, with no jump at 16.
PAPER_BLOCK_TAU = {"math": {4: 0.59, 8: 0.64, 16: 0.70, 32: 0.79, 64: 0.91}}
PAPER_LABEL = "paper, seed 003 (bins)"
# One look per block-tau curve, the same in every panel, so one short legend serves them all: a measure and its
# control share colour and marker, the control dotted and hollow (told apart without colour).
CURVE_STYLES = {
    "block_tau": {"color": figures.OKABE_ITO[0], "marker": "o", "linestyle": "-"},
    "control_block_tau": {"color": figures.OKABE_ITO[0], "marker": "o", "linestyle": ":", "markerfacecolor": "none"},
    "token_block_tau": {"color": figures.OKABE_ITO[1], "marker": "s", "linestyle": "--", "markersize": 4},
    "control_token_block_tau": {"color": figures.OKABE_ITO[1], "marker": "s", "linestyle": ":", "markersize": 4,
                                "markerfacecolor": "none"},
}
TAU_LIMITS = (-1.15, 1.15)  # tau_b lies in [-1, 1]; the margin keeps a point at +-1 whole
GRID_COLUMNS = 3


def raster_matrix(trace) -> np.ndarray:
    """(calls, positions) kind index (``RASTER_KINDS``) of one generation."""
    accepted = np.zeros((len(trace.calls), len(trace.content)), dtype=bool)
    for index, call in enumerate(trace.calls):
        accepted[index, call.accepted] = True
    content = np.asarray(trace.content, dtype=bool)
    kinds = np.where(accepted, np.where(content, 2, 1), 0)
    commit = commit_calls(accepted)
    committed = np.flatnonzero((commit >= 0) & content)
    kinds[commit[committed], committed] = 3
    dropped = np.zeros_like(accepted)
    dropped[1:] = accepted[:-1] & ~accepted[1:] & content
    kinds[dropped] = 4
    return kinds


def _with_sample(regime: str, sample: str) -> str:
    return f"{regime} · {sample}" if sample else regime


# ---- commit rasters -------------------------------------------------------------------------------------

def raster_figure(study: OrderStudy, picked: dict[str, list]):
    """One row of rasters per regime (``picked``: ``representative_traces``); None when there is none."""
    if not picked:
        return None
    rows, cols = len(picked), max(len(v) for v in picked.values())
    cmap = ListedColormap([colour for _, colour in RASTER_KINDS])
    fig, axes = figures.plt.subplots(rows, cols, figsize=(3.4 * cols + 0.5, 1.5 + 1.4 * rows), squeeze=False,
                                     constrained_layout=True)
    for row, (regime, chosen) in enumerate(picked.items()):
        for col, ax in enumerate(axes[row]):
            if col >= len(chosen):
                ax.axis("off")
                continue
            trace, measures = chosen[col]
            ax.imshow(raster_matrix(trace), aspect="auto", cmap=cmap, vmin=-0.5, vmax=len(RASTER_KINDS) - 0.5,
                      interpolation="nearest", origin="upper")
            shown = f"{trace.generation_id} (τ_b {number(measures.tau_b, 2)})"
            ax.set_title(f"{_with_sample(regime, study.sample(regime))}\n{shown}" if col == 0 else f"\n{shown}",
                         fontsize=8)
            ax.set_xlabel("canvas position (token index)")
            ax.set_ylabel("accept call")
            for axis in (ax.xaxis, ax.yaxis):  # calls and positions are whole numbers: no tick at -0.5 or 0.5
                axis.set_major_locator(MaxNLocator(integer=True))
    fig.legend(handles=[Patch(facecolor=c, edgecolor="grey", label=label) for label, c in RASTER_KINDS],
               loc="outside lower center", ncol=3, frameon=False, fontsize=7)
    fig.suptitle(f"Commit rasters: per regime, the {cols} generations whose τ_b is nearest the regime's median")
    return fig


# ---- block tau against bin size, one panel per regime ---------------------------------------------------

def shared_axes(studies: list[OrderStudy]) -> dict[str, Any]:
    """The axis ranges the figures of several runs share: the block sizes of every run's block-tau curves, the
    AUROC axis and the reliability axes holding every run's points. Empty for one run (its own ranges)."""
    if len(studies) < 2:
        return {}
    xs = [x for study in studies for x in _auroc_xs(study)]
    curves = [_reliability_curves(study) for study in studies]
    rel_x = [value for found in curves for _, x, _, _ in found for value in x]
    rel_y = [0.0, 1.0] + [value for found in curves for _, _, y, _ in found for value in y]
    return {"block_sizes": sorted({b for study in studies for b in _block_sizes(study)}),
            "auroc_x": figures.padded_limits(xs),
            "reliability_x": figures.padded_limits(rel_x) if rel_x else None,
            "reliability_y": figures.padded_limits(rel_y)}


def _block_sizes(study: OrderStudy) -> list[int]:
    return [b for r in study.regimes for c in study.block_curves(r).values() for b in c]


def block_tau_figure(study: OrderStudy, shared: dict[str, Any] | None = None):
    """Small multiples: one panel per regime on shared axes, each with the regime's block-tau curves, their
    controls and the paper's values where it reported them; one legend for all. None without regimes.
    ``shared`` (``shared_axes``): the ranges of several runs drawn alike."""
    regimes = list(study.regimes)
    if not regimes:
        return None
    cols = min(GRID_COLUMNS, len(regimes))
    rows = math.ceil(len(regimes) / cols)
    fig, axes = figures.plt.subplots(rows, cols, figsize=(2.5 * cols + 0.6, 2.0 * rows + 1.1), sharex=True,
                                     sharey=True, squeeze=False, constrained_layout=True)
    panels = list(axes.ravel())
    for ax, regime in zip(panels, regimes):
        _block_panel(ax, study, regime)
    for ax in panels[len(regimes):]:
        ax.remove()
    _shared_block_axes(panels[0], (shared or {}).get("block_sizes") or _block_sizes(study))
    _shared_legend(fig, panels[:len(regimes)])
    fig.supylabel("Kendall τ_b (commit call vs bin)", fontsize=8)
    fig.suptitle("Block order per regime: τ_b against bin size, beside the block-sequential control\n"
                 "small numbers: how many generations each block τ_b (bins) point rests on", fontsize=9)
    return fig


def _block_panel(ax, study: OrderStudy, regime: str) -> None:
    curves = study.block_curves(regime)
    ax.axhline(0, color="grey", linewidth=0.6, linestyle="-", label="_no order")
    for key, curve in curves.items():
        if curve:
            bins = sorted(curve)
            ax.plot(bins, [curve[b] for b in bins], label=BLOCK_CURVES[key], **CURVE_STYLES[key])
    _scalar_control(ax, study.regimes[regime], curves)
    _paper_marks(ax, regime, study.regimes[regime])
    _defined_counts(ax, study, regime, curves.get("block_tau") or {})
    if len(ax.lines) == 1:
        ax.text(0.5, 0.5, "no block τ_b defined", transform=ax.transAxes, ha="center", va="center", fontsize=7)
    ax.set_title(f"{regime}\n{study.sample(regime)}".strip(), fontsize=8)
    ax.set_xlabel("bin size (positions)", fontsize=7)
    ax.xaxis.set_tick_params(labelbottom=True)  # every panel keeps its bin sizes, even above an empty grid cell


def _scalar_control(ax, summary: dict[str, Any], curves: dict[str, dict[int, float]]) -> None:
    """Older files have only the control's whole-sequence tau_b: a dotted level instead of a curve."""
    control = summary.get("control_tau")
    if isinstance(control, (int, float)) and not any(key.startswith("control") for key in curves):
        ax.axhline(control, color=figures.OKABE_ITO[0], linestyle=(0, (1, 3)), linewidth=1,
                   label="block-sequential control (blocks of 16)")


def _paper_marks(ax, regime: str, summary: dict[str, Any]) -> None:
    """The paper's values, only on its canvas length (validity rules: no comparison across canvases)."""
    paper = PAPER_BLOCK_TAU.get(regime)
    if paper and validity.paper_comparable(summary.get("canvas_length", validity.PAPER_CANVAS)):
        bins = sorted(paper)
        ax.plot(bins, [paper[b] for b in bins], marker="*", markersize=7, linestyle="none", color="#000000",
                label=PAPER_LABEL, gid="paper")


def _defined_counts(ax, study: OrderStudy, regime: str, curve: dict[int, float]) -> None:
    """Each bin-level point's number of generations: a value resting on 8 of 100 must not read as resting on 100."""
    for size, value in curve.items():
        count = study.defined_count(regime, f"block_tau_{size}")
        if count is not None:
            ax.annotate(str(count), (size, value), textcoords="offset points", xytext=(4, 3), ha="left", fontsize=6,
                        color=CURVE_STYLES["block_tau"]["color"], zorder=5,
                        bbox={"boxstyle": "round,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.8})


def _shared_block_axes(ax, sizes: list[int]) -> None:
    ticks = sorted(set(sizes)) or [4, 8, 16, 32, 64]
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set_xlim(ticks[0] / 1.3, ticks[-1] * 1.3)
    ax.set_ylim(*TAU_LIMITS)


def _shared_legend(fig, panels: list) -> None:
    handles: dict[str, Any] = {}
    for ax in panels:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=min(3, len(handles)),
                   frameon=False, fontsize=7)


# ---- confidence against correctness ---------------------------------------------------------------------

def auroc_figure(study: OrderStudy, shared: dict[str, Any] | None = None):
    """AUROC per regime beside the pooled one, and reliability curves; None when the file has neither.
    ``shared`` (``shared_axes``): the ranges of several runs drawn alike."""
    regimes = [r for r, s in study.regimes.items() if s.get("auroc") is not None]
    pooled = study.metrics.get("pooled_auroc") or {}
    if not regimes and pooled.get("value") is None:
        return None
    fig, (left, right) = figures.plt.subplots(1, 2, figsize=(8.4, 1.8 + 0.45 * (len(regimes) + 1)),
                                              constrained_layout=True)
    shared = shared or {}
    _auroc_points(left, study, regimes, pooled)
    _reliability(right, study)
    if shared.get("auroc_x"):
        left.set_xlim(*shared["auroc_x"])
    if shared.get("reliability_x"):
        right.set_xlim(*shared["reliability_x"])
    if shared.get("reliability_y"):
        right.set_ylim(*shared["reliability_y"])
    fig.suptitle("Does confidence predict correctness?")
    return fig


def _auroc_points(ax, study: OrderStudy, regimes: list[str], pooled: dict[str, Any]) -> None:
    xs, labels = [0.5], []
    for row, regime in enumerate(regimes):
        summary = study.regimes[regime]
        value, ci = summary["auroc"], _allowed_ci(summary, "auroc", summary.get("auroc_ci"), study)
        err = None if not ci else [[value - ci[0]], [ci[1] - value]]
        ax.errorbar(value, row, xerr=err, fmt="o", color=figures.OKABE_ITO[0], capsize=3)
        xs += [value, *(ci or ())]
        labels.append(_with_sample(regime, study.sample(regime, scored=True)).replace(" · ", "\n"))
    if pooled.get("value") is not None:
        ax.plot(pooled["value"], len(regimes), marker="D", color=figures.OKABE_ITO[5], linestyle="none")
        xs.append(pooled["value"])
        flag = "Simpson flag raised" if pooled.get("simpson_prone") else "a diagnostic"
        labels.append(f"pooled ({flag})\n{pooled.get('n', '-')} generations")
    ax.axvline(0.5, color="grey", linestyle=":", linewidth=1)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylim(len(labels) - 0.5, -0.5)  # first regime on top
    ax.set_xlim(*figures.padded_limits(xs))
    ax.set_xlabel("AUROC (−commit entropy → correct), 95% CI")
    ax.set_title("Within regime vs pooled")


def _auroc_xs(study: OrderStudy) -> list[float]:
    """Every value the AUROC axis must hold: 0.5, each regime's AUROC and CI, the pooled AUROC."""
    xs = [0.5]
    for regime, summary in study.regimes.items():
        if summary.get("auroc") is not None:
            xs += [summary["auroc"], *(_allowed_ci(summary, "auroc", summary.get("auroc_ci"), study) or ())]
    pooled = (study.metrics.get("pooled_auroc") or {}).get("value")
    return xs + ([pooled] if pooled is not None else [])


def _reliability_curves(study: OrderStudy) -> list[tuple[str, list[float], list[float], Any]]:
    """Per regime with a reliability curve: (regime, entropy midpoints, accuracies, scored count)."""
    found = []
    for regime, summary in study.regimes.items():
        curve = [t for t in (summary.get("reliability") or []) if t.get("accuracy") is not None]
        if curve:
            found.append((regime, [float(np.mean(t["entropy_range"])) for t in curve], [t["accuracy"] for t in curve],
                          summary.get("n_scored", summary.get("n_generations", "-"))))
    return found


def _reliability(ax, study: OrderStudy) -> None:
    xs, ys = [], [0.0, 1.0]
    index = {regime: i for i, regime in enumerate(study.regimes)}
    for regime, x, y, count in _reliability_curves(study):
        i = index[regime]
        ax.plot(x, y, marker="osD^v"[i % 5], linestyle=["-", "--", ":"][i % 3], color=figures.OKABE_ITO[i % 8],
                label=f"{regime} (n={count})")
        xs, ys = xs + x, ys + y
    ax.set_xlabel("commit entropy (nats, tertile midpoint)")
    ax.set_ylabel("accuracy (fraction correct)")
    if xs:
        ax.set_xlim(*figures.padded_limits(xs))
    ax.set_ylim(*figures.padded_limits(ys))
    ax.set_title("Reliability by entropy tertile")
    if ax.lines:
        ax.legend(fontsize=7, frameon=False)


# ---- the column -----------------------------------------------------------------------------------------

def _figure(figs: figures.FigureSet, build: Callable[[], Any], name: str, alt: str) -> str:
    """Build a figure in the report's style and save it (the style also governs how the SVG is written)."""
    with figures.style():
        fig = build()
        return "" if fig is None else figs.save(fig, name, alt)


def _ci(value: Any, ci: Any) -> str:
    return number(value) + (f" [{number(ci[0])}, {number(ci[1])}]" if ci else "")


def _allowed_ci(summary: dict[str, Any], name: str, ci: Any, study: OrderStudy) -> Any:
    """The interval if the validity rules allow it (enough prompts, minority class, resamples), else None."""
    ruled = validity.regime_rulings(summary, study.metrics.get("n_bootstrap")).get(name)
    return ci if ruled is None or ruled[0].interval else None


def _ruled(summary: dict[str, Any], name: str, study: OrderStudy) -> str:
    ruled = validity.regime_rulings(summary, study.metrics.get("n_bootstrap")).get(name)
    text = _ci(summary.get(name), _allowed_ci(summary, name, summary.get(f"{name}_ci"), study))
    return text + validity.flag_text(ruled[0]) if ruled is not None and summary.get(name) is not None else text


def regime_rows(study: OrderStudy) -> list[list[str]]:
    rows = []
    for regime, s in study.regimes.items():
        calls = s.get("accept_calls") or {}
        tau_b = _ruled(s, "tau_b", study) + f" (over {defined_in(s)})"
        prompts = f" ({s['n_prompts']} prompts)" if s.get("n_prompts") is not None else ""
        rows.append([regime, f"{s.get('n_generations')}{prompts}", tau_b,
                     number(s.get("control_tau")), number(s.get("tokens_per_call")),
                     number(s.get("same_call_fraction")),
                     f"{number(s.get('unaccept_events'))} ({s.get('unaccept_events_total', '-')} total)",
                     f"{number(calls.get('mean'))} [{calls.get('min', '-')}-{calls.get('max', '-')}] / "
                     f"{calls.get('budget', '-')}",
                     number(s.get("accuracy")), _ruled(s, "auroc", study)])
    return rows


def _generations(count: Any) -> str:
    return plural(count, "generation") if isinstance(count, int) else f"{count if count is not None else '-'} generations"


def _in_words(note: str) -> str:
    """A note as a reader words it: the metrics' keys named by what they mean."""
    return note.replace("simpson_prone tests", "The Simpson flag tests").replace("simpson_prone", "the Simpson flag")


def order_column(study: OrderStudy, key: str, title: str, figs: figures.FigureSet) -> str:
    shared = shared_axes(figs.runs)
    pooled = study.metrics.get("pooled_auroc") or {}
    body = [notes(study.notes), "<h4>Per regime</h4>",
            '<div class="scroll">' + table(("regime", "generations (prompts)",
                                            "τ_b [95% CI] (over the generations it is defined for)",
                                            "control τ_b", "tokens / call", "same-call fraction",
                                            "un-accepts / generation",
                                            "accept calls [min-max] / budget",
                                            "accuracy", "autoregressive baseline's accuracy", "AUROC [95% CI]"),
                                           [[*row[:-1], baseline_accuracy(study, row[0]), row[-1]]
                                            for row in regime_rows(study)]) + "</div>",
            f'<p class="simpson"><strong>Pooled AUROC {esc(number(pooled.get("value")))}</strong> over '
            f'{esc(_generations(pooled.get("n")))}: {esc(_in_words(pooled.get("note", "")))}</p>',
            drill_down(study),
            _figure(figs, lambda: raster_figure(study, representative_traces(study)), f"{key}-commit-raster",
                    "commit rasters per regime"),
            _figure(figs, lambda: block_tau_figure(study, shared), f"{key}-block-tau",
                    "block tau against bin size, one panel per regime, with controls and the paper's values"),
            _figure(figs, lambda: auroc_figure(study, shared), f"{key}-auroc-reliability",
                    "AUROC per regime and pooled, and reliability curves")]
    return column(title, study.environment, "".join(body), str(study.source))
