"""Result files: written atomically, so an interrupted run never leaves a half-written file behind; and read
with bounds, so a file from elsewhere (a received study folder) is refused in one line, never followed.

Writing: ``atomic_writer`` writes a temporary file beside the target and renames it over the target, relative
to an open handle of the target's folder, so the rename never follows a symbolic link. With ``below``, every
folder from ``below`` down to the target's is opened without following links (a link there is refused, a
missing one created): what a study folder holds can never send a write outside it.

Reading: ``read_json`` (and ``read_bytes``, ``read_text``) opens without following a final symbolic link and
without blocking, accepts only a regular file, reads at most ``max_bytes`` and refuses nesting deeper than
``max_depth``: a link to ``/dev/zero``, a FIFO, a folder, a huge or a deeply nested file is one line
(``NotRegularFile`` or ``UnreadableFile``, both ``CanvaslabError`` and ``ValueError``), never a hang, a
``MemoryError`` or a ``RecursionError``.

Parsing costs memory: the parsed objects take 6 to 25 times the bytes of their JSON text (measured: a 75 MB file of
small objects took 1.9 GB to parse, a 180 MB one raised ``MemoryError`` under a 4 GB address-space limit). So a
JSON document is parsed only up to ``JSON_LIMIT`` bytes, whatever larger ``max_bytes`` a caller allows, a larger
file is refused before it is read, and running out of memory while parsing is one line too (``UnreadableFile``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import secrets
import stat
from pathlib import Path
from typing import IO, Any, Iterator

from canvaslab.errors import CanvaslabError

NAME_MAX = 255  # bytes in one file or folder name (Linux, macOS)
PATH_MAX = 4095  # bytes in a whole path
MiB = 1 << 20
READ_LIMIT = 1024 * MiB  # what read_bytes and read_text read at most unless told otherwise
# The one limit on a JSON document parsed (results, plans, records; callers set none larger). Parsing one this big
# takes up to about 13 GB of memory. A batch study's result grows by about 10.8 kB a run per pass (its canvas paths,
# written indented; measured on tiny, canvas 256), about 530 kB a run at the default 48 passes, and by about 470 kB
# a prompt for its B=1 reference: 700 (two batch sizes beside B=1) to 1,000 runs of 48 passes fit. canvaslab's
# other files are under 1 MB.
JSON_LIMIT = 512 * MiB
DEPTH_LIMIT = 100  # nesting of arrays and objects; canvaslab's files nest about 10 deep
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class UnreadableFile(CanvaslabError, ValueError):
    """A file that is not what canvaslab writes: too big, nested too deeply, not UTF-8, not JSON."""


class NotRegularFile(UnreadableFile):
    """A path where a regular file was expected holds a symbolic link, a FIFO, a device, a socket or a folder
    (``kind`` says which)."""

    def __init__(self, path: str | Path, kind: str):
        super().__init__(f"{path} is {kind} where a regular file was expected; put the file itself there")
        self.path, self.kind = Path(path), kind


def disk_full(error: BaseException) -> bool:
    """Whether ``error`` says the disk (or the user's quota) is full."""
    return isinstance(error, OSError) and error.errno in DISK_FULL


def _shown_name(name: bytes) -> str:
    text = os.fsdecode(name)
    return text if len(text) <= 40 else text[:32] + "..." + text[-4:]


def check_names(path: str | Path, what: str | None = None) -> Path:
    """``path``, or one line refusing it when one of its names is over ``NAME_MAX`` bytes or the whole path
    over ``PATH_MAX`` (the system's limits: such a path can be neither created nor opened), or when it holds a
    character no file name can."""
    path = Path(path)
    label = f"{what}: " if what else ""
    try:
        raw = os.fsencode(path)
    except UnicodeEncodeError as error:  # a lone surrogate no file system name decodes to
        raise CanvaslabError(f"{label}the path has a character ({error.object[error.start]!r}) no file name can "
                             "hold") from None
    for name in raw.split(b"/"):
        if len(name) > NAME_MAX:
            raise CanvaslabError(f"{label}the name {_shown_name(name)!r} is {len(name)} bytes long; a file or folder "
                                 f"name has at most {NAME_MAX} bytes: choose a shorter one")
    if len(raw) > PATH_MAX:
        raise CanvaslabError(f"{label}the path {_shown_name(raw)!r} is {len(raw)} bytes long; a path has at most "
                             f"{PATH_MAX} bytes")
    return path


def _too_long(error: OSError) -> bool:
    return error.errno == errno.ENAMETOOLONG


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "a special file"


def _size(count: int) -> str:
    return f"{count / MiB:,.0f} MiB" if count >= MiB else f"{count:,} bytes"


# ---- folders ------------------------------------------------------------------------------------------

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def _open_step(parent: int, name: str, shown: Path, create: bool) -> int | None:
    """``name`` in the folder ``parent`` as a folder handle, never following a link (None: it is missing)."""
    for attempt in range(2):
        try:
            return os.open(name, _DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                return None
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o777, dir_fd=parent)
        except OSError as error:
            if error.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            try:
                kind = _kind(os.lstat(name, dir_fd=parent).st_mode)
            except OSError:
                kind = "not a folder"
            raise CanvaslabError(f"{shown} is {kind}, not a folder: canvaslab writes and reads there only in real "
                                 "folders (it follows no link inside a study folder); remove it") from None
    return os.open(name, _DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)


def _open_folder(folder: Path, below: Path | None, create: bool) -> int | None:
    """A handle of ``folder`` (None if it is missing and not ``create``). Without ``below`` the folder is opened
    as the system finds it (links followed); with ``below``, ``below`` is, then every folder from there down is
    opened without following a link, and one that is a link or not a folder is refused in one line."""
    folder = Path(folder)
    top = folder if below is None else Path(below)
    parts = folder.relative_to(top).parts  # ValueError: a caller's mistake
    if ".." in parts:
        raise ValueError(f"{folder} must lie inside {below}")
    try:
        if create:
            top.mkdir(parents=True, exist_ok=True)
        handle = os.open(top, _DIRECTORY)
    except FileNotFoundError:
        return None
    except (FileExistsError, NotADirectoryError):
        raise CanvaslabError(f"{top}: a file is in the way (there or above it); a folder was to be there") from None
    shown = below
    for part in parts:
        shown = shown / part
        try:
            child = _open_step(handle, part, shown, create)
        finally:
            os.close(handle)
        if child is None:
            return None
        handle = child
    return handle


@contextlib.contextmanager
def folder_handle(folder: str | Path, *, below: str | Path | None = None, create: bool = False) -> Iterator[int | None]:
    """An open handle of ``folder`` for ``dir_fd`` calls (see ``_open_folder``), closed after the block; None
    when the folder is missing and ``create`` is False."""
    handle = _open_folder(Path(folder), None if below is None else Path(below), create)
    try:
        yield handle
    finally:
        if handle is not None:
            os.close(handle)


def check_real_folders(folder: str | Path, below: str | Path) -> None:
    """Refuse (one line) a link or non-folder on the way from ``below`` to ``folder``; missing folders pass."""
    with folder_handle(folder, below=below):
        pass


# ---- writing ------------------------------------------------------------------------------------------

def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):  # numpy / torch scalars and arrays
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _finite(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null so every reader can parse the file."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _temporary_name(name: str) -> str:
    stem = os.fsencode(name)[:200].decode("utf-8", "ignore") if len(os.fsencode(name)) > 200 else name
    return f".{stem}.{secrets.token_hex(4)}.tmp"


_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@contextlib.contextmanager
def atomic_writer(path: str | Path, *, binary: bool = False, below: str | Path | None = None) -> Iterator[IO]:
    """An open temporary file beside ``path``, renamed over it once the block ends without an error.

    The one way canvaslab writes a result file (JSON, text, ``.npy``, Parquet, the corpus, a figure): a reader
    sees the old file or the complete new one, never half of it. The data is fsynced before the rename, the
    file gets the mode ``open`` would give it (0666 less the umask), and the temporary file is created anew
    (``O_EXCL | O_NOFOLLOW``) and renamed relative to its folder's handle, so a symbolic link at ``path`` is
    replaced, never written through. ``below``: a folder above ``path`` from which every folder down to
    ``path``'s must be a real one (see the module). On an error the temporary file is removed and ``path`` is
    left as it was. A name over the system's limits is one line (``CanvaslabError``).
    """
    path = check_names(path)
    folder = _open_folder(path.parent, None if below is None else Path(below), create=True)
    try:
        for _ in range(100):
            temporary = _temporary_name(path.name)
            try:
                descriptor = os.open(temporary, _NEW_FILE, 0o666, dir_fd=folder)
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(errno.EEXIST, "no free temporary name", str(path.parent))
        try:
            with os.fdopen(descriptor, "wb" if binary else "w",
                           **({} if binary else {"encoding": "utf-8"})) as handle:
                yield handle
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.replace(temporary, path.name, src_dir_fd=folder, dst_dir_fd=folder)
            except IsADirectoryError:
                raise CanvaslabError(f"{path} is a folder; a file was to be written there: move it away or "
                                     "choose another name") from None
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary, dir_fd=folder)
            raise
    finally:
        os.close(folder)


