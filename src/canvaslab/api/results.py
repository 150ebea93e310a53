"""A study folder as a notebook reads it: its plan, its summary, its records as a table.

    >>> results = canvaslab.open_results("runs/batch")  # doctest: +SKIP
    >>> results.summary["summary"], results.to_pandas().shape  # doctest: +SKIP
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from canvaslab.errors import CanvaslabError
from canvaslab.io import check_names
from canvaslab.extras import require


@dataclass(frozen=True)
class Outcome:
    """What a run did: units run now, units found already done, units that failed (unit -> error), units
    another process on the same folder finished meanwhile."""

    ran: int
    skipped: int
    failed: dict[str, str] = field(default_factory=dict)
    by_others: int = 0


@dataclass(frozen=True)
class Results:
    """A study's results. ``study``: its registered name (``canvaslab.STUDIES``); ``folder``: where they are
    kept (None after a run without ``out``); ``summary``: the study's result file (what the command prints
    its tables from); ``outcome``: what the run did (None for a folder opened with ``open_results``)."""

    study: str
    folder: Optional[Path]
    summary: dict[str, Any]
    outcome: Optional[Outcome] = None

    @classmethod
    def of_run(cls, study: str, folder: Optional[Path], summary: dict[str, Any], outcome: Any) -> "Results":
        if isinstance(outcome, dict):
            outcome = Outcome(outcome["ran"], outcome["skipped"], dict(outcome["failed"]), outcome.get("by_others", 0))
        else:
            outcome = Outcome(outcome.ran, outcome.skipped, dict(outcome.failed), outcome.by_others)
        return cls(study, None if folder is None else Path(folder).resolve(), summary, outcome)

    @property
    def plan(self) -> dict[str, Any]:
        """The registered plan (``store/plan.json``), whose sha256 is the study's identity."""
        from canvaslab.studies.engine.plan import registered_plan

        registered = registered_plan(self._folder())
        if registered is None:
            raise CanvaslabError(f"{self.folder} holds no registered plan (store/plan.json)")
        return registered["plan"]

    def tables(self, wide: bool = False) -> list[Any]:
        """The tables the study's command prints (rich renderables: ``rich.print(*results.tables())``)."""
        from canvaslab.api.registry import study_type

        return study_type(self.study).tables(self.summary, wide)

    def to_arrow(self):
        """The stored units as a ``pyarrow.Table``: the rows ``canvaslab export`` writes (one per finished unit:
        ``study``, ``plan_sha256``, ``unit``, ``failed``, each record field as ``record.NAME``, ``worker``,
        ``record``)."""
        require("analysis", "Results.to_arrow")
        from canvaslab.api.registry import units_of_plan_in
        from canvaslab.studies.engine.export import store_table

        return store_table(self._folder(), units_of_plan_in(self._folder()))

    def to_pandas(self):
        """``to_arrow()`` as a ``pandas.DataFrame``."""
        require("analysis", "Results.to_pandas")
        return self.to_arrow().to_pandas()

    def _folder(self) -> Path:
        if self.folder is None:
            raise CanvaslabError("these results were not kept: run the study with out=DIR to keep its records")
        return self.folder


def as_path(value, what: str = "a study folder") -> Path:
    """``value`` as a Path when it is a text or a path, else one line (None, a number or bytes are no folder)."""
    if isinstance(value, (str, os.PathLike)) and not isinstance(value, bytes):
        return check_names(value, what)
    raise CanvaslabError(f"{value!r}: give {what} as a text or a path")


def open_results(folder: Union[str, Path]) -> Results:
    """Any study folder (a command's ``--out``, a plan's ``run(out=...)``), finished or not: its study is read
    from its registered plan, its summary from its result file. Reads only; runs nothing."""
    from canvaslab.api.registry import study_in
    from canvaslab.io import read_json

    folder = as_path(folder)
    if not folder.is_dir():
        raise CanvaslabError(f"{folder}: {'is not a folder' if folder.exists() else 'no such folder'}; give a "
                             "folder a study wrote")
    kind = study_in(folder)
    result = folder / kind.result_file
    if not result.is_file():
        raise CanvaslabError(f"{folder} holds no {kind.result_file} yet: nothing of its {kind.name} study has "
                             "finished (rerun it to resume)")
    try:
        summary = read_json(result)
    except (OSError, ValueError) as error:
        raise CanvaslabError(f"{result} cannot be read: {error}") from None
    if not isinstance(summary, dict):
        raise CanvaslabError(f"{result} is not a {kind.name} result (not a JSON object)")
    return Results(kind.name, folder.resolve(), summary)
