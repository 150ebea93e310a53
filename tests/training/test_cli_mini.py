"""`canvaslab mini ...` refuses bad input with one line and exit code 2, before any work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "canvaslab.cli.main", *args], capture_output=True, text=True)


def _assert_refused_in_one_line(result: subprocess.CompletedProcess, message: str, unwritten: Path) -> None:
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.args
    assert len(result.stderr.strip().splitlines()) == 1 and not unwritten.exists()


def test_train_refuses_a_non_empty_out_and_a_missing_passage_file(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "x").write_text("finished run")
    result = _run("mini", "train", "--out", str(tmp_path / "old"), "--device", "cpu")
    assert result.returncode == 2 and "not empty" in result.stderr and "Traceback" not in result.stderr
    result = _run("mini", "train", "--out", str(tmp_path / "new"), "--passages", str(tmp_path / "none.txt"))
    assert result.returncode == 2 and "no such file" in result.stderr
    assert not (tmp_path / "new").exists()


def test_train_refuses_an_unknown_answer_style_in_one_line(tmp_path):
    result = _run("mini", "train", "--out", str(tmp_path / "new"), "--device", "cpu", "--sum-format", "roman")
    assert result.returncode == 2 and "sum format 'roman'" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "new").exists()


def test_passages_refuses_a_corpus_without_manifest(tmp_path):
    (tmp_path / "c.txt").write_text("text")
    result = _run("mini", "passages", "--corpus", str(tmp_path / "c.txt"), "--out", str(tmp_path / "p.txt"))
    assert result.returncode == 2 and "manifest" in result.stderr


def test_order_study_refuses_an_unknown_suite_in_one_line(tmp_path):
    result = _run("order-study", "--suite", "nope", "--out", str(tmp_path / "o"))
    assert result.returncode == 2 and "--suite" in result.stderr and "Traceback" not in result.stderr


def test_card_refuses_a_folder_without_training_json_and_a_mismatched_sibling(tmp_path):
    result = _run("mini", "card", str(tmp_path))
    assert result.returncode == 2 and "no training.json" in result.stderr and "Traceback" not in result.stderr
    (tmp_path / "run").mkdir(), (tmp_path / "ar").mkdir()
    (tmp_path / "run" / "training.json").write_text('{"pool_tokens": 1, "diffusion": {"steps": 2}}')
    (tmp_path / "ar" / "training.json").write_text('{"pool_tokens": 2, "autoregressive": {"steps": 2}}')
    result = _run("mini", "card", str(tmp_path / "run"), "--sibling", str(tmp_path / "ar"))
    assert result.returncode == 2 and "pool_tokens" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "MODEL_CARD.md").exists()


def test_train_refuses_a_bad_mixture_in_one_line_before_any_work(tmp_path):
    for mixture, message in (("add4=0.3", "no task 'add4'"), ("add3=-1", "finite number >= 0"),
                             ("add3", "not TASK=SHARE"), ("add3=lots", "not TASK=SHARE")):
        result = _run("mini", "train", "--out", str(tmp_path / "new"), "--device", "cpu", "--mixture", mixture)
        assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, mixture
        assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "new").exists()


def test_distill_refuses_bad_input_in_one_line_before_any_work(tmp_path):
    passages = tmp_path / "p.txt"
    passages.write_text("One sentence here. And a second one.\n")
    (tmp_path / "done.json").write_text("{}")
    for args, message in ((["--passages", str(tmp_path / "none.txt"), "--out", str(tmp_path / "a.json")], "no such file"),
                          (["--passages", str(passages), "--out", str(tmp_path / "done.json")], "exists"),
                          (["--passages", str(passages), "--out", str(tmp_path / "a.json"), "--teacher", str(tmp_path)],
                           "no config.json")):
        _assert_refused_in_one_line(_run("mini", "distill", *args), message, tmp_path / "a.json")


def test_train_refuses_prose_answers_it_cannot_use_in_one_line(tmp_path):
    passages = tmp_path / "p.txt"
    passages.write_text("One sentence here. And a second one.\n")
    (tmp_path / "other.json").write_text('{"format": "canvaslab-prose-answers/1", "passages_sha256": "0", "answers": {}}')
    for args, message in ((["--prose-answers", str(tmp_path / "none.json"), "--passages", str(passages)], "no such file"),
                          (["--prose-answers", str(tmp_path / "other.json")], "needs --passages"),
                          (["--prose-answers", str(tmp_path / "other.json"), "--passages", str(passages)],
                           "other passages")):
        _assert_refused_in_one_line(_run("mini", "train", "--out", str(tmp_path / "new"), "--device", "cpu", *args),
                                    message, tmp_path / "new")
