"""Stores received from elsewhere whose records are intact (their checksums match) but are not the plan's:
records of units outside the plan, of a wrong shape or of wrong types, a plan listing a unit twice, and a
study folder that is a symbolic link given with --fresh. Each is left out and counted, or refused in one
line: never a traceback, never a row that is not the plan's."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from engine_fakes import Squares

import canvaslab
from canvaslab.cli.main import main
from canvaslab.errors import CanvaslabError
from canvaslab.io import write_json_atomic
from canvaslab.studies.batch_size.study import BatchSizeStudy
from canvaslab.studies.engine import run_study, write_stored_views
from canvaslab.studies.engine.export import store_rows
from canvaslab.studies.engine.plan import canonical_json, sha256_of, start_fresh


class Prompts(Squares):
    """A batch-size study's plan shape (its units are its prompts' ids), run without a model."""

    name = "batch_size"

    def __init__(self, ids=("p0", "p1", "p2")):
        super().__init__(n=len(ids))
        self.ids = list(ids)

    def plan(self):
        return {"prompts": [{"prompt_id": pid, "text": "the same prompt"} for pid in self.ids]}

    def units(self):
        return list(self.ids)

    def run_group(self, state, group, todo):
        for unit in todo:
            index = self.ids.index(unit)
            yield unit, {"index": index, "square": index * index, "name": f"prompt {index}"}

    def write_views(self, folder, records, workers):
        write_json_atomic(Path(folder) / "batch_study.json", {"study": "batch_size", "runs": len(records)})
        return {"runs": len(records)}


def _forge(folder: Path, unit: str, change=None) -> Path:
    """A record file for ``unit`` whose checksum matches, as anyone can write one: a copy of the first record,
    changed by ``change``."""
    source = sorted((folder / "store" / "records").glob("*.json"))[0]
    stored = json.loads(source.read_text())
    stored["unit"] = unit
    if change:
        change(stored)
    stored["record_sha256"] = sha256_of(stored["record"])
    path = folder / "store" / "records" / (hashlib.sha256(unit.encode()).hexdigest() + ".json")
    path.write_text(canonical_json(stored) + "\n")
    return path


def _passed_over(capsys) -> int:
    lines = [line for line in capsys.readouterr().err.splitlines() if "left as they are" in line]
    assert len(lines) == 1, lines
    return int(lines[0].split()[0])


@pytest.fixture
def study(tmp_path):
    folder = tmp_path / "received"
    run_study(Prompts(), folder)
    return folder


def test_records_of_units_outside_the_plan_are_left_out_of_export_and_tables(study, tmp_path, capsys):
    foreign = _forge(study, "intruder")
    capsys.readouterr()
    assert [row["unit"] for row in store_rows(study, BatchSizeStudy.units_of_plan)] == ["p0", "p1", "p2"]
    assert _passed_over(capsys) == 1
    assert list(canvaslab.open_results(study).to_pandas()["unit"]) == ["p0", "p1", "p2"]
    assert _passed_over(capsys) == 1
    main(["export", str(study), "--out", str(tmp_path / "records.parquet")])
    assert _passed_over(capsys) == 1
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "records.parquet").column("unit").to_pylist() == ["p0", "p1", "p2"]
    assert foreign.exists()  # a reader moves nothing


def test_a_plan_listing_a_prompt_twice_counts_a_damaged_record_once(tmp_path, capsys):
    twice = Prompts(["p0", "p1", "p0"])
    folder = tmp_path / "twice"
    run_study(twice, folder)
    record = sorted((folder / "store" / "records").glob("*.json"))
    damaged = next(path for path in record if json.loads(path.read_text())["unit"] == "p0")
    damaged.write_text(damaged.read_text().replace('"square":0', '"square":7'))
    capsys.readouterr()
    assert write_stored_views(twice, folder) == {"runs": 1}
    assert _passed_over(capsys) == 1


WRONG_TYPES = {
    "record is a list": lambda stored: stored.__setitem__("record", [1, 2]),
    "record is a number": lambda stored: stored.__setitem__("record", 5),
    "worker is a list": lambda stored: stored.__setitem__("worker", ["host"]),
    "worker is missing": lambda stored: stored.pop("worker"),
    "a text where numbers are": lambda stored: stored["record"].__setitem__("square", "four"),
    "a list where numbers are": lambda stored: stored["record"].__setitem__("square", [4]),
    "a bool where numbers are": lambda stored: stored["record"].__setitem__("square", True),
    "a number where texts are": lambda stored: stored["record"].__setitem__("name", 3),
    "an integer beyond 64 bits": lambda stored: stored["record"].__setitem__("square", 2**70),
}


@pytest.mark.parametrize("wrong", WRONG_TYPES)
def test_a_record_of_wrong_types_is_set_aside_as_damaged_in_one_line(study, tmp_path, capsys, wrong):
    path = next(p for p in (study / "store" / "records").glob("*.json") if json.loads(p.read_text())["unit"] == "p1")
    stored = json.loads(path.read_text())
    WRONG_TYPES[wrong](stored)
    stored["record_sha256"] = sha256_of(stored["record"])
    path.write_text(canonical_json(stored) + "\n")
    capsys.readouterr()
    assert list(canvaslab.open_results(study).to_pandas()["unit"]) == ["p0", "p2"]
    assert _passed_over(capsys) == 1
    main(["export", str(study), "--out", str(tmp_path / "records.parquet")])
    error = capsys.readouterr().err
    assert "Traceback" not in error and len(error.strip().splitlines()) == 1, error


def test_fresh_on_a_study_folder_that_is_a_link_is_refused_and_moves_nothing(study, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(study)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(CanvaslabError, match="symbolic link") as refused:
        start_fresh(link)
    assert "\n" not in str(refused.value)
    assert sorted(os.listdir(tmp_path)) == before and (study / "store" / "plan.json").is_file()


def test_noise_study_run_fresh_through_a_link_is_one_line_exit_2(tmp_path, capsys):
    real = tmp_path / "real"
    main(["noise-study", "plan", "--model", "tiny", "--out", str(real), "--design", "small", "--margin", "0.1"])
    link = tmp_path / "link"
    link.symlink_to(real)
    before = sorted(os.listdir(tmp_path)), sorted(os.listdir(real))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["noise-study", "run", str(link), "--fresh", "--limit", "1"])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in error and len(error.strip().splitlines()) == 1, error
    assert (sorted(os.listdir(tmp_path)), sorted(os.listdir(real))) == before


def test_run_study_fresh_through_a_link_moves_nothing(tmp_path):
    real = tmp_path / "real"
    run_study(Prompts(), real)
    link = tmp_path / "link"
    link.symlink_to(real)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(CanvaslabError, match="symbolic link"):
        run_study(Prompts(), link, fresh=True)
    assert sorted(os.listdir(tmp_path)) == before and (real / "store" / "plan.json").is_file()


def _forge_plan(folder: Path, registered) -> None:
    """Replace the registered plan with ``registered`` and its hash, as anyone can (a lone surrogate is hashed
    as its escape's code point, the only way it can be)."""
    text = json.dumps(registered, sort_keys=True, separators=(",", ":"))
    (folder / "store" / "plan.json").write_text(text + "\n")
    digest = hashlib.sha256(canonical_json(registered).encode("utf-8", "surrogatepass")).hexdigest()
    (folder / "store" / "plan.sha256").write_text(f"{digest}  plan.json\n")


FORGED_PLANS = {
    "a list": lambda registered: [registered],
    "a study that is a list": lambda registered: {**registered, "study": []},
    "a study that is an object": lambda registered: {**registered, "study": {"a": 1}},
    "a lone surrogate": lambda registered: {**registered, "plan": {"prompts": [{"prompt_id": "p0", "text": "\ud800"}]}},
}


@pytest.mark.parametrize("forged", FORGED_PLANS)
def test_a_forged_plan_whose_hash_matches_is_refused_in_one_line(study, tmp_path, capsys, forged):
    _forge_plan(study, FORGED_PLANS[forged](json.loads((study / "store" / "plan.json").read_text())))
    with pytest.raises(CanvaslabError, match="not a registered plan|lone surrogate") as refused:
        canvaslab.open_results(study).to_arrow()
    assert "\n" not in str(refused.value)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["export", str(study), "--out", str(tmp_path / "records.parquet")])
    error = capsys.readouterr().err
    assert exited.value.code == 2 and "Traceback" not in error and len(error.strip().splitlines()) == 1, error


