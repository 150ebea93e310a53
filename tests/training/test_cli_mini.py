"""`canvaslab mini ...` refuses bad input with one line and exit code 2, before any work."""

from __future__ import annotations

import subprocess
import sys


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "canvaslab.cli.main", *args], capture_output=True, text=True)


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
