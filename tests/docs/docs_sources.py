"""What the documentation tests read: the README and every page under docs/, their code spans, fenced blocks and
the examples marked runnable.

A runnable example is a fenced ``bash`` or ``python`` block directly after the HTML comment ``<!-- runnable -->``
(or ``<!-- runnable exit=N -->`` for an example whose point is its exit code). Mark only commands that finish on
a CPU in seconds; the examples of one page run in order, in one fresh folder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def documents() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def name(document: Path) -> str:
    return str(document.relative_to(ROOT))


FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
RUNNABLE = re.compile(r"^<!-- runnable(?: exit=(\d+))? -->[ \t]*\n```(bash|python)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


@dataclass(frozen=True)
class Example:
    document: str
    line: int
    language: str
    code: str
    exit_code: int


def runnable_examples(document: Path) -> list[Example]:
    text = document.read_text(encoding="utf-8")
    return [Example(name(document), text.count("\n", 0, match.start()) + 2, match.group(2), match.group(3),
                    int(match.group(1) or 0))
            for match in RUNNABLE.finditer(text)]


def code_spans(text: str) -> list[tuple[str, str]]:
    """(content, the text right after it) for every fenced block and inline code span."""
    spans = [(match.group(2), "") for match in FENCE.finditer(text)]
    without_blocks = FENCE.sub("", text)
    spans += [(match.group(1), without_blocks[match.end():match.end() + 60])
              for match in re.finditer(r"`([^`]+)`", without_blocks)]
    return spans
