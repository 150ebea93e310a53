"""The store against a folder from elsewhere and against its own limits: links, FIFOs and folders where its
files belong, long unit ids, stores whose records are named by unit id, a full disk, a refused start."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from urllib.parse import quote

import pytest
from engine_fakes import Squares

from canvaslab.errors import CanvaslabError, RunFailed
from canvaslab.studies.engine import run_study
from canvaslab.studies.engine import store as store_module
from canvaslab.studies.engine.export import store_rows


class Named(Squares):
    """Squares whose unit ids are given (long, with '/', '%' or non-ASCII characters)."""

    name = "named"

    def __init__(self, ids, **kwargs):
        super().__init__(n=len(ids), **kwargs)
        self.ids = list(ids)

    def plan(self):
        return {"ids": self.ids}

    def units(self):
        return list(self.ids)

    def run_group(self, state, group, todo):
        for unit in todo:
            index = self.ids.index(unit)
            yield unit, {"index": index, "square": index * index}


class Refusing(Squares):
    def prepare(self):
        raise CanvaslabError("the model cannot load")


def _records(folder: Path) -> list[Path]:
    return sorted((folder / "store" / "records").glob("*.json"))


def _one_line(error: BaseException) -> str:
    assert "\n" not in str(error)
    return str(error)


LONG_IDS = ["p" * 251, "é" * 43, "a/b/../c", "x" * 300 + "/" + "é" * 200]


def test_unit_ids_of_any_length_name_files_by_their_hash_and_a_rerun_resumes(tmp_path):
    view, outcome = run_study(Named(LONG_IDS), tmp_path / "s")
    assert outcome.ran == 4 and not outcome.failed
    names = [path.name for path in _records(tmp_path / "s")]
    assert all(len(name) == 69 for name in names)  # 64 hex digits + ".json"
    assert sorted(json.loads(path.read_text())["unit"] for path in _records(tmp_path / "s")) == sorted(LONG_IDS)
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["squares.json", "store"]
    assert not (tmp_path / "c").exists() and not (tmp_path / "s" / "store" / "records" / "a").exists()
    _, again = run_study(Named(LONG_IDS), tmp_path / "s")
    assert (again.ran, again.skipped) == (0, 4)
    assert [row["unit"] for row in store_rows(tmp_path / "s")] == sorted(LONG_IDS)


def test_a_store_whose_records_are_named_by_unit_id_is_still_read(tmp_path):
    """Records named by the percent-escaped unit id count as the unit's: a rerun skips them, export lists them."""
    folder = tmp_path / "s"
    run_study(Squares(n=3), folder)
    for path in _records(folder):
        unit = json.loads(path.read_text())["unit"]
        path.rename(path.with_name(quote(unit, safe="-_.@+=,") + ".json"))
    assert sorted(p.name for p in _records(folder)) == ["u%2F0.json", "u%2F1.json", "u%2F2.json"]
    view, outcome = run_study(Squares(n=3), folder)
    assert (outcome.ran, outcome.skipped) == (0, 3) and view["sum"] == 5
    assert [row["unit"] for row in store_rows(folder)] == ["u/0", "u/1", "u/2"]


@pytest.mark.parametrize("where", ["store/records", "store", "store/locks", "store/failed"])
def test_a_store_folder_that_is_a_link_is_refused_and_nothing_outside_is_touched(tmp_path, where):
    folder = tmp_path / "s"
    run_study(Squares(n=2), folder, limit=1)
    outside = tmp_path / "outside"
    target = folder / where
    if target.exists():
        target.rename(outside)
    else:
        outside.mkdir()
    before = sorted((p.name, p.read_bytes()) for p in outside.rglob("*") if p.is_file())
    target.symlink_to(outside)
    for attempt in (lambda: run_study(Squares(n=2), folder), lambda: store_rows(folder)):
        with pytest.raises(CanvaslabError) as refused:
            attempt()
        assert "is a symbolic link, not a folder" in _one_line(refused.value)
    assert sorted((p.name, p.read_bytes()) for p in outside.rglob("*") if p.is_file()) == before


def test_a_store_folder_that_is_a_file_is_refused(tmp_path):
    folder = tmp_path / "s"
    (folder / "store").mkdir(parents=True)
    (folder / "store" / "records").write_text("")
    with pytest.raises(CanvaslabError, match="is a regular file, not a folder"):
        run_study(Squares(n=2), folder)