def _note(folder: Path, unit: str, error: str) -> None:
    path = folder / "store" / "failed" / (hashlib.sha256(unit.encode()).hexdigest() + ".json")
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"unit": unit, "error": error, "attempts": 3}) + "\n")


def _unrecord(folder: Path, unit: str) -> None:
    next(p for p in (folder / "store" / "records").glob("*.json") if json.loads(p.read_text())["unit"] == unit).unlink()


def test_failure_notes_with_a_lone_surrogate_or_outside_the_plan_are_counted_and_left_out(study, tmp_path, capsys):
    _unrecord(study, "p1")
    _note(study, "intruder", "out of memory")
    _note(study, "p1", "bad \ud800 text")
    capsys.readouterr()
    assert list(canvaslab.open_results(study).to_pandas()["unit"]) == ["p0", "p2"]
    assert _passed_over(capsys) == 2
    main(["export", str(study), "--out", str(tmp_path / "records.parquet")])
    assert _passed_over(capsys) == 2


def test_a_failure_note_of_a_planned_unit_without_a_record_is_a_row(study):
    _unrecord(study, "p1")
    _note(study, "p1", "out of memory")
    rows = store_rows(study, BatchSizeStudy.units_of_plan)
    assert [(row["unit"], row["failed"]) for row in rows] == [("p0", None), ("p2", None), ("p1", "out of memory")]


