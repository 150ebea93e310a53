"""Result files: written atomically, so an interrupted run never leaves a half-written file behind."""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator


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


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_writer(path: str | Path, *, binary: bool = False) -> Iterator[IO]:
    """An open temporary file beside ``path``, renamed over it once the block ends without an error.

    The one way canvaslab writes a result file (JSON, text, ``.npy``, Parquet, the corpus): a reader
    sees the old file or the complete new one, never half of it. The data is fsynced before the rename,
    and the file gets the mode ``open`` would give it (0666 less the umask), not mkstemp's private 0600.
    On an error the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (``atomic_writer``)."""
    with atomic_writer(path) as handle:
        handle.write(text)
    return Path(path)


def write_json_atomic(path: str | Path, payload: Any) -> Path:
    """Write ``payload`` as indented JSON, atomically."""
    text = json.dumps(_finite(payload), indent=2, default=_json_default, allow_nan=False)
    return write_text_atomic(path, text + "\n")


def read_json(path: str | Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def append_line(path: str | Path, line: str) -> bool:
    """Append one newline-terminated ``line`` and fsync it; the result-log primitive of resumable runs.

    A kill during a write leaves at most one cut-short last line. Before appending, such a line is
    removed (returns True) so the new record starts on a line of its own; a complete last record that
    only lacks its newline is kept. One writer at a time.
    """
    if not line.endswith("\n"):
        raise ValueError("append_line needs a newline-terminated line")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab+") as handle:
        dropped = _repair_tail(handle)
        handle.write(line.encode("utf-8"))
        handle.flush()
        os.fsync(handle.fileno())
    return dropped


def repair_last_line(path: str | Path) -> bool:
    """Apply ``append_line``'s torn-line rule to ``path`` without appending: True if a line was dropped."""
    with Path(path).open("ab+") as handle:
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
