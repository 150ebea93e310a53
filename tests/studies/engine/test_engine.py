"""The study engine without a model: plan registration, the store's crash and concurrency rules,
retries and failures, progress and the final line."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from engine_fakes import Squares

import canvaslab
from canvaslab.errors import CanvaslabError
from canvaslab.studies.engine import run_study, write_stored_views
from canvaslab.studies.engine.plan import check_registered, first_difference
from canvaslab.studies.engine.store import Store

SRC = str(Path(canvaslab.__file__).resolve().parents[1])
HERE = str(Path(__file__).resolve().parent)


def _runs(log: Path) -> list[str]:
    return [json.loads(line)["unit"] for line in log.read_text().splitlines()] if log.exists() else []


def _record_files(folder: Path) -> list[Path]:
    return sorted((folder / "store" / "records").glob("*.json"))


def _record_of(folder: Path, unit: str) -> Path:
    """The record file of ``unit`` (files are named by a hash of the unit id)."""
    return next(path for path in _record_files(folder) if json.loads(path.read_text())["unit"] == unit)


def test_first_difference_names_the_first_differing_field():
    old = {"plan": {"a": 1, "b": {"c": [1, 2]}, "d": 0}}
    assert first_difference(old, old) is None
    assert first_difference(old, {"plan": {"a": 1, "b": {"c": [1, 3]}, "d": 1}}) == "plan.b.c[1]"
    assert first_difference(old, {"plan": {"a": 1, "b": {"c": [1]}, "d": 0}}) == "plan.b.c"
    assert first_difference(old, {"plan": {"a": 1, "b": {"c": [1, 2]}}}) == "plan.d"


def test_the_plan_is_registered_before_any_unit_and_another_is_refused(tmp_path):
    progress = []

    def check_plan_first(done, total, doing):
        progress.append((done, total))
        assert (tmp_path / "store" / "plan.json").is_file()  # written before the first unit runs

    run_study(Squares(n=3), tmp_path, progress=check_plan_first)
    registered = json.loads((tmp_path / "store" / "plan.json").read_text())
    assert registered == {"study": "squares", "plan": {"n": 3, "group_size": 1}}
    digest = (tmp_path / "store" / "plan.sha256").read_text().split()[0]
    assert all(json.loads(p.read_text())["plan_sha256"] == digest for p in _record_files(tmp_path))
    assert progress[0] == (0, 3) and progress[-1] == (3, 3)
    with pytest.raises(CanvaslabError) as refused:
        run_study(Squares(n=4), tmp_path)
    message = str(refused.value)
    assert "plan.n was 3, now 4" in message and "--fresh" in message and "\n" not in message


def test_fresh_keeps_the_old_folder_under_a_new_name(tmp_path):
    folder = tmp_path / "study"
    run_study(Squares(n=2), folder)
    view, outcome = run_study(Squares(n=3), folder, fresh=True)
    assert outcome.ran == 3 and view["sum"] == 0 + 1 + 4
    kept = tmp_path / "study.1"
    assert json.loads((kept / "squares.json").read_text())["sum"] == 1 and len(_record_files(kept)) == 2


def test_fresh_works_from_inside_the_study_folder_and_says_where_the_old_one_went(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "study"
    run_study(Squares(n=2), folder)
    monkeypatch.chdir(folder)
    view, outcome = run_study(Squares(n=3), ".", fresh=True)
    assert outcome.ran == 3 and json.loads((folder / "squares.json").read_text())["sum"] == 5
    assert len(_record_files(tmp_path / "study.1")) == 2 and len(_record_files(folder)) == 3
    assert f"kept as {tmp_path / 'study.1'}" in capsys.readouterr().err


def test_a_refused_list_says_how_its_length_changed(tmp_path):
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "plan.json").write_text(json.dumps({"study": "s", "plan": {"prompts": ["a" * 60]}}))
    with pytest.raises(CanvaslabError, match=r"plan.prompts had 1 entries, now 2"):
        check_registered(tmp_path, "s", {"prompts": ["a" * 60, "b"]})


CPU = {"device": "x86", "device_type": "cpu", "torch": "2.13", "torch_threads": 2}


def test_a_resume_under_other_numerics_is_refused_before_its_unit_is_stored(tmp_path):
    run_study(Squares(n=4, environment=CPU), tmp_path, limit=2)
    with pytest.raises(CanvaslabError) as refused:  # e.g. a local CPU study resumed on Ray's 1-thread workers
        run_study(Squares(n=4, environment={**CPU, "torch_threads": 1}), tmp_path)
    assert "torch_threads = 2" in str(refused.value) and "\n" not in str(refused.value)
    assert len(_record_files(tmp_path)) == 2
    view, outcome = run_study(Squares(n=4, environment=CPU), tmp_path)
    assert outcome.ran == 2 and view["sum"] == 14


def test_thread_count_does_not_matter_off_the_cpu(tmp_path):
    gpu = {**CPU, "device": "H200", "device_type": "cuda"}
    run_study(Squares(n=2, environment=gpu), tmp_path, limit=1)
    _, outcome = run_study(Squares(n=2, environment={**gpu, "torch_threads": 16}), tmp_path)
    assert outcome.ran == 1


def test_a_rerun_skips_what_is_done_and_the_final_line_says_so(tmp_path):
    log = tmp_path / "log"
    _, first = run_study(Squares(n=4, log=str(log)), tmp_path / "s", limit=3)
    assert (first.ran, first.skipped) == (3, 0)
    view, second = run_study(Squares(n=4, log=str(log)), tmp_path / "s")
    assert second.line("units") == "units: 1 ran, 3 skipped as already done, 0 failed"
    assert sorted(_runs(log)) == ["u/0", "u/1", "u/2", "u/3"] and view["sum"] == 14


def test_a_limited_run_counts_as_finished_by_others_only_units_within_its_limit(tmp_path, monkeypatch):
    save = Store.save

    def save_racing(store, unit, record, worker=None):  # "another process" stores u/1 and u/5 meanwhile
        save(store, unit, record, worker)
        if unit == "u/0":
            for other in ("u/1", "u/5"):
                save(store, other, {"index": int(other[2:]), "square": int(other[2:]) ** 2}, worker)

    monkeypatch.setattr(Store, "save", save_racing)
    _, outcome = run_study(Squares(n=6), tmp_path / "s", limit=2)
    assert outcome.line("units") == "units: 1 ran, 0 skipped as already done, 1 finished by another process, 0 failed"


def test_records_and_views_have_ordinary_file_modes(tmp_path):
    previous = os.umask(0o022)
    try:
        run_study(Squares(n=2), tmp_path)
    finally:
        os.umask(previous)
    for path in [*_record_files(tmp_path), tmp_path / "store" / "plan.json", tmp_path / "squares.json"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


@pytest.mark.parametrize("damage", ["truncated", "edited", "other unit"])
def test_a_damaged_record_is_set_aside_and_its_unit_redone(tmp_path, damage, capsys):
    log = tmp_path / "log"
    reference, _ = run_study(Squares(n=3), tmp_path / "whole")
    run_study(Squares(n=3, log=str(log)), tmp_path / "s")
    path = _record_of(tmp_path / "s", "u/1")
    text = path.read_text()
    damaged = {"truncated": text[: len(text) // 2], "edited": text.replace('"square":1', '"square":7'),
               "other unit": text.replace('"unit":"u/1"', '"unit":"u/2"')}[damage]
    path.write_text(damaged)
    view, outcome = run_study(Squares(n=3, log=str(log)), tmp_path / "s")
    assert (outcome.ran, outcome.skipped) == (1, 2) and _runs(log).count("u/1") == 2
    assert path.with_name(path.name + ".damaged").read_text() == damaged  # kept for inspection
    assert view == reference
    assert f"{path} is damaged: kept as {path.name}.damaged, its unit runs again" in capsys.readouterr().err


def test_a_raising_unit_is_retried_then_reported_and_the_others_go_on(tmp_path):
    log = tmp_path / "log"
    view, outcome = run_study(Squares(n=4, log=str(log), fail={"u/1": -1}), tmp_path / "s", retries=2)
    assert _runs(log).count("u/1") == 3  # the first attempt and 2 retries
    assert outcome.ran == 3 and list(outcome.failed) == ["u/1"]
    assert outcome.failed["u/1"] == "ValueError: planted failure of u/1"
    assert outcome.line("units").startswith("units: 3 ran, 0 skipped as already done, 1 failed")
    failed = Store(tmp_path / "s", "").failures()["u/1"]
    assert failed["attempts"] == 3 and "planted failure" in failed["error"]
    assert view["units"] == ["u/0", "u/2", "u/3"]
    # a unit that fails once succeeds on its retry; a rerun tries a failed unit again
    view, outcome = run_study(Squares(n=4, log=str(log), fail={"u/1": 4}), tmp_path / "s", retries=1)
    assert outcome.ran == 1 and not outcome.failed and view["sum"] == 14
    assert not Store(tmp_path / "s", "").failures()


DRIVER = """
import json, os, sys, time
from pathlib import Path
from engine_fakes import Squares
from canvaslab.studies.engine import run_study, write_stored_views
ready = Path(sys.argv[3] + ".ready")
with open(ready, "a") as handle:  # start together: both must be running before either begins
    handle.write("x")
