"""Reader of the commit-order study's ``order_metrics.json`` and its trace files.

Key names follow the file as written: ``block_tau`` may be a bin-level or (older files) a token-level
measure and ``token_block_tau`` may be present or not; the view lists whichever curves exist.

Traces may lie beside the metrics as the study writes them (``traces.jsonl``), compressed
(``traces.jsonl.gz``), or split into parts, plain or compressed (``traces-1.jsonl.gz``, ``traces-2.jsonl.gz``,
...: how results are committed to a repository); every part is read, in natural order (2 before 10). A study
folder from elsewhere is data: each part must be a regular file (no link is followed), read by
``canvaslab.io.read_bytes`` (bounded), and the decompressed bytes, lines and line length are bounded too, so a
gzip bomb is refused in one line, before anything is drawn. Traces are only measured for the few generations
the raster shows (``representative_traces``).
"""

from __future__ import annotations

import gzip
import io
import os
import re
import stat
import statistics
import warnings
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from canvaslab.analysis.order_metrics import measure_generation
from canvaslab.capture.commit_trace import GenerationTrace, TruncatedTraceWarning
from canvaslab.errors import CanvaslabError
from canvaslab.io import MiB, UnreadableFile, parse_json, read_bytes, read_json
from canvaslab.reports.readers import RESULT_LIMIT, environment_of, is_file, too_many

STUDY = "commit_order"
FILE = "order_metrics.json"
TRACES_FILE = "traces.jsonl"
# traces.jsonl, traces.jsonl.gz and parts traces-NAME.jsonl(.gz); hidden temporary files never match.
TRACE_NAME = re.compile(r"traces(?:-[^/]+)?\.jsonl(?:\.gz)?")
# What the report draws at most: real studies have a handful of regimes, 5 bin sizes, 3 reliability bins and
# hundreds to a few thousand generations (traces of tens of MB, a few hundred KB a generation at most).
MAX_REGIMES = 64
MAX_POINTS = 4_096  # per curve (bin sizes, reliability bins)
MAX_GENERATIONS = 65_536  # lines over all trace files
MAX_TRACE_FILES = 4_096
TRACES_LIMIT = 2_048 * MiB  # bytes over all trace files, after decompression
MAX_TRACE_LINE = 64 * MiB  # one generation
_CHUNK = 4 * MiB  # decompressed at a time: the bounds are checked between chunks
# Block-tau curves the report draws, by key in a regime's summary, with their legend names.
BLOCK_CURVES = {"block_tau": "block τ_b (bins)", "token_block_tau": "token-level block τ_b",
                "control_block_tau": "block-sequential control (bins)",
                "control_token_block_tau": "block-sequential control (token-level)"}


@dataclass
class OrderStudy:
    source: Path
    metrics: dict[str, Any]
    trace_files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def environment(self) -> dict[str, Any]:
        return environment_of(self.metrics)

    @property
    def regimes(self) -> dict[str, dict[str, Any]]:
        return self.metrics.get("regimes", {})

    def block_curves(self, regime: str) -> dict[str, dict[int, float]]:
        """``{key: {bin size: value}}`` for every block-tau curve the file has (nulls left out); legend names
        are in ``BLOCK_CURVES``."""
        summary = self.regimes[regime]
        curves = {}
        for key in BLOCK_CURVES:
            values = summary.get(key)
            if isinstance(values, dict):
                curves[key] = {int(b): v for b, v in values.items() if v is not None}
        return curves

    def defined_count(self, regime: str, measure: str) -> int | None:
        """How many of the regime's generations ``measure`` (e.g. ``block_tau_16``) is defined for; None when
        the file does not say how many generations the regime has."""
        summary = self.regimes[regime]
        total = summary.get("n_generations")
        if not isinstance(total, int):
            return None
        undefined = ((summary.get("undefined") or {}).get(measure) or {}).get("n", 0)
        return total - undefined if isinstance(undefined, int) else None

    def sample(self, regime: str, scored: bool = False) -> str:
        """What the regime's numbers rest on, e.g. ``100 generations, 20 prompts`` ("" when the file does not
        say); ``scored``: the generations with a correctness label (what AUROC and accuracy rest on)."""
        summary = self.regimes[regime]
        counts = [("scored generations", summary.get("n_scored") if scored else None),
                  ("generations", summary.get("n_generations")), ("prompts", summary.get("n_prompts"))]
        if counts[0][1] is not None:
            del counts[1]
        return ", ".join(f"{count} {what}" for what, count in counts if count is not None)


def find(folder: Path) -> Path | None:
    return folder / FILE if folder.is_dir() and is_file(folder / FILE) else None


def _check_sizes(source: Path, metrics: dict[str, Any]) -> None:
    regimes = metrics.get("regimes", {})
    too_many(source, "regimes", len(regimes), MAX_REGIMES)
    for summary in regimes.values():
        for key in (*BLOCK_CURVES, "reliability"):
            too_many(source, f"points in one regime's {key}", len(summary.get(key) or ()), MAX_POINTS)


