"""The study store: one durable file per finished unit, under ``DIR/store/``.

Layout: ``records/<name>.json`` (a finished unit), ``failed/<name>.json`` (its last error, after the
retries; a rerun tries it again), ``locks/<name>.lock`` (held while a process runs the unit). ``<name>`` is
the sha256 of the unit's id, never the id itself: an id of any length or content (a prompt id from a user's
file) names a file of 64 characters, and the id is kept inside the file. Stores whose records are named by
the id itself (percent-escaped) are still read, and such records count as the unit's.

Why per-unit files. A record is written to a temporary file, fsynced and renamed into place
(``canvaslab.io.write_text_atomic``), so it is either absent or complete: a kill at any moment loses at
most the unit being run and never a finished one. Each file carries the sha256 of its record and the
plan's, checked on every read. The one torn-write rule: a record file that does not parse, whose
checksum does not match, that is too big or nested too deeply, or that cites another unit is not a
result; it is moved aside (``.damaged``, kept for inspection) and its unit is run again. A record that is
intact (its checksum matches) but cites another plan is no torn write: the registered plan was replaced
after results existed (``store/plan.json`` edited with its hash). That is refused in one line, moving
nothing: setting such records aside would quietly rerun the study under a plan chosen after its data.

What a folder from elsewhere cannot do. The store's folders must be real folders (a symbolic link or a file
in their place is refused in one line), and every write and rename happens relative to a handle of a folder
opened without following links, so nothing is ever written or renamed outside the store. Its files are read
without following a link or blocking, and bounded (``RECORD_LIMIT``): a record that is a link (to
``/dev/zero``, to a file elsewhere), a FIFO, a device or a folder is refused in one line. A full disk ends the
run in one line (``RunFailed``) that says what is kept and how to resume.

Why locks. Two processes pointed at one DIR must not both run a unit (wasted work) nor both store it
(a duplicate): a process takes ``flock`` on the unit's lock file before running it and checks the
record again once it holds it; the kernel releases the lock when the process dies, even by SIGKILL, so
no lock outlives its holder. flock needs a local filesystem (or one that implements it); on a Ray
cluster only the driver touches the store, the workers send their records back.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from canvaslab.errors import CanvaslabError, RunFailed
from canvaslab.io import (JSON_LIMIT, MiB, NAME_MAX, NotRegularFile, UnreadableFile, _finite, _json_default, disk_full,
                          folder_handle, parse_json, read_bytes, write_text_atomic)
from canvaslab.studies.engine.plan import STORE_DIR, canonical_json, check_store, sha256_of

RECORD_LIMIT = JSON_LIMIT  # io's one limit on a JSON document; a record of the largest real study is a few MB
NOTE_LIMIT = 4 * MiB  # a failure note: a unit id and one error line
_HASHED = re.compile(r"[0-9a-f]{64}\.json")


def _file_name(unit: str) -> str:
    """A unit's file name: the sha256 of its id."""
    return hashlib.sha256(unit.encode("utf-8", "surrogatepass")).hexdigest() + ".json"


def _named_by_id(unit: str) -> str | None:
    """The name stores used to give a unit's files (its id, percent-escaped), if such a name can exist."""
    try:
        name = quote(unit, safe="-_.@+=,") + ".json"
    except UnicodeEncodeError:
        return None
    return name if len(name.encode("utf-8")) <= NAME_MAX and not _HASHED.fullmatch(name) else None


def _intact(stored: Any) -> bool:
    """A stored file of the shape ``save`` writes (a record and a worker that are objects) whose record matches
    its own checksum, whichever unit and plan it names."""
    try:
        return (isinstance(stored["unit"], str) and isinstance(stored["plan_sha256"], str)
                and isinstance(stored["record"], dict) and isinstance(stored["worker"], dict)
                and stored["record_sha256"] == sha256_of(stored["record"]))
    except (ValueError, KeyError, TypeError):  # not an object, a field missing, NaN in the record
        return False


def _not_a_file(error: NotRegularFile) -> CanvaslabError:
    return CanvaslabError(f"{error.path} is {error.kind}, not a regular file: a study store holds only the files "
                          "canvaslab writes; remove it (its unit is then run again)")


class UnitLock:
    """An exclusive ``flock`` on one unit, held by this process until ``release``."""

    def __init__(self, path: Path, below: Path | None = None):
        self.path, self.below, self.handle = path, below, None

    def acquire(self, wait: bool) -> bool:
        with folder_handle(self.path.parent, below=self.below, create=True) as folder:
            try:
                handle = os.open(self.path.name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                                 0o666, dir_fd=folder)
            except OSError as error:
                if error.errno == errno.ELOOP:
                    raise CanvaslabError(f"{self.path} is a symbolic link, not a lock file: a study store holds only "
                                         "the files canvaslab writes; remove it") from None
                raise
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            os.close(handle)
            raise CanvaslabError(f"{self.path} is not a regular file: a study store holds only the files canvaslab "
                                 "writes; remove it")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(handle)
            return False
        self.handle = handle
        return True

    def release(self) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            os.close(self.handle)
            self.handle = None


