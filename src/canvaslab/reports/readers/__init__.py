"""One small reader per study: the only code that knows a study's files.

Each reader turns a study folder's outputs into a plain view the report draws from, filling what older
files lack with ``None`` and a note, never failing on a missing optional key. When a study's files change
(a move to the study engine's store, for one), only its reader changes.

Files in a folder are read bounded and without following a link (``canvaslab.io.read_json``), and each
reader refuses, in one line and before anything is drawn, a file whose counts (batch sizes, regimes, ops,
runs) are far above what canvaslab writes (``too_many``): a tampered file cannot make the report run for hours.
"""

from __future__ import annotations

import os
from pathlib import Path

from canvaslab.errors import CanvaslabError
from canvaslab.io import JSON_LIMIT

RESULT_LIMIT = JSON_LIMIT  # a study's result file: io's one limit on a JSON document


def too_many(source: Path, what: str, count: int, limit: int) -> None:
    """Refuse (one line) ``count`` of ``what`` over ``limit``."""
    if count > limit:
        raise CanvaslabError(f"{source} lists {count:,} {what}; the report draws at most {limit:,}, far more than "
                             "canvaslab writes: the file was edited or is not canvaslab's")


def environment_of(data: dict) -> dict:
    """The environment a result file records; ``{}`` when it records none (``null``: a study stopped before any
    unit finished has no worker to describe)."""
    environment = data.get("environment")
    return {} if environment is None else environment


def is_file(path: Path) -> bool:
    """Whether something is at ``path``: a file, or a link, a special file or a folder where the file belongs,
    which reading it then refuses in one line, saying what it is (False if nothing can be there)."""
    return os.path.lexists(path)
