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
from canvaslab.reports.html.answers import answers_block, verdict_sentence
from canvaslab.reports.html.markup import column, esc, human_bytes, notes, number, plural, table
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
        ("model passes identical to B=1 (every run)", f"{s.get('passes_matching', '-')} / {s.get('passes_total', '-')}"),
        ("bytes compared", human_bytes(s.get("bytes_compared"))),
        ("batch sizes that agree (classes)", str(s.get("equivalence_classes", "-"))),
        ("B=1 repeated: identical", str(s.get("repeat_control_identical", "-"))),
    ]


def pass_note(study: BatchStudy) -> str:
    """How a run's model passes split into the prompt's encoding and the denoising passes (the slider's)."""
    run = next((r for r in study.runs if r.spread and r.record.get("passes_total")), None)
    if run is None:
        return ("Model passes count every forward pass of a run: the prompt's encoding and each denoising pass.")
    denoising = len(run.spread)
    total = int(run.record["passes_total"])
    return (f"Model passes count every forward pass of a run: {plural(total - denoising, 'pass', 'passes')} "
            f"encoding the prompt and {plural(denoising, 'denoising pass', 'denoising passes')} "
            f"(the slider's) make {total} per run (prompt {run.prompt_id}, B={run.batch_size}).")


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


def constant_value(matrix: np.ndarray) -> float | None:
    """The one value every finite cell holds, or None when the cells differ (a figure worth drawing)."""
    finite = matrix[np.isfinite(matrix)]
    return float(finite[0]) if finite.size and np.all(finite == finite[0]) else None


def _constant_sentence(what: str, value: float) -> str:
    meaning = ("no position differs from B=1: the outputs are identical" if value == 0 else
               "every position differs from B=1" if value == 1 else f"{value:.0%} of the positions differ from B=1")
    return f'<p class="constant" role="note">{esc(what)}: at every layer and pass {meaning}, so its figure would be ' \
           'one flat colour and is left out.</p>'


