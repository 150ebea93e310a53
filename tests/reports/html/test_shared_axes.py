"""Several folders of one study kind: the figures that compare them are drawn on shared axes (read from the
limits the page used, ``Report.axes``); one folder keeps its own."""

from __future__ import annotations

import numpy as np

from canvaslab.api import report as build_report


def _limits(report, name):
    return report.axes[name]


def test_batch_studies_share_the_per_pass_figure_s_axes(tmp_path, writers):
    short, long = tmp_path / "short", tmp_path / "long"
    short.mkdir(), long.mkdir()
    writers.batch_study(short, batch_sizes=(1, 2, 3, 4), passes=5)
    writers.batch_study(long, batch_sizes=(1, 2, 3, 4, 5), passes=8)
    both = build_report([short, long], tmp_path / "both.html")
    (first,), (second,) = _limits(both, "batch0-0-path-differs"), _limits(both, "batch1-0-path-differs")
    assert first == second
    assert first[0] == (0.5, 8.5)  # every pass of the longer run
    alone = build_report([short], tmp_path / "alone.html")
    (own,) = _limits(alone, "batch0-0-path-differs")
    assert own[0][1] < 8 and own != first  # one folder: its own range


def test_order_studies_share_the_block_tau_auroc_and_reliability_axes(tmp_path, writers):
    small, large = tmp_path / "small", tmp_path / "large"
    small.mkdir(), large.mkdir()
    writers.order_study(small, generations=12, calls=4, width=64)  # bins up to 32, not 64
    writers.order_study(large, generations=36, regimes=("math", "factual", "json"), calls=8)
    both = build_report([small, large], tmp_path / "both.html")
    assert _limits(both, "order0-block-tau")[0] == _limits(both, "order1-block-tau")[0]  # x (bin sizes) and y
    left, right = _limits(both, "order0-auroc-reliability"), _limits(both, "order1-auroc-reliability")
    assert left[0][0] == right[0][0]  # AUROC's x (its y lists each run's own regimes)
    assert left[1] == right[1]  # reliability: x and y
    alone = [build_report([folder], tmp_path / f"{folder.name}.html") for folder in (small, large)]
    assert _limits(alone[0], "order0-block-tau")[0][0] != _limits(alone[1], "order0-block-tau")[0][0]
    assert _limits(both, "order0-block-tau")[0][0] == _limits(alone[1], "order0-block-tau")[0][0]
    own = [_limits(report, "order0-auroc-reliability")[0][0] for report in alone]
    assert own[0] != own[1]  # drawn apart, the AUROC axes differ; drawn together they are one
    shared = _limits(both, "order0-auroc-reliability")[0][0]
    assert shared[0] <= min(o[0] for o in own) + 1e-9 and shared[1] >= max(o[1] for o in own) - 1e-9
    assert np.isfinite(shared).all()