while len(ready.read_text()) < 2:
    time.sleep(0.01)
_, outcome = run_study(Squares(n=int(sys.argv[2]), log=sys.argv[3], delay=0.15), sys.argv[1])
print(json.dumps({"ran": outcome.ran, "skipped": outcome.skipped, "by_others": outcome.by_others,
                  "line": outcome.line()}))
"""


def test_two_processes_on_one_folder_run_every_unit_exactly_once(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [SRC, HERE, os.environ.get("PYTHONPATH")]))}
    log, folder = tmp_path / "log", tmp_path / "s"
    procs = [subprocess.Popen([sys.executable, "-c", DRIVER, str(folder), "12", str(log)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outcomes = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        outcomes.append(json.loads(out.strip().splitlines()[-1]))
    runs = _runs(log)
    assert sorted(runs) == sorted(f"u/{i}" for i in range(12))  # each unit ran once, in one of the two
    assert sum(o["ran"] for o in outcomes) == 12
    for outcome in outcomes:  # each process's final line accounts for every unit, the other's included
        assert outcome["ran"] + outcome["skipped"] + outcome["by_others"] == 12, outcome
        said = f"{outcome['by_others']} finished by another process"
        assert (said in outcome["line"]) == (outcome["by_others"] > 0), outcome
    assert any(outcome["by_others"] for outcome in outcomes)  # both did work: the first to end saw the other's
    assert len({json.loads(line)["pid"] for line in log.read_text().splitlines()}) == 2  # both did work
    assert len(_record_files(folder)) == 12
    assert json.loads((folder / "squares.json").read_text())["sum"] == sum(i * i for i in range(12))


def test_export_writes_one_parquet_row_per_unit(tmp_path, capsys):
    import pyarrow.parquet as pq

    from canvaslab.cli.main import main

    run_study(Squares(n=3, fail={"u/1": -1}), tmp_path / "s")
    main(["export", str(tmp_path / "s"), "--format", "parquet"])
    assert "records.parquet" in capsys.readouterr().out
    table = pq.read_table(tmp_path / "s" / "records.parquet").to_pylist()
    assert [(row["unit"], row["record.square"], row["failed"]) for row in table] == [
        ("u/0", 0, None), ("u/2", 4, None), ("u/1", None, "ValueError: planted failure of u/1")]
    assert {row["study"] for row in table} == {"squares"} and json.loads(table[1]["record"])["index"] == 2


def test_export_refuses_a_folder_without_a_store(tmp_path, capsys):
    from canvaslab.cli.main import main

    with pytest.raises(SystemExit) as exit_info:
        main(["export", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "no study store" in err and len(err.splitlines()) == 1


def test_export_reads_the_store_and_moves_no_record(tmp_path, capsys):
    """Export is a reader: a damaged record stays where it is (only ``run`` sets records aside) and is left out."""
    from canvaslab.cli.main import main

    run_study(Squares(n=3, fail={"u/2": -1}), tmp_path / "s")
    damaged = _record_files(tmp_path / "s")[1]
    damaged.write_text("{not json")
    (failure_note,) = (tmp_path / "s" / "store" / "failed").glob("*.json")
    failure_note.write_text("[1")
    main(["export", str(tmp_path / "s")])
    assert damaged.read_text() == "{not json" and len(_record_files(tmp_path / "s")) == 2
    assert failure_note.read_text() == "[1"
    assert "2 stored records are damaged or of another plan" in capsys.readouterr().err


def test_export_refuses_an_edited_registered_plan_in_one_line(tmp_path, capsys):
    from canvaslab.cli.main import main

    run_study(Squares(n=3), tmp_path / "s")
    registered = tmp_path / "s" / "store" / "plan.json"
    registered.write_text(registered.read_text().replace('"n":3', '"n":4'))
    records = [path.read_bytes() for path in _record_files(tmp_path / "s")]
    with pytest.raises(SystemExit) as exit_info:
        main(["export", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "the store was edited" in err and len(err.splitlines()) == 1
    assert [path.read_bytes() for path in _record_files(tmp_path / "s")] == records  # none set aside


@pytest.mark.parametrize("args, said", [(["missing"], "missing: no such folder"),
                                        (["s", "--out", "table.csv"], "--out table.csv: name a .parquet file")])
def test_export_refuses_a_missing_folder_and_a_non_parquet_name(tmp_path, capsys, monkeypatch, args, said):
    from canvaslab.cli.main import main

    run_study(Squares(n=1), tmp_path / "s")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["export", *args])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and said in err and len(err.splitlines()) == 1
    assert not (tmp_path / "table.csv").exists()


def test_stored_views_are_written_from_the_store_alone_and_only_for_its_plan(tmp_path):
    log = tmp_path / "runs.log"
    folder = tmp_path / "study"
    interrupted, _ = run_study(Squares(n=3, log=str(log)), folder, limit=2)  # two units stored, one pending
    (folder / "squares.json").unlink()
    views = write_stored_views(Squares(n=3, log=str(log)), folder)
    assert views == interrupted == {"units": ["u/0", "u/1"], "sum": 1}
    assert json.loads((folder / "squares.json").read_text()) == views
    assert _runs(log) == ["u/0", "u/1"]  # nothing ran
    for other in (Squares(n=4), Squares(n=3, group_size=2)):
        with pytest.raises(CanvaslabError, match="no stored results of this plan"):
            write_stored_views(other, folder)
    with pytest.raises(CanvaslabError, match="no stored results"):
        write_stored_views(Squares(n=3), tmp_path / "empty")


def test_a_field_only_one_plan_has_is_named_absent_not_null(tmp_path):
    """A plan that gained a field (e.g. the model's weights fingerprint) must not read 'was null, now null'."""
    from canvaslab.studies.engine.plan import register

    register(tmp_path, "squares", {"model": {"spec": "m"}})
    with pytest.raises(CanvaslabError, match=r"plan\.model\.weights was \(absent\), now null"):
        check_registered(tmp_path, "squares", {"model": {"spec": "m", "weights": None}})
    with pytest.raises(CanvaslabError, match=r"plan\.model\.weights was \"w\", now \(absent\)"):
        register(tmp_path / "b", "squares", {"model": {"spec": "m", "weights": "w"}})
        check_registered(tmp_path / "b", "squares", {"model": {"spec": "m"}})
