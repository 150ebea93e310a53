"""The batch-size study's panel: results at a glance, first divergence and origin per run, the spread
(layer x pass heatmaps, positions per layer, % router scores and % final logits) and the denoising path.

Pages stay usable with many batch sizes: the origins are grouped (one row per distinct origin) with
the per-run table folded away, heatmaps are drawn for one batch size per equivalence class (at most
``MAX_HEATMAPS``) plus one batch size x pass overview of every size, and the canvas grids paginate.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch, Rectangle

from canvaslab.reports.names import compact_location, compact_module_path
from canvaslab.reports.html import figures
from canvaslab.reports.html.canvas_grid import DIFFERS, canvas_dataset, showcase_prompt, size_series, state_counts
from canvaslab.reports.html.markup import column, esc, human_bytes, notes, number, table
from canvaslab.reports.readers.batch_study import BatchRun, BatchStudy

MAX_HEATMAPS = 6
MAX_LINES = 8


def glance_rows(study: BatchStudy) -> list[tuple[str, str]]:
    """The results-at-a-glance table, as (measurement, result)."""
    s = study.summary
    runs = s.get("runs")
    return [
        ("generation runs that diverged", f"{s.get('diverged', '-')} / {runs}"),
        ("final texts that changed", f"{s.get('text_changed', '-')} / {runs}"),
        ("stopping points that changed", f"{s.get('stop_changed', '-')} / {runs}"),
        ("denoising passes matching B=1", f"{s.get('passes_matching', '-')} / {s.get('passes_total', '-')}"),
        ("bytes compared", human_bytes(s.get("bytes_compared"))),
        ("batch sizes that agree (classes)", str(s.get("equivalence_classes", "-"))),
        ("B=1 repeated: identical", str(s.get("repeat_control_identical", "-"))),
    ]


def origin_label(record: dict[str, Any]) -> str:
    origin = record.get("origin")
    if not origin:
        return "none"
    text = compact_module_path(origin["name"])
    return text if origin.get("inputs_identical") else f"{text} (inputs already differed)"


def first_label(record: dict[str, Any]) -> str:
    first = record.get("first_divergence")
    return "none" if not first else compact_location(first["pass"], first["call"])


def origin_groups(study: BatchStudy) -> list[tuple[str, str, int, str]]:
    """Runs grouped by (first divergence, origin): (first, origin, runs, batch sizes)."""
    groups: dict[tuple[str, str], list[BatchRun]] = defaultdict(list)
    for run in study.runs:
        groups[(first_label(run.record), origin_label(run.record))].append(run)
    return [(first, origin, len(runs), _ranges(sorted({r.batch_size for r in runs})))
            for (first, origin), runs in sorted(groups.items(), key=lambda item: -len(item[1]))]


def _ranges(sizes: list[int]) -> str:
    parts, start = [], None
    for i, size in enumerate(sizes):
        start = size if start is None else start
        if i + 1 == len(sizes) or sizes[i + 1] != size + 1:
            parts.append(str(start) if start == size else f"{start}-{size}")
            start = None
    return ", ".join(parts)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}%"


def _layers(record: dict[str, Any]) -> str:
    per_layer = record.get("positions_with_difference_per_layer") or {}
    width = record.get("canvas_positions")
    return " · ".join(f"L{k.split()[-1]} {v}/{width}" for k, v in per_layer.items()) or "-"


def run_rows(study: BatchStudy) -> list[list[str]]:
    rows = []
    for run in study.runs:
        r = run.record
        rows.append([run.prompt_id, str(run.batch_size), first_label(r), origin_label(r),
                     _pct(r.get("router_scores_changed_pct")), _pct(r.get("final_logits_changed_pct")), _layers(r),
                     f"{r.get('passes_matching')}/{r.get('passes_total')}",
                     f"{'changed' if r.get('text_changed') else 'same'} / {'changed' if r.get('stop_changed') else 'same'}"])
    return rows


def spread_matrix(run: BatchRun) -> tuple[np.ndarray, list[str], list[str]] | None:
    """(layers x passes) fraction of canvas positions whose row-0 layer output differs from B=1."""
    if not run.spread:
        return None
    layers = sorted({k for p in run.spread for k in p["layers"]}, key=lambda k: int(k.split()[-1]))
    matrix = np.full((len(layers), len(run.spread)), np.nan)
    for j, entry in enumerate(run.spread):
        for i, layer in enumerate(layers):
            value = entry["layers"].get(layer)
            if value is not None and entry.get("canvas_positions"):
                matrix[i, j] = value / entry["canvas_positions"]
    labels = [f"c{p['canvas']}p{p['step']}" for p in run.spread]
    return matrix, layers, labels


def representatives(study: BatchStudy, prompt: str) -> list[BatchRun]:
    """One diverged run per equivalence class of this prompt (its smallest batch size), then others."""
    runs = study.runs_of(prompt)
    classes = study.classes_per_prompt.get(prompt) or [[r.batch_size] for r in runs]
    chosen = []
    for group in classes:
        run = next((r for r in runs if r.batch_size in group and r.batch_size != 1), None)
        if run is not None and 1 not in group:
            chosen.append(run)
    chosen += [r for r in runs if r not in chosen and r.record.get("diverged")]
    return sorted(chosen[:MAX_HEATMAPS] or runs[:MAX_HEATMAPS], key=lambda run: run.batch_size)


def _heatmaps(study: BatchStudy, prompt: str, figs: figures.FigureSet, name: str) -> str:
    runs = [r for r in representatives(study, prompt) if r.spread]
    if not runs:
        return ""
    with figures.style():
        fig, axes = figures.plt.subplots(1, len(runs), figsize=(2.2 + 2.0 * len(runs), 2.6), squeeze=False,
                                         sharey=True, constrained_layout=True)
        image = None
        for ax, run in zip(axes[0], runs):
            matrix, layers, labels = spread_matrix(run)
            image = ax.imshow(matrix, aspect="auto", cmap="cividis", vmin=0, vmax=1, interpolation="nearest")
            ax.set_title(f"B={run.batch_size}")
            ax.set_xlabel("decoder pass (canvas c, pass p)")
            ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=6)
            ax.set_yticks(range(len(layers)), [layer.split()[-1] for layer in layers])
        axes[0][0].set_ylabel("decoder layer")
        fig.colorbar(image, ax=axes[0].tolist(), label="fraction of canvas positions\ndiffering from B=1 (0-1)")
        fig.suptitle(f"Spread in row 0 ({prompt}): decoder layer output vs B=1, per pass")
        return figs.save(fig, name, f"layer by pass heatmaps of the spread for prompt {prompt}")


def _overview(study: BatchStudy, prompt: str, figs: figures.FigureSet, name: str) -> str:
    """Batch size x pass: fraction of positions differing at the last decoder layer, every batch size."""
    runs = [r for r in study.runs_of(prompt) if r.spread]
    if len(runs) < 2:
        return ""
    width = max(len(r.spread) for r in runs)
    matrix = np.full((len(runs), width), np.nan)
    for i, run in enumerate(runs):
        m, _, _ = spread_matrix(run)
        matrix[i, : m.shape[1]] = m[-1]
    with figures.style():
        fig, ax = figures.plt.subplots(figsize=(6.4, 1.2 + 0.16 * len(runs)), constrained_layout=True)
        image = ax.imshow(matrix, aspect="auto", cmap="cividis", vmin=0, vmax=1, interpolation="nearest")
        ax.set_yticks(range(len(runs)), [str(r.batch_size) for r in runs], fontsize=6 if len(runs) > 16 else 8)
        ax.set_xlabel("decoder pass (index across canvases)")
        ax.set_ylabel("batch size B")
        ax.set_title(f"Last decoder layer: positions differing from B=1 ({prompt})")
        fig.colorbar(image, ax=ax, label="fraction (0-1)")
        return figs.save(fig, name, "batch size by pass overview of the spread at the last layer")


def _path_lines(study: BatchStudy, prompt: str, figs: figures.FigureSet, name: str) -> str:
    """Per pass, the canvas positions that differ from B=1 (representative batch sizes), stops marked."""
    reference = study.reference_paths.get(prompt)
    runs = [r for r in representatives(study, prompt) if r.path][:MAX_LINES]
    if not reference or not runs:
        return ""
    markers = "osD^vP*X"
    styles = ["-", "--", "-.", ":"]
    with figures.style():
        fig, ax = figures.plt.subplots(figsize=(6.4, 3.0), constrained_layout=True)
        for i, run in enumerate(runs):
            series = size_series(run.path, reference, run.batch_size, run.stop_passes)
            counts = [c["differs"] for c in state_counts(series)]
            ax.plot(range(1, len(counts) + 1), counts, marker=markers[i % 8], linestyle=styles[i % 4],
                    color=figures.OKABE_ITO[i % 8], label=f"B={run.batch_size} (stopped at pass {len(counts)})")
        ax.set_xlabel("decoder pass (1-based, across canvases)")
        ax.set_ylabel("positions differing from B=1 (count)")
        ax.set_title(f"Denoising path: row 0's canvas against B=1 ({prompt})")
        ax.legend(fontsize=7, frameon=False)
        return figs.save(fig, name, "positions differing from B=1 per pass")


def _final_grids(dataset: dict[str, Any], figs: figures.FigureSet, name: str) -> str:
    """Static canvas grids at each size's last pass, for print: lightness and hatching, not hue alone."""
    sizes = dataset["sizes"][:MAX_LINES]
    side = int(np.ceil(np.sqrt(dataset["width"])))
    with figures.style():
        fig, axes = figures.plt.subplots(1, len(sizes), figsize=(1.5 * len(sizes) + 0.4, 2.3), squeeze=False)
        cmap = ListedColormap([figures.NOISE, figures.COMMITTED, figures.DIFFERS])
        for ax, series in zip(axes[0], sizes):
            last = series["passes"][-1]["state"]
            cells = np.full(side * side, np.nan)
            cells[: len(last)] = [int(state) for state in last]
            ax.imshow(cells.reshape(side, side), cmap=cmap, vmin=-0.5, vmax=2.5, interpolation="nearest",
                      extent=(0, side, 0, side))
            # Hatching on top of the differing cells only: a few patches, and greyscale-safe.
            for position in (i for i, state in enumerate(last) if state == DIFFERS):
                ax.add_patch(Rectangle((position % side, side - 1 - position // side), 1, 1, fill=False,
                                       edgecolor="black", linewidth=0, hatch=figures.DIFFERS_HATCH))
            ax.set_xlim(0, side)
            ax.set_ylim(0, side)
            ax.set_aspect("equal")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"B={series['B']}, pass {len(series['passes'])}", fontsize=8)
        fig.legend(handles=[Patch(facecolor=figures.NOISE, edgecolor="grey", label="noise"),
                            Patch(facecolor=figures.COMMITTED, label="committed token"),
                            Patch(facecolor=figures.DIFFERS, hatch=figures.DIFFERS_HATCH, label="differs from B=1")],
                   loc="lower center", ncol=3, frameon=False, fontsize=8)
        fig.suptitle(f"Row 0's canvas at its last pass ({dataset['prompt']}; {side}x{side} positions, row-major)")
        fig.subplots_adjust(bottom=0.18, top=0.8)
        return figs.save(fig, name, "canvas grids at the last pass")


