"""The op scan's panel: ops x batch sizes, each cell coloured (and numbered) by its equivalence class,
class 0 being the batch sizes that agree with B=1 bit for bit; one heatmap per mode, side by side."""

from __future__ import annotations

import numpy as np
from matplotlib.colors import ListedColormap

from canvaslab.reports.html import figures
from canvaslab.reports.html.markup import column, table
from canvaslab.reports.readers.op_scan import OpScan

# Class 0 (agrees with B=1) light, later classes darker: readable in greyscale, numbers in the cells too.
CLASS_COLOURS = ["#F2F2F2", "#E69F00", "#56B4E9", "#009E73", "#CC79A7", "#0072B2", "#D55E00", "#000000"]


def class_matrix(scan: dict) -> tuple[np.ndarray, list[str], list[int]]:
    """(ops x batch sizes) class index: 0 = the class holding B=1, then classes in order of their sizes."""
    sizes = scan["batch_sizes"]
    names = list(scan["ops"])
    matrix = np.zeros((len(names), len(sizes)), dtype=int)
    for i, name in enumerate(names):
        classes = sorted(scan["ops"][name]["classes"], key=lambda group: (1 not in group, min(group)))
        for index, group in enumerate(classes):
            for size in group:
                matrix[i, sizes.index(size)] = index
    return matrix, names, sizes


def _heatmaps(scan: OpScan, figs: figures.FigureSet, name: str) -> str:
    if not scan.scans:
        return ""
    cmap = ListedColormap(CLASS_COLOURS)
    with figures.style():
        first = scan.scans[0]
        height = 1.4 + 0.22 * len(first["ops"])
        fig, axes = figures.plt.subplots(1, len(scan.scans), figsize=(3.2 + 3.0 * len(scan.scans), height), squeeze=False,
                                         sharey=True, constrained_layout=True)
        for ax, mode_scan in zip(axes[0], scan.scans):
            matrix, names, sizes = class_matrix(mode_scan)
            ax.imshow(np.minimum(matrix, len(CLASS_COLOURS) - 1), cmap=cmap, vmin=-0.5, vmax=len(CLASS_COLOURS) - 0.5,
                      aspect="auto", interpolation="nearest")
            if len(sizes) <= 24:
                for (i, j), value in np.ndenumerate(matrix):
                    ax.text(j, i, str(value), ha="center", va="center", fontsize=6,
                            color="white" if value in (5, 7) else "black")
            ax.set_xticks(range(len(sizes)), [str(s) for s in sizes], fontsize=6 if len(sizes) > 16 else 8,
                          rotation=90 if len(sizes) > 16 else 0)
            ax.set_yticks(range(len(names)), names, fontsize=7)
            ax.set_xlabel("batch size B")
            ax.set_title(f"{mode_scan['mode']}: {sum(len(o['classes']) == 1 for o in mode_scan['ops'].values())}"
                         f"/{len(names)} ops batch-invariant")
        fig.suptitle("Op scan: equivalence class of row 0's output per batch size\n(0 = agrees with B=1 bit for bit; "
                     "1, 2, ... = other classes)")
        return figs.save(fig, name, "op scan heatmaps of equivalence classes")


def op_scan_column(scan: OpScan, key: str, title: str, figs: figures.FigureSet) -> str:
    names = list(scan.scans[0]["ops"]) if scan.scans else []
    rows = [[name, scan.scans[0]["ops"][name]["shape"],
             *[str(s["ops"].get(name, {}).get("classes", "-")) for s in scan.scans]] for name in names]
    body = [_heatmaps(scan, figs, f"{key}-op-scan"),
            "<details><summary>classes per op</summary><div class=\"scroll\">"
            + table(("op", "per-sequence shape", *[s["mode"] for s in scan.scans]), rows) + "</div></details>"]
    return column(title, scan.environment, "".join(body), str(scan.source))