@pytest.mark.parametrize("kind", ["link to /dev/zero", "fifo", "folder", "link to a record"])
def test_a_record_that_is_not_a_regular_file_is_one_line_for_a_run_and_an_export(tmp_path, kind):
    folder = tmp_path / "s"
    run_study(Squares(n=2), folder)
    record = _records(folder)[0]
    kept = tmp_path / "kept.json"
    record.rename(kept)
    if kind == "link to /dev/zero":
        record.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(record)
    elif kind == "folder":
        record.mkdir()
    else:
        record.symlink_to(kept)
    for attempt in (lambda: run_study(Squares(n=2), folder), lambda: store_rows(folder)):
        with pytest.raises(CanvaslabError) as refused:
            attempt()
        assert "not a regular file" in _one_line(refused.value) and record.name in str(refused.value)
    assert os.path.lexists(record) and kept.is_file()  # nothing renamed, nothing followed


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_registered_plan_that_is_not_a_regular_file_is_one_line(tmp_path, kind):
    folder = tmp_path / "s"
    run_study(Squares(n=1), folder)
    plan = folder / "store" / "plan.json"
    plan.rename(tmp_path / "plan.json")
    os.mkfifo(plan) if kind == "fifo" else plan.symlink_to(tmp_path / "plan.json")
    for attempt in (lambda: run_study(Squares(n=1), folder), lambda: store_rows(folder)):
        with pytest.raises(CanvaslabError) as refused:
            attempt()
        assert "plan.json is" in _one_line(refused.value) and "not a regular file" in str(refused.value)


def test_a_huge_or_deeply_nested_record_is_set_aside_as_damaged(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "s"
    run_study(Squares(n=2), folder)
    first, second = _records(folder)
    first.write_text("[" * 100_000 + "]" * 100_000)
    monkeypatch.setattr(store_module, "RECORD_LIMIT", 10_000)
    second.write_text(" " * 20_000)
    view, outcome = run_study(Squares(n=2), folder)
    assert (outcome.ran, outcome.skipped) == (2, 0) and view["sum"] == 1
    assert "is damaged: kept as" in capsys.readouterr().err


def _full_disk_after(count: int, monkeypatch):
    """The store's atomic writer raises ENOSPC once ``count`` records were written."""
    real, written = store_module.write_text_atomic, []

    def writer(path, text, **kwargs):
        if len(written) >= count:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        written.append(path)
        return real(path, text, **kwargs)

    monkeypatch.setattr(store_module, "write_text_atomic", writer)
    return written


def test_a_full_disk_ends_the_run_in_one_line_keeping_the_store_and_a_rerun_resumes(tmp_path, monkeypatch):
    folder = tmp_path / "s"
    log = tmp_path / "log"
    _full_disk_after(2, monkeypatch)
    with pytest.raises(RunFailed) as failed:
        run_study(Squares(n=4, log=str(log)), folder, retries=2)
    message = _one_line(failed.value)
    assert failed.value.exit_code == 1
    assert "the disk is full" in message and "the 2 finished units are kept" in message
    assert "rerun the same command to resume" in message
    assert len(_records(folder)) == 2 and not (folder / "store" / "failed").exists()  # not recorded as failures
    assert {json.loads(p.read_text())["unit"] for p in _records(folder)} == {"u/0", "u/1"}
    monkeypatch.setattr(store_module, "write_text_atomic", _real_writer())
    view, outcome = run_study(Squares(n=4, log=str(log)), folder)
    assert (outcome.ran, outcome.skipped) == (2, 2) and view["sum"] == 14


def _real_writer():
    from canvaslab.io import write_text_atomic

    return write_text_atomic


def test_a_full_disk_while_the_views_are_written_is_one_line_and_keeps_every_record(tmp_path, monkeypatch):
    from engine_fakes import Squares as Base

    def full(self, folder, records, workers):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Base, "write_views", full)
    with pytest.raises(RunFailed, match="its 3 finished units are kept") as failed:
        run_study(Squares(n=3), tmp_path / "s")
    assert "rerun the same command" in _one_line(failed.value) and len(_records(tmp_path / "s")) == 3


def test_a_refused_start_leaves_no_folder_behind(tmp_path):
    folder = tmp_path / "new" / "study"
    with pytest.raises(CanvaslabError, match="cannot load"):
        run_study(Refusing(n=2), folder)
    assert not (tmp_path / "new").exists()  # neither the study folder nor the parent this run made


def test_a_refused_start_in_an_existing_folder_keeps_the_folder_and_its_files(tmp_path):
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(CanvaslabError, match="cannot load"):
        run_study(Refusing(n=2), folder)
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]


def test_a_refused_resume_keeps_the_registered_store(tmp_path):
    folder = tmp_path / "study"
    run_study(Squares(n=2), folder, limit=1)

    def kept():  # every file but the locks, which a run takes before it prepares
        return sorted((str(p.relative_to(folder)), p.read_bytes()) for p in folder.rglob("*")
                      if p.is_file() and p.parent.name != "locks")

    before = kept()
    with pytest.raises(CanvaslabError, match="cannot load"):
        run_study(Refusing(n=2), folder)
    assert kept() == before and len(before) == 4  # the plan, its hash, a record and the view