def _natural(name: str) -> list:
    """Sort key putting ``traces-2`` before ``traces-10``."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)]


def trace_files(folder: Path) -> list[Path]:
    """The trace files beside the metrics, in natural order; anything but a regular file under a trace file's
    name (a link, a folder, a FIFO) is refused in one line rather than skipped, so no trace goes unread."""
    names = sorted((name for name in os.listdir(folder) if TRACE_NAME.fullmatch(name)), key=_natural)
    too_many(folder, "trace files", len(names), MAX_TRACE_FILES)
    for name in names:
        if not stat.S_ISREG(os.lstat(folder / name).st_mode):
            raise CanvaslabError(f"{folder / name} is not a regular file (a link, a folder or a special file): the "
                                 "report reads only the traces file itself; put it there, or remove it")
    return [folder / name for name in names]


class _Bounds:
    """Decompressed bytes and lines read so far over all trace files, refused in one line past the limits."""

    def __init__(self) -> None:
        self.bytes = self.lines = 0

    def take(self, path: Path, chunk: bytes) -> bytes:
        self.bytes += len(chunk)
        self.lines += chunk.count(b"\n")
        if self.bytes > TRACES_LIMIT:
            raise CanvaslabError(f"{path}: the trace files hold more than {TRACES_LIMIT / MiB:,.0f} MiB "
                                 "(decompressed); the report reads at most that, far more than canvaslab writes")
        if self.lines > MAX_GENERATIONS:
            raise CanvaslabError(f"{path}: the trace files hold more than {MAX_GENERATIONS:,} generations (lines); the "
                                 "report draws at most that, far more than canvaslab writes")
        return chunk


def _chunks(path: Path, bounds: _Bounds) -> Iterator[bytes]:
    """The file's bytes, decompressed if it is ``.gz``, a chunk at a time, each counted by ``bounds``."""
    data = read_bytes(path, max_bytes=TRACES_LIMIT)  # bounded, refuses a link, a FIFO or a device
    if path.suffix != ".gz":
        for start in range(0, len(data), _CHUNK):
            yield bounds.take(path, data[start:start + _CHUNK])
        return
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
            while chunk := stream.read(_CHUNK):
                yield bounds.take(path, chunk)
    except (OSError, EOFError, zlib.error) as error:
        raise CanvaslabError(f"{path} is not a readable gzip file ({error or type(error).__name__})") from None


def _lines(path: Path, bounds: _Bounds) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, line, ends with a newline) for each non-blank line, each at most ``MAX_TRACE_LINE``."""
    pending, number = b"", 0
    for chunk in _chunks(path, bounds):
        *complete, pending = (pending + chunk).split(b"\n")
        if len(pending) > MAX_TRACE_LINE:
            raise CanvaslabError(f"{path} line {number + len(complete) + 1} is over {MAX_TRACE_LINE / MiB:,.0f} MiB; "
                                 "one generation is far less: the file was not written by canvaslab, or is damaged")
        for line in complete:
            number += 1
            if line.strip():
                yield number, line, True
    if pending.strip():
        yield number + 1, pending, False


def _trace(where: str, line: bytes, complete: bool) -> GenerationTrace | None:
    """The line's generation; None for a cut-short last line (an interrupted append), dropped with a warning."""
    try:
        record = parse_json(line, source=where)
    except UnreadableFile:
        if complete:
            raise
        warnings.warn(f"{where}: dropped an incomplete last line (interrupted write)", TruncatedTraceWarning,
                      stacklevel=2)
        return None
    return GenerationTrace.from_record(record, where)


def iter_traces(paths: Iterable[Path]) -> Iterator[GenerationTrace]:
    """Every generation of the trace files, in order; a generation id seen twice (in one file or across
    parts, e.g. both ``traces.jsonl`` and ``traces.jsonl.gz``) is refused in one line."""
    bounds, first_seen = _Bounds(), {}
    for path in paths:
        for number, line, complete in _lines(path, bounds):
            where = f"{path} line {number}"
            trace = _trace(where, line, complete)
            if trace is None:
                continue
            if trace.generation_id in first_seen:
                raise CanvaslabError(f"{where}: generation_id {trace.generation_id!r} already appears in "
                                     f"{first_seen[trace.generation_id]}: keep one copy of each trace")
            first_seen[trace.generation_id] = where
            yield trace


def _check_trace_bounds(paths: list[Path]) -> None:
    """Read every trace file through the bounds once, so a bomb or an absurd file is refused before any work."""
    bounds = _Bounds()
    for path in paths:
        for _ in _lines(path, bounds):
            pass


def read(folder: Path) -> OrderStudy:
    metrics = read_json(folder / FILE, max_bytes=RESULT_LIMIT)
    _check_sizes(folder / FILE, metrics)
    traces = trace_files(folder)
    _check_trace_bounds(traces)
    notes = [] if traces else [f"no traces ({TRACES_FILE}, {TRACES_FILE}.gz or traces-*.jsonl[.gz]) beside {FILE}: "
                               "commit rasters need the traces"]
    return OrderStudy(source=folder / FILE, metrics=metrics, trace_files=traces, notes=notes)


def representative_traces(study: OrderStudy, per_regime: int = 2) -> dict[str, list[tuple[GenerationTrace, Any]]]:
    """Per regime (in the metrics' order), the generations whose tau_b is nearest the regime's median (ties: file
    order), with their measures. Only their ids and tau values are kept while scanning; a second pass reads the
    few traces."""
    if not study.trace_files:
        return {}
    taus: dict[str, list[tuple[str, float]]] = {}
    for trace in iter_traces(study.trace_files):
        tau = measure_generation(trace).tau_b
        taus.setdefault(trace.regime, []).append((trace.generation_id, float("nan") if tau is None else tau))
    chosen = set()
    for regime, values in taus.items():
        defined = [tau for _, tau in values if tau == tau]
        median = statistics.median(defined) if defined else 0.0
        ranked = sorted(values, key=lambda item: abs(item[1] - median) if item[1] == item[1] else float("inf"))
        chosen.update(generation for generation, _ in ranked[:per_regime])
    picked: dict[str, list[tuple[GenerationTrace, Any]]] = {}
    for trace in iter_traces(study.trace_files):
        if trace.generation_id in chosen:
            picked.setdefault(trace.regime, []).append((trace, measure_generation(trace)))
    listed = {regime: index for index, regime in enumerate(study.regimes)}  # raster rows follow the table
    return dict(sorted(picked.items(), key=lambda item: listed.get(item[0], len(listed))))
