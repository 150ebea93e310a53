"""One engine for every study: plan -> units -> store -> summary.

Every study (batch size, op scan, commit order, unused tokens) is a ``Study``: a frozen plan whose
sha256 is its identity (``plan``), units with stable ids derived from it, a way to run a group of units
on a model, and views (the summary and result files) computed from the stored records alone
(``Study.write_views``). ``run_study`` registers the plan before any unit runs (refusing a folder whose
plan differs), runs what the store lacks with the chosen executor (``executors``), and writes the views.
So resume, crash safety, concurrency, retries, progress and Ray are each built once, here.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from canvaslab.errors import CanvaslabError
from canvaslab.studies.engine.executors import EXECUTORS, Outcome, Progress, run_local, run_ray
from canvaslab.studies.engine.plan import frozen, register, registered_plan, sha256_of, start_fresh
from canvaslab.studies.engine.store import Store
from canvaslab.studies.engine.study import Study

__all__ = ["EXECUTORS", "Outcome", "Study", "run_study", "write_stored_views"]


def run_study(study: Study, folder: str | Path | None, *, executor: str = "local", retries: int = 0,
              progress: Progress | None = None, ray_address: str | None = None, workers: int | None = None,
              fresh: bool = False, state: Any = None, limit: int | None = None) -> tuple[dict[str, Any], Outcome]:
    """Run (or resume) ``study`` in ``folder``; returns its views' content and the outcome.

    ``folder`` None runs in a temporary folder (nothing kept). ``state``: an already prepared worker state
    for the local executor (e.g. a model the caller loaded); ``limit``: run at most that many pending units."""
    if executor not in EXECUTORS:
        raise CanvaslabError(f"--executor {executor!r} must be one of {', '.join(EXECUTORS)}")
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="canvaslab-study-") as scratch:
            return run_study(study, scratch, executor=executor, retries=retries, progress=progress,
                             ray_address=ray_address, workers=workers, state=state, limit=limit)
    folder = Path(folder).resolve()  # a study in "." must stay here if --fresh moves the old one away
    if fresh and (kept := start_fresh(folder)) is not None:
        print(f"--fresh: the old folder is kept as {kept}", file=sys.stderr)
    store = Store(folder, register(folder, study.name, study.plan()))
    if executor == "ray":
        outcome = run_ray(study, store, retries=retries, progress=progress, address=ray_address, workers=workers,
                          limit=limit)
    else:
        outcome = run_local(study, store, retries=retries, progress=progress, state=state, limit=limit)
    return _views(study, folder, store), outcome


def write_stored_views(study: Study, folder: str | Path) -> dict[str, Any]:
    """The views of what ``folder``'s store holds, running nothing and changing no record (e.g. a study cut
    short, to read so far): refuses a folder with no registered plan, or another one than ``study``'s."""
    folder = Path(folder).resolve()
    registered = registered_plan(folder)
    if registered is None or registered != frozen(study.name, study.plan()):
        raise CanvaslabError(f"{folder} holds no stored results of this plan (nothing was run there, or another plan)")
    store = Store(folder, sha256_of(registered), read_only=True)
    views = _views(study, folder, store)
    store.say_passed_over()
    return views


def _views(study: Study, folder: Path, store: Store) -> dict[str, Any]:
    stored = store.stored(study.units())
    return study.write_views(folder, {u: s["record"] for u, s in stored.items()},
                             {u: s["worker"] for u, s in stored.items()})
