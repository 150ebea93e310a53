"""The study store: one durable file per finished unit, under ``DIR/store/``.

Layout: ``records/<unit>.json`` (a finished unit), ``failed/<unit>.json`` (its last error, after the
retries; a rerun tries it again), ``locks/<unit>.lock`` (held while a process runs the unit).

Why per-unit files. A record is written to a temporary file, fsynced and renamed into place
(``canvaslab.io.write_text_atomic``), so it is either absent or complete: a kill at any moment loses at
most the unit being run and never a finished one. Each file carries the sha256 of its record and the
plan's, checked on every read. The one torn-write rule: a record file that does not parse, whose
checksum does not match, or that cites another unit or plan is not a result; it is moved aside
(``.damaged``, kept for inspection) and its unit is run again.

Why locks. Two processes pointed at one DIR must not both run a unit (wasted work) nor both store it
(a duplicate): a process takes ``flock`` on the unit's lock file before running it and checks the
record again once it holds it; the kernel releases the lock when the process dies, even by SIGKILL, so
no lock outlives its holder. flock needs a local filesystem (or one that implements it); on a Ray
cluster only the driver touches the store, the workers send their records back.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote, unquote

from canvaslab.io import _finite, _json_default, write_text_atomic
from canvaslab.studies.engine.plan import STORE_DIR, canonical_json, sha256_of


def _file_name(unit: str) -> str:
    """A unit id as one file name ('/' and '#' escaped, readable otherwise)."""
    return quote(unit, safe="-_.@+=,") + ".json"


class UnitLock:
    """An exclusive ``flock`` on one unit, held by this process until ``release``."""

    def __init__(self, path: Path):
        self.path, self.handle = path, None

    def acquire(self, wait: bool) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+b")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            handle.close()
            return False
        self.handle = handle
        return True

    def release(self) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()
            self.handle = None


class Store:
    """Finished units of one study (``plan_sha256``) in ``DIR/store``."""

    def __init__(self, folder: str | Path, plan_sha256: str, read_only: bool = False):
        self.root = Path(folder) / STORE_DIR
        self.plan_sha256 = plan_sha256
        self.records_dir, self.failed_dir = self.root / "records", self.root / "failed"
        # read_only: a damaged record is left where it is (and listed here) instead of being set aside
        self.read_only, self.passed_over = read_only, []

    def say_passed_over(self) -> None:
        """One stderr line for the damaged records a read-only store left where they are, if any."""
        if self.passed_over:
            print(f"{len(self.passed_over)} stored records are damaged or of another plan (e.g. {self.passed_over[0]}): "
                  "left as they are and not counted; `run` sets them aside and redoes their units", file=sys.stderr)

    def _record_path(self, unit: str) -> Path:
        return self.records_dir / _file_name(unit)

    def lock(self, unit: str) -> UnitLock:
        return UnitLock(self.root / "locks" / (_file_name(unit)[:-5] + ".lock"))

    def load(self, unit: str) -> dict[str, Any] | None:
        """The unit's record, or None if it has none (a damaged file is moved aside: see the module)."""
        stored = self.load_stored(unit)
        return None if stored is None else stored["record"]

    def load_stored(self, unit: str) -> dict[str, Any] | None:
        """The unit's stored file: its record and the ``worker`` that made it."""
        path = self._record_path(unit)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError:  # e.g. a folder in its place
            if not self.read_only:
                raise
            text = ""
        try:
            stored = json.loads(text)
            valid = (stored["unit"] == unit and stored["plan_sha256"] == self.plan_sha256
                     and stored["record_sha256"] == sha256_of(stored["record"]))
        except (ValueError, KeyError, TypeError):
            valid = False
        if not valid:
            if self.read_only:
                self.passed_over.append(path)
            else:
                self._set_aside(path)
            return None
        return stored

    def _set_aside(self, path: Path) -> None:
        number = 0
        while (aside := path.with_name(f"{path.name}.damaged{number or ''}")).exists():
            number += 1
        try:
            os.rename(path, aside)
        except FileNotFoundError:  # another process set it aside first
            return
        print(f"{path} is damaged: kept as {aside.name}, its unit runs again", file=sys.stderr)

    def has(self, unit: str) -> bool:
        return self.load(unit) is not None

    def save(self, unit: str, record: dict[str, Any], worker: dict[str, Any] | None = None) -> None:
        """Make the unit's record durable (atomically); only then does it count as finished."""
        # What will be read back, exactly: numpy/torch values as lists, NaN/inf as null (JSON has neither).
        record = json.loads(json.dumps(_finite(record), default=_json_default))
        stored = {"unit": unit, "plan_sha256": self.plan_sha256, "record_sha256": sha256_of(record),
                  "worker": worker or {}, "record": record}
        write_text_atomic(self._record_path(unit), canonical_json(stored) + "\n")
        (self.failed_dir / _file_name(unit)).unlink(missing_ok=True)

    def fail(self, unit: str, error: str, attempts: int) -> None:
        write_text_atomic(self.failed_dir / _file_name(unit),
                          canonical_json({"unit": unit, "error": error, "attempts": attempts}) + "\n")

    def failures(self) -> dict[str, dict[str, Any]]:
        if not self.failed_dir.is_dir():
            return {}
        found = {}
        for path in sorted(self.failed_dir.glob("*.json")):
            try:
                entry = json.loads(path.read_text(encoding="utf-8"))
                found[entry["unit"]] = entry
            except (OSError, ValueError, KeyError, TypeError):  # a damaged failure note: left, not counted
                self.passed_over.append(path)
        return found

    def records(self, units: list[str]) -> dict[str, dict[str, Any]]:
        """The records of the finished units among ``units``, in that order."""
        return {unit: stored["record"] for unit, stored in self.stored(units).items()}

    def stored(self, units: list[str]) -> dict[str, dict[str, Any]]:
        """The stored files of the finished units among ``units``, in that order."""
        found = {}
        for unit in units:
            stored = self.load_stored(unit)
            if stored is not None:
                found[unit] = stored
        return found

    def stored_units(self) -> Iterator[str]:
        if self.records_dir.is_dir():
            for path in sorted(self.records_dir.glob("*.json")):
                yield unquote(path.name[:-5])
