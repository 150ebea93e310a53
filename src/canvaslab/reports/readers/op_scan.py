"""Reader of the op scan's ``op_scan.json`` (``canvaslab op-scan --out DIR``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from canvaslab.choices import MAX_BATCH
from canvaslab.io import read_json
from canvaslab.reports.readers import RESULT_LIMIT, environment_of, is_file, too_many

STUDY = "op_scan"
FILE = "op_scan.json"
# What the report draws at most: a real scan has 2 or 3 modes, about 20 ops and 8 batch sizes (at most MAX_BATCH).
MAX_SCANS = 16
MAX_OPS = 1_024  # per scan
MAX_BATCH_SIZES = MAX_BATCH  # per scan
MAX_CELLS = 131_072  # ops x batch sizes, over all scans: every cell is drawn


@dataclass
class OpScan:
    source: Path
    environment: dict[str, Any]
    scans: list[dict[str, Any]]  # per mode: {"mode", "batch_sizes", "ops": {name: {"shape", "classes", "invariant"}}}


def find(folder: Path) -> Path | None:
    if folder.is_file():
        try:
            data = read_json(folder, max_bytes=RESULT_LIMIT, follow_links=True)
        except (OSError, ValueError):
            return None
        return folder if isinstance(data, dict) and isinstance(data.get("scans"), list) else None
    return folder / FILE if is_file(folder / FILE) else None


def _check_sizes(source: Path, scans: list[dict[str, Any]]) -> None:
    too_many(source, "scans", len(scans), MAX_SCANS)
    cells = 0
    for scan in scans:
        ops, sizes = len(scan.get("ops", {})), len(scan.get("batch_sizes", []))
        too_many(source, "ops in one scan", ops, MAX_OPS)
        too_many(source, "batch sizes in one scan", sizes, MAX_BATCH_SIZES)
        cells += ops * sizes
    too_many(source, "op x batch size cells", cells, MAX_CELLS)


def read(folder: Path) -> OpScan:
    source = find(folder)
    data = read_json(source, max_bytes=RESULT_LIMIT, follow_links=source == folder)
    scans = data.get("scans", [])
    _check_sizes(source, scans)
    return OpScan(source=source, environment=environment_of(data), scans=scans)
