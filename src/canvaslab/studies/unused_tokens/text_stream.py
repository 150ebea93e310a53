"""Read a large text file as batches of lines, in bounded memory.

The corpus scan must handle files of tens of megabytes (and more) without loading them whole, and it
must give the same token counts whatever the read size. Both follow from one rule: the unit handed to
the tokenizer is a *line* together with the run of newlines that ends it (``"Hello.\\n\\n"``), and a
read chunk is only ever cut between two such lines. The chunk size then decides how lines are batched,
never where they are cut, so a scan in 4 KiB chunks and a scan in one chunk tokenize exactly the same
strings.

One exception keeps memory bounded: a single line longer than ``max_line_chars`` is cut before its
last whitespace run (or hard, if it has none). Tokens at such a cut can differ from tokenizing the
whole line; the corpora this module is for (``canvaslab assets corpus``) have no such lines.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from pathlib import Path

DEFAULT_CHUNK_BYTES = 1 << 20
DEFAULT_MAX_LINE_CHARS = 1 << 22

# A line and the newline run that ends it, or a bare newline run (only possible at the start of a file).
_LINE = re.compile(r"[^\n]+\n*|\n+")


def _last_line_boundary(text: str) -> int:
    """Index just after the last newline run that is followed by more text; 0 if there is none.

    A trailing newline run is not a boundary yet: the next chunk may continue it.
    """
    body_end = len(text.rstrip("\n"))
    return text.rfind("\n", 0, body_end) + 1


def _forced_cut(text: str) -> int:
    """Where to cut a line too long to hold: before its last whitespace run, else at the end."""
    match = None
    for match in re.finditer(r"\s+", text):
        pass
    return match.start() if match is not None and match.start() > 0 else len(text)


def iter_line_batches(
    path: str | Path,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
) -> Iterator[list[str]]:
    """Yield lists of lines (each with its newline run) covering the UTF-8 file at ``path`` exactly once.

    Joining every yielded line in order gives back the file's text. Invalid UTF-8 is replaced (U+FFFD)
    rather than fatal: a scan should count, not stop on one bad byte.
    """
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    with open(path, "rb") as handle:
        while raw := handle.read(chunk_bytes):
            pending += decoder.decode(raw)
            cut = _last_line_boundary(pending)
            if cut == 0 and len(pending) > max_line_chars:
                cut = _forced_cut(pending)
            if cut:
                yield _LINE.findall(pending[:cut])
                pending = pending[cut:]
    pending += decoder.decode(b"", final=True)
    if pending:
        yield _LINE.findall(pending)
