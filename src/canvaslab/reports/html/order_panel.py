"""The commit-order study's panel: commit rasters, block-tau curves with the block-sequential control,
batching and un-accepts, accept calls against the budget, reliability and AUROC per regime, and the
pooled AUROC beside the within-regime ones (Simpson's paradox made visible).

Rasters show a few representative generations per regime (tau_b nearest the regime's median), so a
study of hundreds of generations draws as many rasters as it has regimes, times two.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from canvaslab.analysis.order_metrics import commit_calls
from canvaslab.reports.html import figures
from canvaslab.reports.html.markup import column, esc, notes, number, table
from canvaslab.reports.order_metrics import defined_in
from canvaslab.reports.readers.order_metrics import OrderStudy, representative_traces

# Raster cell kinds: lightness orders them for greyscale too.
RASTER_KINDS = (("not accepted", "#F2F2F2"), ("accepted (not content)", "#9AC9E8"), ("accepted", "#0072B2"),
                ("commit call (first acceptance)", "#E69F00"), ("un-accepted on this call", "#000000"))


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


def _rasters(study: OrderStudy, figs: figures.FigureSet, name: str) -> str:
    picked = representative_traces(study)
    if not picked:
        return ""
    rows, cols = len(picked), max(len(v) for v in picked.values())
    cmap = ListedColormap([colour for _, colour in RASTER_KINDS])
    with figures.style():
        fig, axes = figures.plt.subplots(rows, cols, figsize=(3.4 * cols + 0.5, 1.5 + 1.3 * rows), squeeze=False,
                                         constrained_layout=True)
        for row, (regime, chosen) in enumerate(picked.items()):
            for col in range(cols):
                ax = axes[row][col]
                if col >= len(chosen):
                    ax.axis("off")
                    continue
                trace, measures = chosen[col]
                ax.imshow(raster_matrix(trace), aspect="auto", cmap=cmap, vmin=-0.5, vmax=len(RASTER_KINDS) - 0.5,
                          interpolation="nearest", origin="upper")
                ax.set_title(f"{regime}: {trace.generation_id} (τ_b {number(measures.tau_b, 2)})", fontsize=8)
                ax.set_xlabel("canvas position (token index)")
                ax.set_ylabel("accept call (0-based)")
        fig.legend(handles=[Patch(facecolor=c, edgecolor="grey", label=label) for label, c in RASTER_KINDS],
                   loc="outside lower center", ncol=3, frameon=False, fontsize=7)
        fig.suptitle("Commit rasters: which positions each accept call held, per regime")
        return figs.save(fig, name, "commit rasters per regime")


def _block_curves(study: OrderStudy, figs: figures.FigureSet, name: str) -> str:
    regimes = list(study.regimes)
    if not regimes:
        return ""
    styles = ["-", "--", ":"]
    with figures.style():
        fig, ax = figures.plt.subplots(figsize=(6.4, 3.2), constrained_layout=True)
        for i, regime in enumerate(regimes):
            colour = figures.OKABE_ITO[i % 8]
            curves = study.block_curves(regime)
            for j, (label, curve) in enumerate(curves.items()):
                if curve:
                    bins = sorted(curve)
                    control = "control" in label  # controls dotted and hollow: told apart without colour
                    ax.plot(bins, [curve[b] for b in bins], marker="osD^v"[i % 5], linestyle=":" if control else styles[j % 2],
                            color=colour, markerfacecolor="none" if control else colour, label=f"{regime}: {label}")
            control = study.regimes[regime].get("control_tau")
            if isinstance(control, (int, float)) and not any("control" in label for label in curves):
                ax.axhline(control, color=colour, linestyle=(0, (1, 3)), linewidth=1,
                           label=f"{regime}: block-sequential control (blocks of 16)")
        ax.set_xscale("log", base=2)
        ax.set_xticks([4, 8, 16, 32, 64], ["4", "8", "16", "32", "64"])
        ax.set_xlabel("bin size (canvas positions)")
        ax.set_ylabel("Kendall τ_b (commit call vs bin)")
        ax.set_title("Block order: τ_b against bin size, with the block-sequential control")
        ax.legend(fontsize=6, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
        return figs.save(fig, name, "block tau against bin size per regime")


def _auroc(study: OrderStudy, figs: figures.FigureSet, name: str) -> str:
    regimes = [r for r, s in study.regimes.items() if s.get("auroc") is not None]
    pooled = (study.metrics.get("pooled_auroc") or {}).get("value")
    if not regimes and pooled is None:
        return ""
    with figures.style():
        fig, (left, right) = figures.plt.subplots(1, 2, figsize=(7.6, 1.6 + 0.35 * (len(regimes) + 1)),
                                                  constrained_layout=True)
        for i, regime in enumerate(regimes):
            summary = study.regimes[regime]
            ci = summary.get("auroc_ci")
            err = None if not ci else [[summary["auroc"] - ci[0]], [ci[1] - summary["auroc"]]]
            left.errorbar(summary["auroc"], i, xerr=err, fmt="o", color=figures.OKABE_ITO[0], capsize=3)
        labels = list(regimes)
        if pooled is not None:
            left.plot(pooled, len(regimes), marker="D", color=figures.OKABE_ITO[5], linestyle="none")
            labels.append("pooled (Simpson-prone)")
        left.axvline(0.5, color="grey", linestyle=":", linewidth=1)
        left.set_yticks(range(len(labels)), labels)
        left.invert_yaxis()
        left.set_xlim(0, 1)
        left.set_xlabel("AUROC (−commit entropy → correct), 95% CI")
        left.set_title("Within regime vs pooled")
        for i, regime in enumerate(study.regimes):
            curve = [t for t in (study.regimes[regime].get("reliability") or []) if t.get("accuracy") is not None]
            if curve:
                x = [float(np.mean(t["entropy_range"])) for t in curve]
                right.plot(x, [t["accuracy"] for t in curve], marker="osD^v"[i % 5], linestyle=["-", "--", ":"][i % 3],
                           color=figures.OKABE_ITO[i % 8], label=regime)
        right.set_xlabel("commit entropy (nats, tertile midpoint)")
        right.set_ylabel("accuracy (fraction correct)")
        right.set_ylim(-0.02, 1.02)
        right.set_title("Reliability by entropy tertile")
        if right.lines:
            right.legend(fontsize=7, frameon=False)
        fig.suptitle("Does confidence predict correctness?")
        return figs.save(fig, name, "AUROC per regime and pooled, and reliability curves")


def _ci(value: Any, ci: Any) -> str:
    return number(value) + (f" [{number(ci[0])}, {number(ci[1])}]" if ci else "")


def regime_rows(study: OrderStudy) -> list[list[str]]:
    rows = []
    for regime, s in study.regimes.items():
        calls = s.get("accept_calls") or {}
        tau_b = _ci(s.get("tau_b"), s.get("tau_b_ci")) + f" (over {defined_in(s)})"
        rows.append([regime, str(s.get("n_generations")), tau_b,
                     number(s.get("control_tau")), number(s.get("tokens_per_call")), number(s.get("same_call_fraction")),
                     f"{number(s.get('unaccept_events'))} ({s.get('unaccept_events_total', '-')} total)",
                     f"{number(calls.get('mean'))} [{calls.get('min', '-')}-{calls.get('max', '-')}] / {calls.get('budget', '-')}",
                     number(s.get("accuracy")), _ci(s.get("auroc"), s.get("auroc_ci"))])
    return rows


def order_column(study: OrderStudy, key: str, title: str, figs: figures.FigureSet) -> str:
    pooled = study.metrics.get("pooled_auroc") or {}
    body = [notes(study.notes), "<h4>Per regime</h4>",
            '<div class="scroll">' + table(("regime", "generations", "τ_b [95% CI] (over the generations it is defined for)",
                                            "control τ_b", "tokens / call", "same-call fraction", "un-accepts / generation",
                                            "accept calls [min-max] / budget",
                                            "accuracy", "AUROC [95% CI]"), regime_rows(study)) + "</div>",
            f'<p class="simpson"><strong>Pooled AUROC {esc(number(pooled.get("value")))}</strong> over '
            f'{esc(pooled.get("n", "-"))} generations: {esc(pooled.get("note", ""))}</p>',
            _rasters(study, figs, f"{key}-commit-raster"), _block_curves(study, figs, f"{key}-block-tau"),
            _auroc(study, figs, f"{key}-auroc-reliability")]
    return column(title, study.environment, "".join(body), str(study.source))
