"""The commit raster's axes count whole things (accept calls, canvas positions): their ticks are integers, also
for a generation of two calls, where matplotlib's default ticks would fall on -0.5 and 0.5."""

from __future__ import annotations

import pytest

from canvaslab.reports.html import figures
from canvaslab.reports.html.order_panel import raster_figure
from canvaslab.reports.readers.order_metrics import read, representative_traces


def _visible(ticks, limits) -> list[float]:
    low, high = sorted(limits)
    return [tick for tick in ticks if low <= tick <= high]


@pytest.mark.parametrize("calls, width", [(2, 8), (6, 256)])
def test_raster_ticks_are_whole_calls_and_positions(tmp_path, writers, calls, width):
    writers.order_study(tmp_path, generations=6, regimes=("math",), calls=calls, width=width, n_bootstrap=0)
    study = read(tmp_path)
    fig = raster_figure(study, representative_traces(study))
    try:
        rasters = [ax for ax in fig.axes if ax.images]
        assert rasters
        for ax in rasters:
            fig.canvas.draw()
            calls_shown = _visible(ax.get_yticks(), ax.get_ylim())
            positions = _visible(ax.get_xticks(), ax.get_xlim())
            assert calls_shown and positions
            assert all(float(tick).is_integer() and 0 <= tick < calls for tick in calls_shown), calls_shown
            assert all(float(tick).is_integer() and 0 <= tick < width for tick in positions), positions
    finally:
        figures.plt.close("all")
