"""The output docs/getting-started.md shows for its quick batch-size study is what the command prints: the
summary under the table, every line of it. Its numbers and verdicts depend on the CPU's kernels, which no BLAS
promises: they are compared as placeholders, and the origin clause, printed only when a run diverged, may be
absent."""

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
    sample = re.search(r"it reads as below\..*?\n\n```text\n(.*?)```", text, flags=re.S).group(1)
    return shlex.split(command), sample


ORIGIN = "; origin: in every diverged run the first divergence itself (its inputs matched)"


def _words(text: str) -> str:
    """The text's words, its numbers, batch-size groups and verdicts as placeholders, without the origin clause;
    the sample wraps where the page does, the terminal where it is."""
    text = re.sub(r"\[\[[\d, \[\]]*\]\]", "GROUPS", " ".join(text.split()).replace(ORIGIN, ""))
    return re.sub(r"\b(True|False)\b", "BOOL", re.sub(r"\d[\d,]*", "N", text))


def _shows(printed: str, sample: str) -> bool:
    """Whether ``printed`` holds the whole summary ``sample`` shows (the line after it is "wrote")."""
    return _words(sample) + " wrote " in _words(printed)


def test_a_summary_without_a_diverged_run_matches_the_sample_without_its_origin_clause():
    sample = _documented()[1]
    assert ORIGIN in " ".join(sample.split())
    undiverged = " ".join(sample.split()).replace("1/1 runs diverged", "0/1 runs diverged").replace(ORIGIN, "")
    assert _shows(undiverged + "\nwrote runs/quick/batch_study.json\n", sample)
    assert not _shows("1/1 runs diverged\nwrote runs/quick/batch_study.json\n", sample)


@pytest.mark.slow
def test_the_quick_study_prints_the_documented_summary(tmp_path, monkeypatch, capsys):
    args, sample = _documented()
    monkeypatch.chdir(tmp_path)
    main(args)
    printed = capsys.readouterr().out
    assert _shows(printed, sample), _words(printed)
