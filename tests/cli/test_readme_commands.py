"""The README's documented command lines and the CLI cannot drift: every ``canvaslab ...`` line in the
README (and every page under docs/, benchmarks/README.md) names an existing command, each option it shows
appears in that command's ``--help``, and the README names every command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from canvaslab.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "benchmarks" / "README.md"]
COMMAND = re.compile(r"canvaslab ((?:[a-z][a-z-]*)(?: [a-z][a-z-]*)?)")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _code_spans(text: str) -> list[str]:
    """Fenced blocks (continuation lines joined to the command they follow), indented code lines and
    inline code spans (which may run over a line break)."""
    spans = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        for command in re.split(r"\n(?=\S)", block):
            spans.append(command.replace("\n", " "))
    without_blocks = re.sub(r"```.*?```", "", text, flags=re.S)
    spans += re.findall(r"^(?: {4}|\t)(canvaslab .*)$", without_blocks, flags=re.M)
    spans += [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", without_blocks)]
    return spans


def documented_commands() -> list[tuple[str, str, tuple[str, ...]]]:
    """(document, command words, options) for every ``canvaslab <command>`` in a code span."""
    group = get_command(app)
    found = []
    for document in DOCUMENTS:
        for span in _code_spans(document.read_text(encoding="utf-8")):
            for part in re.split(r"(?=canvaslab )", span):
                match = COMMAND.match(part)
                if not match:
                    continue
                words = match.group(1).split()
                command = group.commands.get(words[0])
                if command is None:
                    found.append((str(document.relative_to(ROOT)), words[0], ()))  # unknown command: the test fails on it
                    continue
                name = words[:2] if hasattr(command, "commands") and len(words) > 1 else words[:1]
                found.append((str(document.relative_to(ROOT)), " ".join(name), tuple(OPTION.findall(part))))
    return found


DOCUMENTED = documented_commands()


def every_command() -> set[str]:
    """Every command of the CLI, a group's subcommands as ``group subcommand``."""
    names = set()
    for name, command in get_command(app).commands.items():
        names |= {f"{name} {sub}" for sub in command.commands} if hasattr(command, "commands") else {name}
    return names


def test_the_readme_documents_every_command():
    in_readme = {name for document, name, _ in DOCUMENTED if document == "README.md"}
    missing = sorted(every_command() - in_readme)
    assert not missing, f"README.md shows no `canvaslab ...` line for: {missing}"


@pytest.mark.parametrize("document, name, documented_options", DOCUMENTED,
                         ids=[f"{doc}: canvaslab {name}" for doc, name, _ in DOCUMENTED])
def test_documented_options_appear_in_help(document, name, documented_options):
    # COLUMNS as well: typer reads TERMINAL_WIDTH only when first imported, rich reads COLUMNS per console
    result = CliRunner().invoke(app, [*name.split(), "--help"], env={"TERMINAL_WIDTH": "250", "COLUMNS": "250"})
    assert result.exit_code == 0, f"{document}: `canvaslab {name}` is not a command:\n{result.output}"
    missing = [option for option in documented_options if not re.search(rf"{option}(?![\w-])", result.output)]
    assert not missing, f"{document}: `canvaslab {name}` documents {missing}, which its --help does not have"