def write_text_atomic(path: str | Path, text: str, *, below: str | Path | None = None) -> Path:
    """Write ``text`` to ``path`` atomically (``atomic_writer``)."""
    with atomic_writer(path, below=below) as handle:
        handle.write(text)
    return Path(path)


def write_json_atomic(path: str | Path, payload: Any, *, below: str | Path | None = None) -> Path:
    """Write ``payload`` as indented JSON, atomically."""
    text = json.dumps(_finite(payload), indent=2, default=_json_default, allow_nan=False)
    return write_text_atomic(path, text + "\n", below=below)


# ---- reading ------------------------------------------------------------------------------------------

def _open_regular(path: Path, follow_links: bool) -> tuple[int, os.stat_result]:
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        descriptor = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as error:
        if _too_long(error):
            check_names(path)
        if error.errno in (errno.ELOOP, errno.ENXIO, errno.EOPNOTSUPP):
            try:
                kind = _kind(os.lstat(path).st_mode)
            except OSError:
                kind = "not a regular file"
            raise NotRegularFile(path, kind) from None
        raise
    info = os.fstat(descriptor)
    if not stat.S_ISREG(info.st_mode):
        os.close(descriptor)
        raise NotRegularFile(path, _kind(info.st_mode))
    return descriptor, info


def _read_at_most(handle: IO[bytes], limit: int, size: int) -> bytes:
    """Up to ``limit + 1`` bytes of ``handle``: first the ``size`` its file had when opened, then whatever it grew
    by. Reading ``limit + 1`` at once would take a buffer of that size up front, which a process under a memory
    limit may not have for a file of a few bytes."""
    data = handle.read(size + 1)
    if len(data) > size:
        data += handle.read(limit + 1 - len(data))
    return data


