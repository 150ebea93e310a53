"""Reader of the op scan's ``op_scan.json`` (``canvaslab op-scan --out DIR``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from canvaslab.io import read_json

STUDY = "op_scan"
FILE = "op_scan.json"


@dataclass
class OpScan:
    source: Path
    environment: dict[str, Any]
    scans: list[dict[str, Any]]  # per mode: {"mode", "batch_sizes", "ops": {name: {"shape", "classes", "invariant"}}}


def find(folder: Path) -> Path | None:
    if folder.is_file():
        try:
            data = read_json(folder)
        except (OSError, ValueError):
            return None
        return folder if isinstance(data, dict) and isinstance(data.get("scans"), list) else None
    return folder / FILE if (folder / FILE).is_file() else None


def read(folder: Path) -> OpScan:
    source = find(folder)
    data = read_json(source)
    return OpScan(source=source, environment=data.get("environment", {}), scans=data.get("scans", []))
