"""One engine for every study: plan -> units -> store -> summary.

Every study (batch size, op scan, commit order, unused tokens) is a ``Study``: a frozen plan whose
sha256 is its identity (``plan``), units with stable ids derived from it, a way to run a group of units
on a model, and views (the summary and result files) computed from the stored records alone
(``Study.write_views``). ``run_study`` registers the plan before any unit runs (refusing a folder whose
plan differs), runs what the store lacks with the chosen executor (``executors``), and writes the views.
So resume, crash safety, concurrency, retries, progress and Ray are each built once, here.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from canvaslab.errors import CanvaslabError, RunFailed
from canvaslab.io import check_names, disk_full
from canvaslab.studies.engine.executors import EXECUTORS, Outcome, Progress, run_local, run_ray
from canvaslab.studies.engine.plan import (HASH_FILE, PLAN_FILE, STORE_DIR, check_store, frozen, register,
                                           registered_plan, sha256_of, start_fresh)
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
    given = check_names(Path(folder), "the study folder")
    if fresh and os.path.islink(given):  # before resolving: resolved, the link's target would be moved aside
        start_fresh(given)
    folder = given.resolve()  # "." must stay here if --fresh moves it away
    if fresh and (kept := start_fresh(folder)) is not None:
        print(f"--fresh: the old folder is kept as {kept}", file=sys.stderr)
    check_store(folder)
    created = [path for path in (folder / STORE_DIR, folder, *folder.parents) if not os.path.lexists(path)]
    try:
        store = Store(folder, register(folder, study.name, study.plan()))
        if executor == "ray":
            outcome = run_ray(study, store, retries=retries, progress=progress, address=ray_address, workers=workers,
                              limit=limit)
        else:
            outcome = run_local(study, store, retries=retries, progress=progress, state=state, limit=limit)
    except RunFailed:  # e.g. the disk is full: what the store holds stays, as its message says
        raise
    except Exception as error:
        _remove_if_unused(created)
        if disk_full(error):  # registering the plan, taking a lock
            raise RunFailed(f"the disk is full ({error.strerror or error}): {folder} could not be written; what "
                            "finished is kept in its store: free some space and rerun the same command to "
                            "resume") from None
        raise
    try:
        return _views(study, folder, store), outcome
    except OSError as error:
        if not disk_full(error):
            raise
        raise RunFailed(f"the disk is full ({error.strerror or error}): the study's result files could not be written; "
                        f"its {outcome.done} finished units are kept in {folder / STORE_DIR}, intact: free some space "
                        "and rerun the same command to write them (no finished unit runs again)") from None


def _remove_if_unused(created: list[Path]) -> None:
    """Undo a start that ended before any unit finished or failed: the store this call made (its plan, its
    locks and empty folders), then the folders it made for it (the study folder, missing parents), so a refused
    start leaves nothing behind. A store holding a record or a failure note is kept, and so is anything else
    found there (only empty folders are removed)."""
    if not created or created[0].name != STORE_DIR:
        return
    store = created[0]
    for name in ("records", "failed"):
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            if os.listdir(store / name):
                return
    with contextlib.suppress(OSError):
        for name in os.listdir(store / "locks"):
            if name.endswith(".lock"):
                (store / "locks" / name).unlink()
    for path in (store / PLAN_FILE, store / HASH_FILE):
        with contextlib.suppress(OSError):
            path.unlink()
    for path in (store / "locks", store / "records", store / "failed", *created):
        with contextlib.suppress(OSError):
            path.rmdir()  # only ever an empty folder


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