def read_bytes(path: str | Path, *, max_bytes: int = READ_LIMIT, follow_links: bool = False) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` (more is refused in one line).

    A final symbolic link is refused unless ``follow_links`` (a file the user named, not one found in a folder);
    the file is opened without blocking, so a FIFO is refused, not waited on. ``FileNotFoundError`` and other
    ``OSError`` (permissions) pass through; everything else is ``NotRegularFile`` or ``UnreadableFile``."""
    path = Path(path)
    descriptor, info = _open_regular(path, follow_links)
    with os.fdopen(descriptor, "rb") as handle:
        data = b"" if info.st_size > max_bytes else _read_at_most(handle, max_bytes, info.st_size)
    if info.st_size > max_bytes or len(data) > max_bytes:
        raise UnreadableFile(f"{path} is {_size(max(info.st_size, len(data)))}, more than the {_size(max_bytes)} "
                             "canvaslab reads in such a file: it was not written by canvaslab, or is damaged")
    return data


def read_text(path: str | Path, *, max_bytes: int = READ_LIMIT, follow_links: bool = False) -> str:
    """``read_bytes`` decoded as UTF-8 (other bytes are refused in one line)."""
    data = read_bytes(path, max_bytes=max_bytes, follow_links=follow_links)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UnreadableFile(f"{path} is not UTF-8 text (byte {error.start})") from None


# A JSON string, or an unterminated one up to the end (possessive: linear time on any input), and every byte
# but the brackets.
_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\Z)', re.DOTALL)
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_SQUARE = bytes.maketrans(b"{}", b"[]")


def nesting_depth(text: str | bytes) -> int:
    """How deeply the arrays and objects of the JSON ``text`` nest (strings skipped), in time linear in it."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    brackets = _STRING.sub(b"", data).translate(_SQUARE, _NOT_BRACKETS)
    if brackets.count(b"[") <= 1:
        return brackets.count(b"[")
    import numpy as np

    depth = deepest = 0
    chunk = 1 << 24
    for start in range(0, len(brackets), chunk):
        part = np.frombuffer(brackets, dtype=np.uint8, count=min(chunk, len(brackets) - start), offset=start)
        running = np.cumsum(np.where(part == ord("["), 1, -1), dtype=np.int64) + depth
        deepest, depth = max(deepest, int(running.max())), int(running[-1])
    return deepest


def _check_json_size(size: int, source: str | Path) -> None:
    """Refuse (one line) a JSON text of more than ``JSON_LIMIT`` bytes before it is parsed."""
    if size > JSON_LIMIT:
        raise UnreadableFile(f"{source} is {_size(size)} of JSON, more than the {_size(JSON_LIMIT)} canvaslab parses "
                             "(parsing takes up to 25 times a file's size in memory): it was not written by "
                             "canvaslab, or is damaged")


def _decode(text: str | bytes, source: str | Path) -> str:
    if isinstance(text, str):
        return text
    try:
        return text.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UnreadableFile(f"{source} is not UTF-8 text (byte {error.start})") from None


def _parse(text: str | bytes, source: str | Path, max_depth: int) -> Any:
    text = _decode(text, source)
    if text.count("[") + text.count("{") > max_depth and nesting_depth(text) > max_depth:
        raise UnreadableFile(f"{source} nests arrays and objects more than {max_depth} deep: it was not written by "
                             "canvaslab, or is damaged")
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise UnreadableFile(f"{source} is not valid JSON ({error.msg}: line {error.lineno} column "
                             f"{error.colno})") from None
    except (ValueError, RecursionError) as error:  # e.g. an integer of more digits than Python converts
        raise UnreadableFile(f"{source} cannot be read as JSON ({type(error).__name__}: {error})") from None


def parse_json(text: str | bytes, *, source: str | Path = "the JSON text", max_depth: int = DEPTH_LIMIT) -> Any:
    """``json.loads`` with a text over ``JSON_LIMIT`` bytes and nesting deeper than ``max_depth`` refused first;
    every failure, running out of memory included, is one line (``UnreadableFile``, a ``ValueError``)."""
    _check_json_size(len(text), source)
    try:
        return _parse(text, source, max_depth)
    except MemoryError:
        raise UnreadableFile(f"{source}: not enough memory to parse its {_size(len(text))} of JSON: free memory "
                             "or raise the process's memory limit") from None


def read_json(path: str | Path, *, max_bytes: int = JSON_LIMIT, max_depth: int = DEPTH_LIMIT,
              follow_links: bool = False) -> Any:
    """The JSON file ``path``, read by ``read_bytes`` (a regular file of at most ``max_bytes`` and at most
    ``JSON_LIMIT``, refused by its size before it is read; no final link unless ``follow_links``) and parsed by
    ``parse_json`` (nesting at most ``max_depth``)."""
    return parse_json(read_bytes(path, max_bytes=min(max_bytes, JSON_LIMIT), follow_links=follow_links),
                      source=path, max_depth=max_depth)


def _open_log(path: Path):
    """``path`` opened to read and append (created if missing), never through a final symbolic link."""
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                             0o666)
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        raise NotRegularFile(path, "a symbolic link") from None
    info = os.fstat(descriptor)
    if not stat.S_ISREG(info.st_mode):
        os.close(descriptor)
        raise NotRegularFile(path, _kind(info.st_mode))
    return os.fdopen(descriptor, "ab+")


def append_line(path: str | Path, line: str) -> bool:
    """Append one newline-terminated ``line`` and fsync it; the result-log primitive of resumable runs.

    A kill during a write leaves at most one cut-short last line. Before appending, such a line is
    removed (returns True) so the new record starts on a line of its own; a complete last record that
    only lacks its newline is kept. One writer at a time. A symbolic link at ``path`` is refused.
    """
    if not line.endswith("\n"):
        raise ValueError("append_line needs a newline-terminated line")
    path = check_names(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _open_log(path) as handle:
        dropped = _repair_tail(handle)
        handle.write(line.encode("utf-8"))
        handle.flush()
        os.fsync(handle.fileno())
    return dropped


def repair_last_line(path: str | Path) -> bool:
    """Apply ``append_line``'s torn-line rule to ``path`` without appending: True if a line was dropped."""
    with _open_log(Path(path)) as handle:
        dropped = _repair_tail(handle)
        handle.flush()
        os.fsync(handle.fileno())
    return dropped


def _repair_tail(handle: Any) -> bool:
    """Make the file end at a line boundary: keep a complete last JSON record, drop a cut-short one."""
    size = handle.seek(0, os.SEEK_END)
    if size == 0:
        return False
    handle.seek(size - 1)
    if handle.read(1) == b"\n":
        return False
    start = _last_line_start(handle, size)
    handle.seek(start)
    try:
        json.loads(handle.read().decode("utf-8"))
    except ValueError:
        handle.truncate(start)
        return True
    handle.seek(0, os.SEEK_END)
    handle.write(b"\n")
    return False


def _last_line_start(handle: Any, size: int, chunk: int = 1 << 16) -> int:
    """Offset just after the last newline (0 if none), reading backwards in chunks."""
    end = size
    while end > 0:
        begin = max(0, end - chunk)
        handle.seek(begin)
        newline = handle.read(end - begin).rfind(b"\n")
        if newline >= 0:
            return begin + newline + 1
        end = begin
    return 0