class _Counted:
    """A path that counts how often it is compared for equality (a list's membership test compares with every
    entry; a set's or a dict's only with entries of the same hash)."""

    comparisons = 0

    def __init__(self, name):
        self.name = name

    def __hash__(self):
        return hash(self.name)

    def __eq__(self, other):
        _Counted.comparisons += 1
        return self.name == other.name


def test_passing_over_many_files_counts_each_once_without_comparing_with_every_one(study, capsys):
    from canvaslab.studies.engine.store import Store

    store = Store(study, "", read_only=True)
    paths = [_Counted(f"f{index}.json") for index in range(2000)]
    for path in paths + paths[:10]:
        store.pass_over(path)
    store.say_passed_over()
    assert _passed_over(capsys) == 2000
    assert _Counted.comparisons <= 10  # the ten listed twice (a list would compare about 2 million times)


def test_a_noise_study_whose_plan_was_replaced_after_it_ran_is_refused_in_one_line(tmp_path, capsys):
    study, other = tmp_path / "study", tmp_path / "other"
    for folder, seed in ((study, "0"), (other, "1")):
        main(["noise-study", "plan", "--model", "tiny", "--out", str(folder), "--design", "small", "--margin", "0.1",
              "--seed", seed])
    main(["noise-study", "run", str(study), "--limit", "1"])
    for name in ("plan.json", "plan.sha256"):  # the other plan, with its own matching hash
        (study / name).write_bytes((other / name).read_bytes())
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["export", str(study), "--out", str(tmp_path / "records.parquet")])
    error = capsys.readouterr().err
    assert exited.value.code == 2 and "plan was replaced" in error and len(error.strip().splitlines()) == 1, error
