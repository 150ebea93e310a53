"""Reader of the commit-order study's ``order_metrics.json`` and ``traces.jsonl``.

Key names follow the file as written: ``block_tau`` may be a bin-level or (older files) a token-level
measure and ``token_block_tau`` may be present or not; the view lists whichever curves exist. Traces are
only read for the few generations the raster shows (``representative_traces``), one pass over the file.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from canvaslab.analysis.order_metrics import measure_generation
from canvaslab.io import read_json
from canvaslab.capture.commit_trace import GenerationTrace, read_traces

STUDY = "commit_order"
FILE = "order_metrics.json"
TRACES_FILE = "traces.jsonl"
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
    return folder / FILE if folder.is_dir() and (folder / FILE).is_file() else None


def read(folder: Path) -> OrderStudy:
    traces = folder / TRACES_FILE
    notes = [] if traces.is_file() else ["no traces.jsonl beside order_metrics.json: commit rasters need the traces"]
    return OrderStudy(source=folder / FILE, metrics=read_json(folder / FILE),
                      traces_path=traces if traces.is_file() else None, notes=notes)


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
