"""``results.jsonl``: the noise study's append-only record, one line per finished condition or baseline.

A GPU run of 2,304 conditions takes hours and can be killed at any moment, so results are never held
back: each line is appended and fsynced as soon as its condition is done, and a rerun skips what the
file already holds. A kill during a write leaves at most one torn line at the end. ``read`` repairs it by
the one rule every result log here follows (``canvaslab.io.append_line``): a last line that parses as a
complete record is a finished result that only lacks its newline, so it is kept and the newline added;
a last line cut short is dropped. A damaged line anywhere else is not a torn write and stops the run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from canvaslab.errors import CanvaslabError
from canvaslab.io import append_line, repair_last_line


class ResultsLog:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    def read(self) -> list[dict[str, Any]]:
        """Every complete line, parsed; a cut-short last line is removed from the file (see the module)."""
        if not self.path.exists():
            return []
        repair_last_line(self.path)
        records = []
        for number, line in enumerate(self.path.read_bytes().split(b"\n"), start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise CanvaslabError(f"{self.path}:{number} is not a JSON line: the results file is damaged "
                                     "(only a torn last line is repaired automatically)") from None
        return records

    def append(self, record: dict[str, Any]) -> dict[str, Any]:
        """Append one record as a line and make it durable before returning it."""
        append_line(self.path, json.dumps(record, sort_keys=True, allow_nan=False) + "\n")
        return record

    def has_results(self) -> bool:
        return self.path.exists() and any(line.strip() for line in self.path.read_bytes().split(b"\n")[:-1])