class Store:
    """Finished units of one study (``plan_sha256``) in ``DIR/store``."""

    def __init__(self, folder: str | Path, plan_sha256: str, read_only: bool = False):
        self.folder = Path(folder)
        self.root = self.folder / STORE_DIR
        self.plan_sha256 = plan_sha256
        self.records_dir, self.failed_dir = self.root / "records", self.root / "failed"
        # read_only: a damaged record is left where it is (and listed here) instead of being set aside; a dict
        # used as an ordered set, so listing a path costs the same with 30,000 listed as with none
        self.read_only, self.passed_over = read_only, {}
        check_store(self.folder)

    def say_passed_over(self) -> None:
        """One stderr line for the damaged records a read-only store left where they are, if any."""
        if self.passed_over:
            print(f"{len(self.passed_over)} stored records are damaged or of another plan, or name no unit of this "
                  f"plan (failure notes included; e.g. {next(iter(self.passed_over))}): left as they are and not "
                  "counted; `run` sets damaged ones aside and redoes their units", file=sys.stderr)

    def pass_over(self, path: Path) -> None:
        """List ``path`` among the files left where they are and not counted (once, however often it is read)."""
        self.passed_over.setdefault(path)

    def path_of(self, unit: str) -> Path | None:
        """The file holding the unit's record, if any."""
        names = [name for name in (_file_name(unit), _named_by_id(unit)) if name]
        return next((self.records_dir / n for n in names if os.path.lexists(self.records_dir / n)), None)

    def _record_path(self, unit: str) -> Path:
        return self.records_dir / _file_name(unit)

    def lock(self, unit: str) -> UnitLock:
        return UnitLock(self.root / "locks" / (_file_name(unit)[:-5] + ".lock"), self.folder)

    def load(self, unit: str) -> dict[str, Any] | None:
        """The unit's record, or None if it has none (a damaged file is moved aside: see the module)."""
        stored = self.load_stored(unit)
        return None if stored is None else stored["record"]

    def _read(self, path: Path, limit: int = RECORD_LIMIT) -> Any:
        """The parsed file (``UnreadableFile`` when damaged; ``FileNotFoundError`` when missing; one line when it is
        not a regular file)."""
        try:
            return parse_json(read_bytes(path, max_bytes=limit), source=path)
        except NotRegularFile as error:
            raise _not_a_file(error) from None

    def load_stored(self, unit: str) -> dict[str, Any] | None:
        """The unit's stored file: its record and the ``worker`` that made it."""
        for name in (_file_name(unit), _named_by_id(unit)):
            if name is None:
                continue
            path = self.records_dir / name
            try:
                stored = self._read(path)
            except FileNotFoundError:
                continue
            except UnreadableFile:
                stored = None
            if not _intact(stored) or stored["unit"] != unit:
                if self.read_only:
                    self.pass_over(path)
                else:
                    self._set_aside(path)
                return None
            if stored["plan_sha256"] != self.plan_sha256:  # intact, so no torn write: the plan was replaced
                raise self._plan_changed(stored["plan_sha256"])
            return stored
        return None

    def _plan_changed(self, cited: str) -> CanvaslabError:
        """The one line refusing a store whose intact records cite another plan than the registered one."""
        count = sum(1 for path in self._files(self.records_dir) if self._other_plan(path))
        results = "1 result was" if count == 1 else f"{count} results were"
        return CanvaslabError(
            f"{self.folder}: its plan was changed after {results} stored (they cite plan {cited[:12]}..., "
            f"the registered plan is {self.plan_sha256[:12]}...); a plan is never changed after its results exist, "
            "so nothing was run, moved or deleted: restore the plan, or run with --fresh to start over (the old "
            "folder, with its results, is kept under a new name)")

    def _other_plan(self, path: Path) -> str | None:
        """The plan an intact record file cites, if it is not this store's."""
        try:
            stored = self._read(path)
        except (OSError, CanvaslabError):  # gone, unreadable or not a file: damaged, not another plan's
            return None
        return stored["plan_sha256"] if _intact(stored) and stored["plan_sha256"] != self.plan_sha256 else None

    def _refuse_records_of_other_units(self, units: list[str]) -> None:
        """Refuse intact records of another plan among the files of units not in ``units``: a plan replaced with
        one whose unit ids all differ would otherwise leave them unread and run beside them. Only files no unit
        names are read here (none in a store of one plan), so this costs one listing."""
        names = {name for unit in units for name in (_file_name(unit), _named_by_id(unit)) if name}
        for path in self._files(self.records_dir):
            if path.name not in names and (cited := self._other_plan(path)):
                raise self._plan_changed(cited)

    def _set_aside(self, path: Path) -> None:
        with folder_handle(path.parent, below=self.folder) as folder:
            if folder is None:
                return
            number = 0
            while True:
                aside = f"{path.name}.damaged{number or ''}"
                try:
                    os.lstat(aside, dir_fd=folder)
                except FileNotFoundError:
                    break
                number += 1
            try:
                os.rename(path.name, aside, src_dir_fd=folder, dst_dir_fd=folder)
            except FileNotFoundError:  # another process set it aside first
                return
        print(f"{path} is damaged: kept as {aside}, its unit runs again", file=sys.stderr)

    def has(self, unit: str) -> bool:
        return self.load(unit) is not None

    def _disk_full(self, what: str, error: OSError) -> RunFailed:
        try:
            kept = sum(1 for name in os.listdir(self.records_dir) if name.endswith(".json"))
        except OSError:
            kept = 0
        return RunFailed(f"the disk is full ({error.strerror or error}): {what} could not be written; the {kept} "
                         f"finished units are kept in {self.root}, intact: free some space and rerun the same "
                         "command to resume (finished units are not run again)")

    def save(self, unit: str, record: dict[str, Any], worker: dict[str, Any] | None = None) -> None:
        """Make the unit's record durable (atomically); only then does it count as finished."""
        # What will be read back, exactly: numpy/torch values as lists, NaN/inf as null (JSON has neither).
        record = json.loads(json.dumps(_finite(record), default=_json_default))
        stored = {"unit": unit, "plan_sha256": self.plan_sha256, "record_sha256": sha256_of(record),
                  "worker": worker or {}, "record": record}
        try:
            write_text_atomic(self._record_path(unit), canonical_json(stored) + "\n", below=self.folder)
        except OSError as error:
            if disk_full(error):
                raise self._disk_full(f"the record of {unit}", error) from None
            raise
        with folder_handle(self.failed_dir, below=self.folder) as folder:
            for name in (_file_name(unit), _named_by_id(unit)):
                if folder is not None and name is not None:
                    try:
                        os.unlink(name, dir_fd=folder)
                    except (FileNotFoundError, IsADirectoryError):
                        pass

    def fail(self, unit: str, error: str, attempts: int) -> None:
        try:
            write_text_atomic(self.failed_dir / _file_name(unit),
                              canonical_json({"unit": unit, "error": error, "attempts": attempts}) + "\n",
                              below=self.folder)
        except OSError as problem:
            if disk_full(problem):
                raise self._disk_full(f"the failure note of {unit}", problem) from None
            raise

    def failures(self, planned: set[str] | None = None) -> dict[str, dict[str, Any]]:
        """The failure notes, by unit. A damaged note, or (given ``planned``) the note of a unit outside the plan,
        is passed over: left there, not counted."""
        found = {}
        for path in self._files(self.failed_dir):
            entry = self._note(path)
            if entry is None or (planned is not None and entry["unit"] not in planned):
                self.pass_over(path)
            else:
                found[entry["unit"]] = entry
        return found

    def _note(self, path: Path) -> dict[str, Any] | None:
        """A failure note whose unit and error are texts with a UTF-8 form (a lone surrogate has none, so no table
        could hold it), or None."""
        try:
            entry = self._read(path, NOTE_LIMIT)
            if not (isinstance(entry["unit"], str) and isinstance(entry["error"], str)):
                return None
            (entry["unit"] + entry["error"]).encode("utf-8")
        except (FileNotFoundError, UnreadableFile, KeyError, TypeError, UnicodeEncodeError):
            return None
        return entry

    def _files(self, folder: Path) -> list[Path]:
        with folder_handle(folder, below=self.folder) as handle:
            names = [] if handle is None else os.listdir(handle)
        return [folder / name for name in sorted(names) if name.endswith(".json")]

    def records(self, units: list[str]) -> dict[str, dict[str, Any]]:
        """The records of the finished units among ``units``, in that order."""
        return {unit: stored["record"] for unit, stored in self.stored(units).items()}

    def stored(self, units: list[str]) -> dict[str, dict[str, Any]]:
        """The stored files of the finished units among ``units``, in that order (a unit listed twice, as a plan
        holding one prompt twice lists it, is read once)."""
        units = list(dict.fromkeys(units))
        self._refuse_records_of_other_units(units)
        found = {}
        for unit in units:
            stored = self.load_stored(unit)
            if stored is not None:
                found[unit] = stored
        return found

    def stored_units(self) -> list[str]:
        """The unit ids the records folder holds files for, sorted (a file that names no unit, or another unit
        than its name's, is listed as passed over)."""
        units = []
        for path in self._files(self.records_dir):
            if not _HASHED.fullmatch(path.name):
                units.append(unquote(path.name[:-5]))
                continue
            try:
                unit = self._read(path)["unit"]
            except (FileNotFoundError, UnreadableFile, KeyError, TypeError):
                unit = None
            if isinstance(unit, str) and _file_name(unit) == path.name:
                units.append(unit)
            else:
                self.pass_over(path)
        return sorted(set(units))
