"""The documentation's list of studies is the registry's: the table of docs/python-api.md ("The studies") lists
exactly ``canvaslab.STUDIES``, in its order, with each study's command, plan class, result file and unit."""

from __future__ import annotations

import re

import canvaslab
from docs_sources import DOCS

PAGE = DOCS / "python-api.md"
HEADING = "## The studies (`canvaslab.STUDIES`)"
COLUMNS = ["name", "command", "plan class", "result file", "unit"]


def _cells(line: str) -> list[str]:
    return [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]


def documented_studies() -> list[dict[str, str]]:
    """The rows of the first table after the registry's heading, as {column: cell}."""
    text = PAGE.read_text(encoding="utf-8")
    assert HEADING in text, f"{PAGE.name} has no section {HEADING!r}"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    table = re.search(r"^\|.*\|[ \t]*\n\|[ \t:|-]+\|[ \t]*\n(?:\|.*\|[ \t]*\n?)+", section, re.M)
    assert table, f"the section {HEADING!r} of {PAGE.name} has no table"
    header, _, *rows = table.group(0).strip().splitlines()
    assert _cells(header) == COLUMNS
    return [dict(zip(COLUMNS, _cells(row))) for row in rows]


def test_the_docs_table_lists_exactly_the_registry():
    documented = documented_studies()
    registered = [{"name": study.name, "command": study.command, "plan class": study.plan.__name__,
                   "result file": study.result_file, "unit": study.unit} for study in canvaslab.STUDIES.values()]
    assert documented == registered, (
        f"docs/python-api.md's table of studies differs from canvaslab.STUDIES:\n"
        f"documented: {documented}\nregistered: {registered}")


def test_every_plan_class_is_public():
    for study in canvaslab.STUDIES.values():
        assert study.plan.__name__ in canvaslab.__all__
        assert getattr(canvaslab, study.plan.__name__) is study.plan
