"""The commit-order panel read at a glance: block tau as one panel per regime with its controls and the paper's
values, AUROC axes that hold every point, n on every figure, and commit rasters from compressed or split traces,
read as data (no link followed, decompressed bytes bounded)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest

from canvaslab.api import report as build_report
from canvaslab.cli.main import main
from canvaslab.reports.html import figures
from canvaslab.reports.html.order_panel import auroc_figure, block_tau_figure, raster_figure
from canvaslab.reports.readers import order_metrics
from canvaslab.reports.readers.order_metrics import OrderStudy, iter_traces, read, representative_traces

REGIMES = ("math", "factual", "json", "code_synthesis", "open_ended")
# Seed 003's bin-level block tau for math at bins 4..64 (REFERENCE §4), written out here independently of the code.
PAPER_MATH = [0.59, 0.64, 0.70, 0.79, 0.91]
COMMITTED = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "mini" / "order_study_cpu"


@pytest.fixture(scope="module")
def folder(tmp_path_factory, writers):
    path = tmp_path_factory.mktemp("order")
    writers.order_study(path, generations=20, regimes=REGIMES, n_bootstrap=10)
    return path


@pytest.fixture
def close_figures():
    yield
    figures.plt.close("all")


def _refused(capsys, folder) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(folder)])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2, error
    assert "Traceback" not in error and len(error.strip().splitlines()) == 1, error
    assert not (folder / "report.html").exists()
    return error


def _copy(folder: Path, to: Path) -> Path:
    shutil.copytree(folder, to)
    return to


# ---- block tau: small multiples ------------------------------------------------------------------------

def test_block_tau_is_one_panel_per_regime_on_shared_axes_with_one_short_legend(folder, close_figures):
    fig = block_tau_figure(read(folder))
    assert [ax.get_title().splitlines()[0] for ax in fig.axes] == list(REGIMES)
    first = fig.axes[0]
    assert all(first.get_shared_x_axes().joined(first, ax) and first.get_shared_y_axes().joined(first, ax)
               for ax in fig.axes)
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1
    assert 3 <= len(fig.legends[0].get_texts()) <= 6  # a measure, its control, ...: not one entry per regime


def test_each_panel_draws_its_controls_and_the_paper_only_where_it_reported(folder, close_figures):
    fig = block_tau_figure(read(folder))
    for ax in fig.axes:
        labels = {line.get_label() for line in ax.lines}
        assert {"block τ_b (bins)", "block-sequential control (bins)"} <= labels
        paper = [line for line in ax.lines if line.get_gid() == "paper"]
        if ax.get_title().startswith("math"):
            assert len(paper) == 1
            assert list(paper[0].get_xdata()) == [4, 8, 16, 32, 64]
            np.testing.assert_allclose(paper[0].get_ydata(), PAPER_MATH)
        else:
            assert not paper


def test_every_block_tau_panel_and_point_says_what_it_rests_on(folder, close_figures):
    study = read(folder)
    fig = block_tau_figure(study)
    for ax, regime in zip(fig.axes, REGIMES):
        summary = study.regimes[regime]
        assert f"{summary['n_generations']} generations, {summary['n_prompts']} prompts" in ax.get_title()
        counts = [int(text.get_text()) for text in ax.texts]
        curve = {int(b): v for b, v in summary["block_tau"].items() if v is not None}
        undefined = summary.get("undefined", {})
        assert counts == [summary["n_generations"] - undefined.get(f"block_tau_{b}", {}).get("n", 0) for b in curve]


# ---- AUROC: every point inside the axes -----------------------------------------------------------------

def _points_inside(fig) -> None:
    """Every data point (markers, error-bar caps) lies inside its axes, at least 1% of the axes from an edge;
    reference lines drawn across the whole axes (axhline, axvline) are not points."""
    for ax in fig.axes:
        to_axes = ax.transData + ax.transAxes.inverted()  # log or linear, 0..1 inside the axes
        for line in ax.lines:
            if line.get_transform() is not ax.transData:
                continue
            points = line.get_xydata()
            inside = to_axes.transform(points[np.isfinite(points).all(axis=1)])
            assert ((inside > 0.01) & (inside < 0.99)).all(), (ax.get_title(), line.get_label(), points, inside)


def _extreme_study() -> OrderStudy:
    reliability = [{"entropy_range": [0.0, 0.01], "n": 5, "accuracy": 1.0},
                   {"entropy_range": [0.01, 0.3], "n": 5, "accuracy": 0.0}]
    regimes = {"math": {"n_generations": 10, "n_prompts": 2, "auroc": 1.0, "auroc_ci": [0.93, 1.0],
                        "reliability": reliability},
               "factual": {"n_generations": 10, "n_prompts": 2, "auroc": 0.0, "auroc_ci": [0.0, 0.1]}}
    return OrderStudy(Path("order_metrics.json"), {"regimes": regimes, "pooled_auroc": {"value": 1.0, "n": 20}})


def test_auroc_and_reliability_axes_hold_every_point_with_a_margin(close_figures):
    _points_inside(auroc_figure(_extreme_study()))


def test_the_committed_study_s_pooled_auroc_is_not_cut_by_the_axes(close_figures):
    _points_inside(auroc_figure(read(COMMITTED)))
    _points_inside(block_tau_figure(read(COMMITTED)))


def test_auroc_labels_say_how_many_generations_and_prompts(close_figures):
    fig = auroc_figure(_extreme_study())
    labels = [label.get_text() for label in fig.axes[0].get_yticklabels()]
    assert labels[0] == "math\n10 generations, 2 prompts" and labels[-1].endswith("20 generations")


def test_padded_limits_hold_a_single_value_and_ignore_what_is_not_a_number():
    assert figures.padded_limits([1.0]) == pytest.approx((0.94, 1.06))
    low, high = figures.padded_limits([0.2, None, float("nan"), 0.8])
    assert low < 0.2 and high > 0.8


# ---- traces: compressed, split, and hostile --------------------------------------------------------------

def _split(folder: Path, names: tuple[str, ...]) -> None:
    """Rewrite ``traces.jsonl`` as the named parts (round robin by line), gzip-compressed where named .gz."""
    lines = (folder / "traces.jsonl").read_bytes().splitlines(keepends=True)
    (folder / "traces.jsonl").unlink()
    for index, name in enumerate(names):
        data = b"".join(lines[index::len(names)])
        (folder / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)


@pytest.mark.parametrize("names", [("traces.jsonl.gz",), ("traces-1.jsonl", "traces-2.jsonl"),
                                   ("traces-1.jsonl.gz", "traces-2.jsonl.gz", "traces-10.jsonl.gz")])
def test_compressed_or_split_traces_yield_rasters(folder, tmp_path, names, close_figures):
    copy = _copy(folder, tmp_path / "order")
    _split(copy, names)
    study = read(copy)
    assert study.notes == [] and [p.name for p in study.trace_files] == list(names)  # 2 before 10
    assert sum(1 for _ in iter_traces(study.trace_files)) == 20
    picked = representative_traces(study)
    assert list(picked) == list(REGIMES) and all(len(chosen) == 2 for chosen in picked.values())
    fig = raster_figure(study, picked)
    assert len([ax for ax in fig.axes if ax.images]) == 2 * len(REGIMES)
    assert "4 generations, 2 prompts" in fig.axes[0].get_title()


def test_a_report_of_split_compressed_traces_draws_the_rasters(folder, tmp_path):
    copy = _copy(folder, tmp_path / "order")
    _split(copy, ("traces-1.jsonl.gz", "traces-2.jsonl.gz"))
    written = build_report([copy], tmp_path / "out" / "report.html")
    assert "order0-commit-raster" in {path.stem for path in written.figures}
    assert "no traces" not in (tmp_path / "out" / "report.html").read_text(encoding="utf-8")


def test_the_committed_study_folder_reads_all_its_compressed_parts():
    study = read(COMMITTED)
    assert [p.name for p in study.trace_files] == ["traces-1.jsonl.gz", "traces-2.jsonl.gz"] and not study.notes
    assert sum(1 for _ in iter_traces(study.trace_files)) == study.metrics["n_generations"]


def test_a_symlinked_trace_part_is_refused_in_one_line(folder, tmp_path, capsys):
    copy = _copy(folder, tmp_path / "order")
    _split(copy, ("traces-1.jsonl.gz",))
    outside = tmp_path / "elsewhere.jsonl.gz"
    (copy / "traces-1.jsonl.gz").rename(outside)
    (copy / "traces-1.jsonl.gz").symlink_to(outside)
    assert "traces-1.jsonl.gz is not a regular file" in _refused(capsys, copy)


def test_a_gzip_bomb_of_one_endless_line_is_refused_in_one_line(folder, tmp_path, capsys):
    copy = _copy(folder, tmp_path / "order")
    (copy / "traces.jsonl").unlink()
    with gzip.open(copy / "traces.jsonl.gz", "wb", compresslevel=1) as bomb:
        for _ in range(80):  # 80 MiB of zeros in about 80 KB
            bomb.write(bytes(1 << 20))
    assert "traces.jsonl.gz line 1 is over 64 MiB" in _refused(capsys, copy)


def test_a_gzip_bomb_of_empty_lines_is_refused_in_one_line(folder, tmp_path, capsys):
    copy = _copy(folder, tmp_path / "order")
    (copy / "traces-9.jsonl.gz").write_bytes(gzip.compress(b"\n" * (8 << 20)))
    assert "more than 65,536 generations" in _refused(capsys, copy)


def test_decompressed_bytes_over_all_parts_are_bounded(folder, tmp_path, capsys, monkeypatch):
    copy = _copy(folder, tmp_path / "order")
    _split(copy, ("traces-1.jsonl.gz", "traces-2.jsonl.gz"))
    size = sum(len(gzip.decompress((copy / n).read_bytes())) for n in ("traces-1.jsonl.gz", "traces-2.jsonl.gz"))
    monkeypatch.setattr(order_metrics, "TRACES_LIMIT", size - 1)
    assert "traces-2.jsonl.gz: the trace files hold more than" in _refused(capsys, copy)


def test_a_damaged_gzip_part_is_refused_in_one_line(folder, tmp_path, capsys):
    copy = _copy(folder, tmp_path / "order")
    _split(copy, ("traces.jsonl.gz",))
    data = (copy / "traces.jsonl.gz").read_bytes()
    (copy / "traces.jsonl.gz").write_bytes(data[: len(data) // 2])
    assert "traces.jsonl.gz is not a readable gzip file" in _refused(capsys, copy)


def test_the_same_generation_in_two_trace_files_is_refused_in_one_line(folder, tmp_path, capsys):
    copy = _copy(folder, tmp_path / "order")
    (copy / "traces.jsonl.gz").write_bytes(gzip.compress((copy / "traces.jsonl").read_bytes()))
    assert "already appears in" in _refused(capsys, copy)
