"""Study folders from elsewhere, and a disk that fills up: every case is one line on stderr, exit 2 (1 for a run
that could not go on), no traceback, and nothing outside the folder is read from, written or renamed."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from canvaslab.cli.main import main
from canvaslab.studies.engine import Study, run_study
from canvaslab.studies.engine import store as store_module

STUDY = ["batch-study", "--model", "tiny", "--batch-sizes", "1,2", "--steps", "1", "--repeat-control", "same-process"]


class Tiny(Study):
    """A study without a model: unit ``u/i`` records ``i``."""

    name = "tiny"

    def plan(self):
        return {"n": 2}

    def units(self):
        return ["u/0", "u/1"]

    def prepare(self):
        return None

    def run_group(self, state, group, todo):
        for unit in todo:
            yield unit, {"i": int(unit[2:])}

    def write_views(self, folder, records, workers):
        return {}


def _one_line(capsys, argv, code=2) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([str(arg) for arg in argv])
    error = capsys.readouterr().err
    assert exit_info.value.code == code, error
    # the error is one line (a run's progress lines may come before it)
    lines = [line for line in error.strip().splitlines() if not line.startswith("batch-size study: ")]
    assert "Traceback" not in error and len(lines) == 1 and lines[0].startswith("error: "), error
    return error


def _snapshot(folder: Path) -> list:
    return sorted((str(p.relative_to(folder)), p.read_bytes()) for p in folder.rglob("*") if p.is_file())


@pytest.fixture
def received(tmp_path):
    """A study folder as received, and an outside folder a hostile one points into."""
    folder = tmp_path / "received"
    run_study(Tiny(), folder)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.json").write_text('{"mine": true}')
    return folder, outside


def _record(folder: Path) -> Path:
    return sorted((folder / "store" / "records").glob("*.json"))[0]


@pytest.mark.parametrize("hostile", ["records is a link", "store is a link", "record links to /dev/zero",
                                     "record is a fifo", "record is a folder", "plan is a fifo",
                                     "plan links outside", "plan nested 100000 deep"])
def test_export_of_a_hostile_folder_is_one_line_and_touches_nothing_outside(received, capsys, hostile):
    folder, outside = received
    before = _snapshot(outside)
    record, plan = _record(folder), folder / "store" / "plan.json"
    if hostile == "records is a link":
        for path in (folder / "store" / "records").iterdir():
            path.rename(outside / path.name)
        (folder / "store" / "records").rmdir()
        (folder / "store" / "records").symlink_to(outside)
        before = _snapshot(outside)
    elif hostile == "store is a link":
        (folder / "store").rename(outside / "store")
        (folder / "store").symlink_to(outside / "store")
        before = _snapshot(outside)
    elif hostile.startswith("record"):
        record.unlink()
        {"record links to /dev/zero": lambda: record.symlink_to("/dev/zero"),
         "record is a fifo": lambda: os.mkfifo(record), "record is a folder": record.mkdir}[hostile]()
    elif hostile == "plan is a fifo":
        plan.unlink()
        os.mkfifo(plan)
    elif hostile == "plan links outside":
        plan.unlink()
        plan.symlink_to(outside / "keep.json")
    else:
        plan.write_text("[" * 100_000 + "]" * 100_000)
    _one_line(capsys, ["export", folder])
    assert _snapshot(outside) == before
    assert not (folder / "records.parquet").exists()


def test_a_resume_into_a_folder_whose_records_link_outside_is_refused_before_the_model_loads(tmp_path, capsys):
    folder, outside = tmp_path / "received", tmp_path / "outside"
    (folder / "store").mkdir(parents=True)
    outside.mkdir()
    (folder / "store" / "records").symlink_to(outside)
    error = _one_line(capsys, [*STUDY, "--prompts", "1", "--out", folder])
    assert "records is a symbolic link, not a folder" in error
    assert list(outside.iterdir()) == []


def test_report_into_a_folder_whose_figures_link_outside_is_refused(tmp_path, capsys):
    folder, outside = tmp_path / "received", tmp_path / "home"
    folder.mkdir()
    outside.mkdir()
    (outside / ".bashrc").write_text("mine\n")
    (folder / "op_scan.json").write_text(json.dumps({"scans": []}))
    (folder / "report-figures").symlink_to(outside)
    assert "is a symbolic link, not a folder" in _one_line(capsys, ["report", folder])
    assert [(p.name, p.read_text()) for p in outside.iterdir()] == [(".bashrc", "mine\n")]


def test_a_prompt_file_refused_after_parsing_leaves_no_folder_behind(tmp_path, capsys):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "the man said \\ud800"}\n')
    assert "lone surrogate" in _one_line(capsys, [*STUDY, "--prompts", prompts, "--out", tmp_path / "new" / "dir"])
    fifo = tmp_path / "prompts.txt"
    os.mkfifo(fifo)
    assert "is a FIFO, not a regular file" in _one_line(capsys, [*STUDY, "--prompts", fifo, "--out", tmp_path / "new"])
    assert not (tmp_path / "new").exists()


def test_a_full_disk_during_a_run_is_one_line_exit_1_and_the_store_resumes(tmp_path, capsys, monkeypatch):
    real, written = store_module.write_text_atomic, []

    def writer(path, text, **kwargs):  # the first record is written, then the disk is full
        if written:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        written.append(path)
        return real(path, text, **kwargs)

    folder = tmp_path / "study"
    argv = [*STUDY, "--prompts", "2", "--out", folder]
    monkeypatch.setattr(store_module, "write_text_atomic", writer)
    error = _one_line(capsys, argv, code=1)
    assert "the disk is full" in error and "the 1 finished units are kept" in error
    assert "rerun the same command to resume" in error
    records = sorted((folder / "store" / "records").glob("*.json"))
    assert records == written and json.loads(records[0].read_text())["unit"] == "builtin-0"
    assert not (folder / "store" / "failed").exists()
    monkeypatch.setattr(store_module, "write_text_atomic", real)
    main([str(arg) for arg in argv])
    assert "1 ran, 1 skipped as already done, 0 failed" in capsys.readouterr().out
