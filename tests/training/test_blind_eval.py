"""Evaluating on the blind set (``canvaslab.training.blind_eval``, ``canvaslab mini blind-eval``): a set whose hash
is not the registered one is refused, a release already in the record is refused unless re-run (and then recorded
as a re-run), scores carry k/n, a Wilson interval and the validity rules' ruling, and bad input is one line, exit 2,
before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from canvaslab.cli.main import app
from canvaslab.errors import CanvaslabError
from canvaslab.training import blind_eval
from canvaslab.training.tasks import blind

RELEASE = "canvaslab-mini 1.1.0"


@pytest.fixture(autouse=True)
def no_evaluation(monkeypatch):
    """A command that got past its checks would start the evaluation: here that fails the test."""
    def started(*args, **kwargs):
        raise AssertionError("the evaluation started")
    monkeypatch.setattr(blind_eval, "run_release", started)


def _run(*args: str):
    return CliRunner().invoke(app, ["mini", *args])


def _refused_in_one_line(result, message: str, unwritten: Path) -> None:
    assert result.exit_code == 2, (result.output, result.exception)
    assert message in result.stderr and "Traceback" not in result.output + result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not unwritten.exists()


def _registration(tmp_path: Path, **changes) -> Path:
    path = tmp_path / "registration.json"
    path.write_text(json.dumps({**blind.registered(), **changes}), encoding="utf-8")
    return path


def test_a_set_whose_hash_differs_from_the_registered_one_is_refused():
    with pytest.raises(CanvaslabError, match="sha256 .* is not the registered"):
        blind_eval.checked_set({**blind.registered(), "sha256": "0" * 64})
    with pytest.raises(CanvaslabError, match="generator"):
        blind_eval.checked_set({**blind.registered(), "generator_version": "blind-0"})


def test_the_registered_set_is_accepted():
    assert len(blind_eval.checked_set(blind.registered())) == blind.registered()["items"]


def test_a_release_in_the_record_is_refused_unless_rerun(tmp_path):
    record = tmp_path / "record.json"
    sha = blind.registered()["sha256"]
    blind_eval.check_release(blind_eval.read_record(record), RELEASE, sha, rerun=False)  # no record yet: fine
    blind_eval.add_to_record(record, RELEASE, sha, "mini/blind_mini.json", rerun=False)
    with pytest.raises(CanvaslabError, match="already evaluated.*--rerun"):
        blind_eval.check_release(blind_eval.read_record(record), RELEASE, sha, rerun=False)
    blind_eval.check_release(blind_eval.read_record(record), RELEASE, sha, rerun=True)
    blind_eval.check_release(blind_eval.read_record(record), "canvaslab-mini 1.2.0", sha, rerun=False)
    blind_eval.add_to_record(record, RELEASE, sha, "mini-again/blind_mini.json", rerun=True)
    assert [e["rerun"] for e in blind_eval.read_record(record)["evaluations"]] == [False, True]


def test_a_damaged_record_is_refused(tmp_path):
    (tmp_path / "record.json").write_text("[]", encoding="utf-8")
    with pytest.raises(CanvaslabError, match="not a blind-set record"):
        blind_eval.read_record(tmp_path / "record.json")


def test_a_score_carries_its_counts_wilson_interval_and_ruling():
    cell = blind_eval.task_score([True] * 36 + [False] * 14)
    assert (cell["k"], cell["n"], cell["accuracy"]) == (36, 50, 0.72)
    low, high = cell["wilson_95"]
    assert low == pytest.approx(0.5833, abs=1e-3) and high == pytest.approx(0.8253, abs=1e-3)
    assert cell["ruling"]["interval"] and blind_eval.score_text(cell) == "36/50 (0.72 [0.58, 0.83])"


def test_the_validity_rules_withhold_an_interval_from_fewer_than_five_right_answers():
    cell = blind_eval.task_score([True] * 3 + [False] * 47)
    assert not cell["ruling"]["interval"]
    assert blind_eval.score_text(cell).startswith("3/50 (0.06) (rests on 3 right answers")
    none_right = blind_eval.score_text(blind_eval.task_score([False] * 50))
    assert none_right.startswith("0/50 (0.00)") and "zero variance" in none_right


def test_canonical_answers_score_every_item_right():
    examples = blind.blind_examples(per_task=2)
    result = blind_eval.evaluate(examples, lambda items: [{"text": e.answer} for e in items])
    assert {task: (cell["k"], cell["n"]) for task, cell in result["summary"].items()} == {
        task: (2, 2) for task in blind.BLIND_TASKS}
    assert len(result["answers"]) == len(examples) and all(row["score"] for row in result["answers"])


def test_a_release_is_written_with_its_manifest_and_recorded(tmp_path, monkeypatch):
    monkeypatch.undo()  # the real run_release, with a fake model
    class Package:
        name, kind, distribution = "mini", "diffusion", RELEASE

    monkeypatch.setattr(blind_eval, "answerer", lambda *args: (
        lambda items: [{"text": e.answer if e.task != "json" else "{}"} for e in items], {"sampler": "fake"}, {}))
    examples = blind.blind_examples(per_task=1)
    record = tmp_path / "record.json"
    table = blind_eval.run_release(Package, examples, blind.registered(), tmp_path / "out", record, rerun=False,
                                   device="cpu", dtype="float32", batch_size=1)
    assert "| json | 0/1 (0.00)" in table and "| add2 | 1/1 (1.00)" in table
    manifest = json.loads((tmp_path / "out" / "result.json").read_text())
    assert {run["file"] for run in manifest["runs"]} == {"blind_mini.json", "blind_mini.md"}
    assert [run["file"] for run in json.loads((tmp_path / "result.json").read_text())["runs"]] == ["record.json"]
    assert all({"command", "canvaslab_version", "git_commit", "date", "environment"} <= set(run)
               for run in manifest["runs"])
    (entry,) = blind_eval.read_record(record)["evaluations"]
    assert entry["release"] == RELEASE and entry["result"] == "out/blind_mini.json" and not entry["rerun"]


def test_cli_refuses_a_changed_set_in_one_line(tmp_path):
    result = _run("blind-eval", "--out", str(tmp_path / "out"), "--record", str(tmp_path / "record.json"),
                  "--registration", str(_registration(tmp_path, sha256="f" * 64)))
    _refused_in_one_line(result, "is not the registered", tmp_path / "out")


def test_cli_refuses_a_release_already_evaluated_in_one_line(tmp_path):
    record = tmp_path / "record.json"
    blind_eval.add_to_record(record, RELEASE, blind.registered()["sha256"], "x/blind_mini.json", rerun=False)
    result = _run("blind-eval", "--model", "mini", "--out", str(tmp_path / "out"), "--record", str(record))
    _refused_in_one_line(result, "already evaluated", tmp_path / "out")


def test_a_rerun_of_a_release_never_evaluated_is_refused(tmp_path):
    sha = blind.registered()["sha256"]
    with pytest.raises(CanvaslabError, match="no evaluation"):
        blind_eval.check_release(blind_eval.read_record(tmp_path / "record.json"), RELEASE, sha, rerun=True)


def test_cli_refuses_to_run_away_from_the_committed_record_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default record is relative to the repository root
    _refused_in_one_line(_run("blind-eval", "--model", "mini", "--out", str(tmp_path / "out")), "no record",
                         tmp_path / "out")


def test_cli_refuses_bad_options_in_one_line(tmp_path):
    _refused_in_one_line(_run("blind-eval", "--out", str(tmp_path / "out"), "--dtype", "int8"), "--dtype",
                         tmp_path / "out")
    _refused_in_one_line(_run("blind-eval", "--out", str(tmp_path / "out"), "--model", "no-such-model"),
                         "not registered", tmp_path / "out")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("done", encoding="utf-8")
    _refused_in_one_line(_run("blind-eval", "--out", str(tmp_path / "full")), "not empty", tmp_path / "none")


def test_blind_set_writes_the_registered_bytes(tmp_path):
    result = _run("blind-set", "--out", str(tmp_path / "set.jsonl"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "set.jsonl").read_bytes() == blind.set_bytes()
