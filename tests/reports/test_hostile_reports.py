"""The report against folders from elsewhere: it writes figures only into a real folder and never through a
link, reads result files bounded and without following links, and refuses absurd sizes before any work."""

from __future__ import annotations

import errno
import json
import os

import pytest

from canvaslab.api import report as build_report
from canvaslab.cli.main import main
from canvaslab.errors import CanvaslabError, RunFailed


def _refused(capsys, args, code=2) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(["report", *map(str, args)])
    error = capsys.readouterr().err
    assert exit_info.value.code == code, error
    assert "Traceback" not in error and len(error.strip().splitlines()) == 1, error
    return error


@pytest.fixture
def batch(tmp_path, writers):
    folder = tmp_path / "received"
    folder.mkdir()
    writers.batch_study(folder, batch_sizes=(1, 2, 3), passes=3, width=16)
    return folder


def test_a_figures_folder_that_is_a_link_is_refused_before_any_work(tmp_path, batch, capsys):
    victim = tmp_path / "home"
    victim.mkdir()
    (victim / ".bashrc").write_text("the victim's own\n")
    (batch / "report-figures").symlink_to(victim)
    error = _refused(capsys, [batch])
    assert "report-figures is a symbolic link, not a folder" in error
    assert sorted(p.name for p in victim.iterdir()) == [".bashrc"]
    assert (victim / ".bashrc").read_text() == "the victim's own\n" and not (batch / "report.html").exists()


def test_a_figure_file_that_is_a_link_is_replaced_never_written_through(tmp_path, batch, capsys):
    victim = tmp_path / "victim.png"
    victim.write_bytes(b"the victim's own picture")
    (batch / "report-figures").mkdir()
    (batch / "report-figures" / "batch0-0-canvas-final.png").symlink_to(victim)
    (batch / "report.html").symlink_to(tmp_path / "victim.html")
    main(["report", str(batch)])
    assert victim.read_bytes() == b"the victim's own picture" and not (tmp_path / "victim.html").exists()
    written = batch / "report-figures" / "batch0-0-canvas-final.png"
    assert not written.is_symlink() and written.read_bytes().startswith(b"\x89PNG")
    assert not (batch / "report.html").is_symlink()


@pytest.mark.parametrize("kind", ["link to /dev/zero", "fifo", "folder"])
def test_a_result_file_that_is_not_a_regular_file_is_one_line(tmp_path, capsys, kind):
    folder = tmp_path / "received"
    folder.mkdir()
    path = folder / "batch_study.json"
    if kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    error = _refused(capsys, [folder])
    assert "batch_study.json is" in error and "regular file" in error


def test_a_deeply_nested_result_file_is_one_line(tmp_path, capsys):
    folder = tmp_path / "received"
    folder.mkdir()
    (folder / "op_scan.json").write_text("[" * 100_000 + "]" * 100_000)
    assert "more than 100 deep" in _refused(capsys, [folder])


def test_a_result_file_too_big_to_parse_is_one_line_before_it_is_read(tmp_path, capsys):
    folder = tmp_path / "received"
    folder.mkdir()
    with open(folder / "noise_study.json", "wb") as handle:
        handle.truncate(600 << 20)  # sparse: 600 MiB on paper, none on disk
    assert "noise_study.json is 600 MiB, more than the 512 MiB" in _refused(capsys, [folder])


def _batch_sizes(folder, count):
    run = {"prompt_id": "p", "batch_size": 2, "record": None}
    data = {"study": "batch_size", "config": {"prompts": [{"prompt_id": "p"}]},
            "runs": [dict(run, batch_size=b) for b in range(2, count + 2)]}
    (folder / "batch_study.json").write_text(json.dumps(data))


def _regimes(folder, count):
    (folder / "order_metrics.json").write_text(json.dumps({"regimes": {f"r{i}": {} for i in range(count)}}))


def _op_cells(folder, count):
    sizes = list(range(1, 4097))
    ops = {f"op {i}": {"shape": "(1,)", "classes": [sizes]} for i in range(count // 4096 + 1)}
    (folder / "op_scan.json").write_text(json.dumps({"scans": [{"mode": "stock", "batch_sizes": sizes, "ops": ops}]}))


@pytest.mark.parametrize("write, count, said", [
    (_batch_sizes, 100_000, "100,000 batch sizes for one prompt; the report draws at most 4,096"),
    (_regimes, 100_000, "100,000 regimes; the report draws at most 64"),
    (_op_cells, 200_000, "op x batch size cells; the report draws at most 131,072"),
])
def test_absurd_sizes_are_refused_in_one_line_before_any_work(tmp_path, capsys, write, count, said):
    folder = tmp_path / "tampered"
    folder.mkdir()
    write(folder, count)
    error = _refused(capsys, [folder])
    assert said in error
    assert not (folder / "report-figures").exists() and not (folder / "report.html").exists()


def test_traces_that_are_a_fifo_are_refused_not_waited_on(tmp_path, writers, capsys):
    folder = tmp_path / "order"
    folder.mkdir()
    writers.order_study(folder, generations=6)
    (folder / "traces.jsonl").unlink()
    os.mkfifo(folder / "traces.jsonl")
    assert "traces.jsonl is not a regular file" in _refused(capsys, [folder])


def test_out_that_is_a_folder_or_too_long_is_one_line(tmp_path, batch, capsys):
    assert "is a folder; name the page's file" in _refused(capsys, [batch, "--out", tmp_path])
    assert "at most 255 bytes" in _refused(capsys, [batch, "--out", tmp_path / ("é" * 128) / "r.html"])
    with pytest.raises(CanvaslabError, match="at most 255 bytes"):
        build_report([tmp_path / ("a" * 256)])


def test_a_full_disk_while_figures_are_written_is_one_line(batch, capsys, monkeypatch):
    from canvaslab.reports.html import figures

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(figures, "write_text_atomic", full)
    with pytest.raises(RunFailed, match="the disk is full"):
        build_report([batch])
    assert "the disk is full" in _refused(capsys, [batch], code=1)