def _heatmap(run: BatchRun, prompt: str, figs: figures.FigureSet, name: str) -> str:
    """One batch size's layer x pass spread, or a sentence when every cell holds the same fraction."""
    matrix, layers, labels = spread_matrix(run)
    flat = constant_value(matrix)
    if flat is not None:
        return f'<div data-batch="{run.batch_size}">{_constant_sentence(f"B={run.batch_size}", flat)}</div>'
    with figures.style():
        fig, ax = figures.plt.subplots(figsize=(2.6 + 0.12 * len(labels), 2.8), constrained_layout=True)
        image = ax.imshow(matrix, aspect="auto", cmap="cividis", vmin=0, vmax=1, interpolation="nearest")
        ax.set_xlabel("denoising pass (canvas c, pass p)")
        step = max(1, len(labels) // 16)  # at most 16 tick labels, so they stay readable
        ax.set_xticks(range(0, len(labels), step), labels[::step], rotation=90)
        ax.set_yticks(range(len(layers)), [layer.split()[-1] for layer in layers])
        ax.set_ylabel("decoder layer")
        fig.colorbar(image, ax=ax, label="fraction of positions\ndiffering from B=1")
        ax.set_title(f"Spread in row 0, B={run.batch_size} ({prompt})")
        svg = figs.save(fig, name, f"layer by pass heatmap of the spread for prompt {prompt}, B={run.batch_size}")
    return svg.replace('<figure class="figure"', f'<figure class="figure" data-batch="{run.batch_size}"', 1)


def _heatmaps(study: BatchStudy, prompt: str, figs: figures.FigureSet, name: str) -> str:
    runs = [r for r in representatives(study, prompt) if r.spread]
    return "".join(_heatmap(run, prompt, figs, f"{name}-b{run.batch_size}") for run in runs)


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
    flat = constant_value(matrix)
    if flat is not None:
        return _constant_sentence("Last decoder layer, every batch size", flat)
    with figures.style():
        fig, ax = figures.plt.subplots(figsize=(6.4, 1.2 + 0.16 * len(runs)), constrained_layout=True)
        image = ax.imshow(matrix, aspect="auto", cmap="cividis", vmin=0, vmax=1, interpolation="nearest")
        step = max(1, len(runs) // 16)
        ax.set_yticks(range(0, len(runs), step), [str(r.batch_size) for r in runs][::step])
        ax.set_xlabel("decoder pass (index across canvases)")
        ax.set_ylabel("batch size B")
        ax.set_title(f"Last decoder layer: positions differing from B=1 ({prompt})")
        fig.colorbar(image, ax=ax, label="fraction (0-1)")
        return figs.save(fig, name, "batch size by pass overview of the spread at the last layer")


def path_counts(study: BatchStudy, prompt: str) -> dict[int, list[int]]:
    """Per representative batch size, row 0's canvas positions differing from B=1 at each pass."""
    reference = study.reference_paths.get(prompt)
    runs = [r for r in representatives(study, prompt) if r.path][:MAX_LINES]
    if not reference:
        return {}
    return {run.batch_size: [c["differs"] for c in state_counts(size_series(run.path, reference, run.batch_size,
                                                                             run.stop_passes))] for run in runs}


def shared_path_axes(studies: list[BatchStudy]) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """The (x, y) limits the per-pass figures of several runs share: every pass and count of every prompt of
    every run; None for one run (its figures keep their own)."""
    if len(studies) < 2:
        return None
    series = [values for study in studies for prompt in study.prompt_ids
              for values in path_counts(study, prompt).values() if values]
    if not series:
        return None
    return ((0.5, max(map(len, series)) + 0.5),
            figures.padded_limits([0, *(max(values) for values in series)]))


def _path_lines(study: BatchStudy, prompt: str, figs: figures.FigureSet, name: str) -> str:
    """Per pass, the canvas positions that differ from B=1 (representative batch sizes), stops marked; on the
    axes of every run of the page when there are several (``shared_path_axes``)."""
    counts = path_counts(study, prompt)
    runs = [r for r in representatives(study, prompt) if r.path][:MAX_LINES]
    if not counts:
        return ""
    if not any(any(values) for values in counts.values()):
        return ('<p class="constant" role="note">No committed token of row 0\'s canvas differs from B=1 at any '
                'denoising pass, for any batch size: the per-pass count is zero throughout and its figure is left '
                'out.</p>')
    markers = "osD^vP*X"
    styles = ["-", "--", "-.", ":"]
    with figures.style():
        fig, ax = figures.plt.subplots(figsize=(6.4, 3.0), constrained_layout=True)
        for i, run in enumerate(runs):
            ax.plot(range(1, len(counts[run.batch_size]) + 1), counts[run.batch_size], marker=markers[i % 8], linestyle=styles[i % 4],
                    color=figures.OKABE_ITO[i % 8], label=f"B={run.batch_size} (stopped at pass {len(counts[run.batch_size])})")
        ax.set_xlabel("decoder pass (1-based, across canvases)")
        ax.set_ylabel("positions differing from B=1 (count)")
        ax.set_title(f"Denoising path: row 0's canvas against B=1 ({prompt})")
        ax.legend(frameon=False)
        shared = shared_path_axes(figs.runs)
        if shared:
            ax.set_xlim(*shared[0])
            ax.set_ylim(*shared[1])
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
            ax.set_title(f"B={series['B']}, pass {len(series['passes'])}")
        fig.legend(handles=[Patch(facecolor=figures.NOISE, edgecolor="grey", label="noise"),
                            Patch(facecolor=figures.COMMITTED, label="committed token"),
                            Patch(facecolor=figures.DIFFERS, hatch=figures.DIFFERS_HATCH, label="differs from B=1")],
                   loc="lower center", ncol=3, frameon=False)
        fig.suptitle(f"Row 0's canvas at its last pass ({dataset['prompt']}; {side}x{side} positions, row-major)")
        fig.subplots_adjust(bottom=0.18, top=0.8)
        return figs.save(fig, name, "canvas grids at the last pass")


def _prompt_block(study: BatchStudy, prompt: str, key: str, title: str, figs: figures.FigureSet) -> tuple[str, dict | None]:
    """Everything the page shows of one prompt: its answers, denoising path, spread; hidden unless selected."""
    dataset = canvas_dataset(study, prompt, key, title)
    text = next((p.get("text") for p in study.config.get("prompts", []) if p.get("prompt_id") == prompt), None)
    body = [f'<h4>Answers (prompt {esc(prompt)})</h4>',
            f'<p class="prompt-text">{esc(text)}</p>' if text else "", answers_block(study, prompt)]
    if dataset:
        body += [f"<h4>Denoising path (prompt {esc(prompt)})</h4>",
                 f'<div class="grids" data-dataset="{esc(key)}" aria-label="canvas grids, {esc(title)}"></div>']
    body += [f"<h4>Spread (prompt {esc(prompt)})</h4>", _heatmaps(study, prompt, figs, f"{key}-spread-heatmap"),
             _overview(study, prompt, figs, f"{key}-spread-overview"),
             "<h4>Denoising path, for print</h4>", _path_lines(study, prompt, figs, f"{key}-path-differs")]
    if dataset:
        body.append(_final_grids(dataset, figs, f"{key}-canvas-final"))
    return f'<div class="per-prompt" data-prompt="{esc(prompt)}">{"".join(body)}</div>', dataset


def batch_column(study: BatchStudy, key: str, title: str, figs: figures.FigureSet) -> tuple[str, list[dict]]:
    """One folder's batch-study column and the canvas datasets (one per prompt) of the page's denoising path."""
    shown = showcase_prompt(study)
    ordered = [p for p in study.prompt_ids if any(r.prompt_id == p for r in study.runs)]
    body = [notes(study.notes), f'<p class="verdict">{esc(verdict_sentence(study))}</p>',
            '<h4>Results at a glance</h4>', table(("measurement", "result"), glance_rows(study)),
            f'<p class="intro">{esc(pass_note(study))}</p>']
    datasets = []
    for index, prompt in enumerate(ordered):
        block, dataset = _prompt_block(study, prompt, f"{key}-{index}", title, figs)
        body.append(block if prompt == shown else block.replace('class="per-prompt"', 'class="per-prompt" hidden', 1))
        datasets += [dataset] if dataset else []
    body += ["<h4>First divergence and origin</h4>",
             table(("first divergence", "origin (op that created it)", "runs", "batch sizes"), origin_groups(study)),
             f'<details><summary>every run ({len(study.runs)}): router and logits % in the first differing '
             f'decoder pass; canvas positions differing per layer</summary><div class="scroll">'
             + table(("prompt", "B", "first divergence", "origin", "router", "logits", "positions per layer",
                      "model passes identical to B=1", "text / stop"), run_rows(study)) + "</div></details>"]
    return column(title, study.environment, "".join(body), str(study.source)), datasets


__all__ = ["batch_column", "glance_rows", "origin_groups", "pass_note", "run_rows", "spread_matrix", "number"]
