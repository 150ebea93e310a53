"""Reader of the batch-size study's ``batch_study.json`` (``canvaslab batch-study --out DIR``).

Folders written before the study recorded row 0's per-pass canvas (``canvas_path``) or the per-pass
spread (``spread_per_pass``) still read: ``notes`` says what is missing, and the report shows the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from canvaslab.choices import MAX_BATCH
from canvaslab.io import read_json
from canvaslab.reports.readers import RESULT_LIMIT, environment_of, is_file, too_many

STUDY = "batch_size"
FILE = "batch_study.json"
# What the report draws at most (canvaslab runs batch sizes up to MAX_BATCH; real studies have 16 prompts or a
# few hundred, canvases of 256 positions and a few hundred passes).
MAX_BATCH_SIZES = MAX_BATCH  # per prompt
MAX_PROMPTS = 65_536
MAX_RUNS = 65_536
MAX_PASSES = 4_096  # per denoising path or spread
MAX_POSITIONS = 65_536  # per canvas


@dataclass
class CanvasPass:
    """Row 0's canvas after one accept call: tokens, accepted mask and per-position entropy (or None)."""

    canvas: int
    step: int
    tokens: list[int]
    accepted: list[bool]
    entropy: list[float] | None


@dataclass
class BatchRun:
    prompt_id: str
    batch_size: int
    record: dict[str, Any]  # the study's run record as written
    path: list[CanvasPass] | None  # row 0's denoising path, None in folders that did not record it
    spread: list[dict[str, Any]] | None  # per decoder pass: positions differing per layer

    @property
    def stop_passes(self) -> list[int | None]:
        return self.record.get("run", {}).get("stop_passes", [])


@dataclass
class BatchStudy:
    source: Path
    environment: dict[str, Any]
    config: dict[str, Any]
    summary: dict[str, Any]
    runs: list[BatchRun]
    prompt_ids: list[str]
    classes_per_prompt: dict[str, list[list[int]]]
    reference_paths: dict[str, list[CanvasPass]]
    reference_stops: dict[str, list[int | None]]
    token_text: dict[int, str]
    notes: list[str] = field(default_factory=list)

    def runs_of(self, prompt_id: str) -> list[BatchRun]:
        return sorted((r for r in self.runs if r.prompt_id == prompt_id), key=lambda r: r.batch_size)


def find(folder: Path) -> Path | None:
    if folder.is_file():
        return folder if _looks_like(folder) else None
    return folder / FILE if is_file(folder / FILE) else None


def _looks_like(path: Path) -> bool:
    try:
        data = read_json(path, max_bytes=RESULT_LIMIT, follow_links=True)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("study") == STUDY


def parse_path(record: dict[str, Any] | None) -> list[CanvasPass] | None:
    if not record or not record.get("passes"):
        return None
    return [CanvasPass(p["canvas"], p["step"], list(p["tokens"]), [c == "1" for c in p["accepted"]], p.get("entropy"))
            for p in record["passes"]]


def _check_sizes(source: Path, data: dict[str, Any]) -> None:
    """Refuse, before anything is built, counts far above what canvaslab writes."""
    runs = data.get("runs", [])
    sizes: dict[str, set] = {}
    for run in runs:
        sizes.setdefault(str(run.get("prompt_id")), set()).add(str(run.get("batch_size")))
    too_many(source, "batch sizes for one prompt", max(map(len, sizes.values()), default=0), MAX_BATCH_SIZES)
    too_many(source, "runs", len(runs), MAX_RUNS)
    too_many(source, "prompts", len(data.get("config", {}).get("prompts", [])), MAX_PROMPTS)
    paths = [run.get("canvas_path") for run in runs] + list(data.get("reference_canvas_paths", {}).values())
    for path in paths:
        passes = (path or {}).get("passes") or []
        too_many(source, "passes in one denoising path", len(passes), MAX_PASSES)
        too_many(source, "positions in one canvas", max((len(p.get("tokens") or ()) for p in passes), default=0),
                 MAX_POSITIONS)
    too_many(source, "passes in one spread", max((len(run.get("spread_per_pass") or ()) for run in runs), default=0),
             MAX_PASSES)


def read(folder: Path) -> BatchStudy:
    source = find(folder)
    data = read_json(source, max_bytes=RESULT_LIMIT, follow_links=source == folder)
    _check_sizes(source, data)
    runs = [BatchRun(r["prompt_id"], int(r["batch_size"]), r, parse_path(r.get("canvas_path")), r.get("spread_per_pass"))
            for r in data.get("runs", [])]
    references = {pid: parse_path(path) for pid, path in data.get("reference_canvas_paths", {}).items()}
    stops = {}
    for run in runs:
        stops.setdefault(run.prompt_id, run.record.get("reference", {}).get("stop_passes", []))
    prompt_ids = [p.get("prompt_id") for p in data.get("config", {}).get("prompts", [])] or sorted(stops)
    notes = []
    if not any(run.path for run in runs) or not any(references.values()):
        notes.append("this study did not record row 0's canvas per pass (written before canvaslab recorded it): "
                     "rerun the study to see the denoising path")
    if not any(run.spread for run in runs):
        notes.append("this study did not record the spread per pass: the layer x pass heatmap needs a rerun")
    return BatchStudy(
        source=source, environment=environment_of(data), config=data.get("config", {}),
        summary=data.get("summary", {}), runs=runs, prompt_ids=[p for p in prompt_ids if p],
        classes_per_prompt=data.get("equivalence_classes_per_prompt", {}),
        reference_paths={pid: path for pid, path in references.items() if path},
        reference_stops=stops, token_text={int(k): v for k, v in data.get("canvas_token_text", {}).items()},
        notes=notes,
    )
