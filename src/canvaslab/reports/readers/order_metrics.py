"""Reader of the commit-order study's ``order_metrics.json`` and ``traces.jsonl``.

Key names follow the file as written: ``block_tau`` may be a bin-level or (older files) a token-level
measure and ``token_block_tau`` may be present or not; the view lists whichever curves exist. Traces are
only read for the few generations the raster shows (``representative_traces``), one pass over the file.
"""

from __future__ import annotations

import os
import stat
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from canvaslab.analysis.order_metrics import measure_generation
from canvaslab.capture.commit_trace import GenerationTrace, read_traces
from canvaslab.errors import CanvaslabError
from canvaslab.io import MiB, read_json
from canvaslab.reports.readers import RESULT_LIMIT, is_file, too_many

STUDY = "commit_order"
FILE = "order_metrics.json"
TRACES_FILE = "traces.jsonl"
# What the report draws at most: real studies have a handful of regimes, 5 bin sizes, 3 reliability bins and
# hundreds to a few thousand generations (traces of tens of MB).
MAX_REGIMES = 64
MAX_POINTS = 4_096  # per curve (bin sizes, reliability bins)
MAX_GENERATIONS = 65_536
TRACES_LIMIT = 2_048 * MiB
# Block-tau curves the report draws, by key in a regime's summary, with their legend names.
BLOCK_CURVES = {"block_tau": "block τ_b (bins)", "token_block_tau": "token-level block τ_b",
                "control_block_tau": "block-sequential control (bins)",
                "control_token_block_tau": "block-sequential control (token-level)"}


@dataclass
class OrderStudy:
    source: Path
    metrics: dict[str, Any]
    traces_path: Path | None
    notes: list[str] = field(default_factory=list)

    @property
    def environment(self) -> dict[str, Any]:
        return self.metrics.get("environment", {})

    @property
    def regimes(self) -> dict[str, dict[str, Any]]:
        return self.metrics.get("regimes", {})

    def block_curves(self, regime: str) -> dict[str, dict[int, float]]:
        """``{legend: {bin size: value}}`` for every block-tau curve the file has (nulls left out)."""
        summary = self.regimes[regime]
        curves = {}
        for key, label in BLOCK_CURVES.items():
            values = summary.get(key)
            if isinstance(values, dict):
                curves[label] = {int(b): v for b, v in values.items() if v is not None}
        return curves


def find(folder: Path) -> Path | None:
    return folder / FILE if folder.is_dir() and is_file(folder / FILE) else None


def _check_sizes(source: Path, metrics: dict[str, Any]) -> None:
    regimes = metrics.get("regimes", {})
    too_many(source, "regimes", len(regimes), MAX_REGIMES)
    for summary in regimes.values():
        for key in (*BLOCK_CURVES, "reliability"):
            too_many(source, f"points in one regime's {key}", len(summary.get(key) or ()), MAX_POINTS)


def _traces(path: Path) -> Path | None:
    """``traces.jsonl`` if it is there: a regular file (no link, FIFO or device) of at most ``TRACES_LIMIT``."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        raise CanvaslabError(f"{path} is not a regular file (a link, a folder or a special file): the report reads "
                             "only the traces file itself; put it there, or remove it")
    if info.st_size > TRACES_LIMIT:
        raise CanvaslabError(f"{path} is {info.st_size / MiB:,.0f} MiB; the report reads at most "
                             f"{TRACES_LIMIT / MiB:,.0f} MiB of traces, far more than canvaslab writes")
    lines = 0
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(descriptor, "rb") as handle:  # one generation a line: counted before any is measured
        while chunk := handle.read(16 * MiB):
            lines += chunk.count(b"\n")
    too_many(path, "generations", lines, MAX_GENERATIONS)
    return path


def read(folder: Path) -> OrderStudy:
    metrics = read_json(folder / FILE, max_bytes=RESULT_LIMIT)
    _check_sizes(folder / FILE, metrics)
    traces = _traces(folder / TRACES_FILE)
    notes = [] if traces else ["no traces.jsonl beside order_metrics.json: commit rasters need the traces"]
    return OrderStudy(source=folder / FILE, metrics=metrics, traces_path=traces, notes=notes)


def representative_traces(study: OrderStudy, per_regime: int = 2) -> dict[str, list[tuple[GenerationTrace, Any]]]:
    """Per regime, the generations whose tau_b is nearest the regime's median (ties: file order), with
    their measures. Only their ids and tau values are kept while scanning; a second pass reads the few traces."""
    if study.traces_path is None:
        return {}
    taus: dict[str, list[tuple[str, float]]] = {}
    for trace in read_traces(study.traces_path):
        tau = measure_generation(trace).tau_b
        taus.setdefault(trace.regime, []).append((trace.generation_id, float("nan") if tau is None else tau))
    chosen = set()
    for regime, values in taus.items():
        defined = [tau for _, tau in values if tau == tau]
        median = statistics.median(defined) if defined else 0.0
        ranked = sorted(values, key=lambda item: abs(item[1] - median) if item[1] == item[1] else float("inf"))
        chosen.update(generation for generation, _ in ranked[:per_regime])
    picked: dict[str, list[tuple[GenerationTrace, Any]]] = {}
    for trace in read_traces(study.traces_path):
        if trace.generation_id in chosen:
            picked.setdefault(trace.regime, []).append((trace, measure_generation(trace)))
    return picked
