"""The output docs/getting-started.md shows for its quick batch-size study is what the command prints: the
summary under the table, every line of it (the origin line included). Its numbers and verdicts depend on the
CPU's kernels, which no BLAS promises: they are compared as placeholders."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from canvaslab.cli.main import main

PAGE = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"


def _documented() -> tuple[list[str], str]:
    """The page's quick ``canvaslab batch-study`` command and the sample output it shows for it."""
    text = PAGE.read_text(encoding="utf-8")
    command = re.search(r"^canvaslab (batch-study .*)$", text, flags=re.M).group(1)
    sample = re.search(r"it reads \(the counts.*?\n\n```text\n(.*?)```", text, flags=re.S).group(1)
    return shlex.split(command), sample


def _words(text: str) -> str:
    """The text's words, its numbers, batch-size groups and verdicts as placeholders; the sample wraps where the
    page does, the terminal where it is."""
    text = re.sub(r"\[\[[\d, \[\]]*\]\]", "GROUPS", " ".join(text.split()))
    return re.sub(r"\b(True|False)\b", "BOOL", re.sub(r"\d[\d,]*", "N", text))


@pytest.mark.slow
def test_the_quick_study_prints_the_documented_summary(tmp_path, monkeypatch, capsys):
    args, sample = _documented()
    monkeypatch.chdir(tmp_path)
    main(args)
    printed = _words(capsys.readouterr().out)
    assert _words(sample) + " wrote " in printed, printed  # the whole summary: the line after it is "wrote"