def batch_column(study: BatchStudy, key: str, title: str, figs: figures.FigureSet) -> tuple[str, dict | None]:
    """One folder's batch-study column and its canvas dataset for the page's denoising path."""
    prompt = showcase_prompt(study)
    dataset = canvas_dataset(study, prompt, key, title) if prompt else None
    body = [notes(study.notes), '<h4>Results at a glance</h4>', table(("measurement", "result"), glance_rows(study))]
    if dataset:
        body += [f"<h4>Denoising path (prompt {esc(prompt)})</h4>",
                 f'<div class="grids" data-dataset="{esc(key)}" aria-label="canvas grids, {esc(title)}"></div>']
    body += ["<h4>First divergence and origin</h4>",
             table(("first divergence", "origin (op that created it)", "runs", "batch sizes"), origin_groups(study)),
             f'<details><summary>every run ({len(study.runs)}): router and logits % in the first differing '
             f'decoder pass; canvas positions differing per layer</summary><div class="scroll">'
             + table(("prompt", "B", "first divergence", "origin", "router", "logits", "positions per layer",
                      "passes", "text / stop"), run_rows(study)) + "</div></details>"]
    if prompt:
        body += [f"<h4>Spread (prompt {esc(prompt)})</h4>", _heatmaps(study, prompt, figs, f"{key}-spread-heatmap"),
                 _overview(study, prompt, figs, f"{key}-spread-overview"),
                 "<h4>Denoising path, for print</h4>", _path_lines(study, prompt, figs, f"{key}-path-differs")]
    if dataset:
        body.append(_final_grids(dataset, figs, f"{key}-canvas-final"))
    return column(title, study.environment, "".join(body), str(study.source)), dataset


__all__ = ["batch_column", "glance_rows", "origin_groups", "run_rows", "spread_matrix", "number"]
