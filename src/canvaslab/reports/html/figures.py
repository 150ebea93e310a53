"""Figures for papers and for the page: matplotlib, a colour-blind-safe palette, PNG and SVG on disk and
the same SVG inline in the HTML.

The inline copy is made self-contained: no XML prolog, DOCTYPE (it names a URL), metadata or namespace
URLs, and every element id prefixed by the figure's name, since one page holds many SVGs whose ids
(clip paths, markers) would otherwise collide. Text stays text (``svg.fonttype = none``), rendered by
the viewer's own sans-serif font: no font is embedded or fetched.
"""

from __future__ import annotations

import io
import math
import re
from pathlib import Path

import matplotlib
import matplotlib.text

from canvaslab.io import atomic_writer, write_text_atomic

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Okabe & Ito (2008): distinguishable under the common colour-vision deficiencies.
OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
# The three canvas states: lightness alone separates them (greyscale print), and "differs" is hatched.
NOISE, COMMITTED, DIFFERS = "#E8E8E8", "#0072B2", "#E69F00"
DIFFERS_HATCH = "////"
STYLE = {
    "svg.fonttype": "none", "svg.hashsalt": "canvaslab", "font.family": "sans-serif", "font.size": 11,
    "axes.titlesize": 12, "axes.prop_cycle": matplotlib.cycler(color=OKABE_ITO), "figure.dpi": 100,
    "axes.spines.top": False, "axes.spines.right": False,
    "text.parse_math": False,  # titles hold prompt ids: a "$" is a dollar sign, never math markup
}
PNG_DPI = 200
# The smallest text a figure may hold, in points; the page never draws an SVG unit smaller than a CSS pixel
# (``inline_svg``), so no figure text is under 11 px at 100% zoom.
MIN_FONT_PT = 11.0


class FigureSet:
    """Writes each figure as ``NAME.png`` and ``NAME.svg`` into ``folder`` and keeps its inline SVG.

    ``below``: a folder above ``folder`` (the page's) from which every folder down to ``folder`` must be a real
    one, created here or found as a folder, never a symbolic link; each file is written to a new temporary file
    in it and renamed into place (``canvaslab.io.atomic_writer``), so a link at a figure's name is replaced, never
    written through.

    ``runs``: the study views of every folder of the section being drawn (set by the page), from which a
    column's figures take shared axis ranges when there are several; ``limits``: per figure written, the
    ``(x limits, y limits)`` of each of its axes, as drawn.
    """

    def __init__(self, folder: Path, below: Path | None = None):
        self.folder, self.below = folder, below
        self.written: list[Path] = []
        self.runs: list = []
        self.limits: dict[str, list[tuple[tuple[float, float], tuple[float, float]]]] = {}

    def save(self, fig, name: str, alt: str) -> str:
        """Write the files, close the figure, return an inline ``<figure>`` (SVG + caption-free alt text)."""
        readable(fig)
        self.limits[name] = [(tuple(map(float, ax.get_xlim())), tuple(map(float, ax.get_ylim()))) for ax in fig.axes]
        try:
            with atomic_writer(self.folder / f"{name}.png", binary=True, below=self.below) as handle:
                fig.savefig(handle, format="png", dpi=PNG_DPI, bbox_inches="tight")
            buffer = io.StringIO()
            fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
        finally:
            plt.close(fig)
        svg = visible_controls(buffer.getvalue())
        write_text_atomic(self.folder / f"{name}.svg", svg, below=self.below)
        self.written += [self.folder / f"{name}.png", self.folder / f"{name}.svg"]
        return (f'<figure class="figure" data-figure="{name}">{inline_svg(svg, name, alt)}'
                f'<figcaption>{name}.png / {name}.svg beside this page</figcaption></figure>')


def readable(fig) -> None:
    """Raise every text of ``fig`` (titles, labels, ticks, legends, annotations) to at least ``MIN_FONT_PT``;
    the figure's layout engine then makes room for it when it is saved."""
    for text in fig.findobj(matplotlib.text.Text):
        if text.get_text() and text.get_fontsize() < MIN_FONT_PT:
            text.set_fontsize(MIN_FONT_PT)


# XML 1.0 forbids the C0 controls but tab, newline and carriage return; matplotlib writes figure text (prompt
# ids, token text) as it is, so each becomes its Unicode control picture (NUL -> U+2400, DEL -> U+2421).
_CONTROL_PICTURES = {**{c: 0x2400 + c for c in range(0x20) if chr(c) not in "\t\n\r"}, 0x7F: 0x2421}


def visible_controls(svg: str) -> str:
    return svg.translate(_CONTROL_PICTURES)


def inline_svg(svg: str, prefix: str, alt: str) -> str:
    """matplotlib's SVG made safe to inline many times in one HTML page, with no URL left in it."""
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)
    svg = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}-{m.group(1)}"', svg)
    svg = re.sub(r'url\(#([^)]+)\)', lambda m: f"url(#{prefix}-{m.group(1)})", svg)
    svg = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{prefix}-{m.group(1)}"', svg)
    box = re.search(r'viewBox="[\d.]+ [\d.]+ ([\d.]+) [\d.]+"', svg)
    # One SVG unit (a point) is drawn at least one CSS pixel wide, and at most 1.6: text keeps its size in
    # points or more, while the figure follows the width of its column.
    size = f' style="min-width:{float(box.group(1)):.0f}px;max-width:{1.6 * float(box.group(1)):.0f}px"' if box else ""
    return svg.replace("<svg", f'<svg role="img" aria-label="{_attr(alt)}"{size}', 1)


def _attr(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def figure(width: float, height: float, **kwargs):
    """A new figure and axes in the report's style."""
    with plt.rc_context(STYLE):
        return plt.subplots(figsize=(width, height), **kwargs)


def style():
    return plt.rc_context(STYLE)


def padded_limits(values, margin: float = 0.06) -> tuple[float, float]:
    """Axis limits holding every finite value with ``margin`` of the span to spare on each side, so no
    marker sits on (and is cut by) the edge; a single value gets ``margin`` either side."""
    finite = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    low, high = (min(finite), max(finite)) if finite else (0.0, 1.0)
    pad = margin * (high - low) or margin
    return low - pad, high + pad
