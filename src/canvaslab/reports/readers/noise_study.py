"""Reader of the unused-token study's ``noise_study.json`` and ``plan.json`` (``canvaslab noise-study``).

The plan hash is shown as the report recorded it and checked against ``plan.sha256`` when present.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from canvaslab.io import read_json

STUDY = "unused_tokens"
FILE = "noise_study.json"
PLAN_FILE = "plan.json"
HASH_FILE = "plan.sha256"


@dataclass
class NoiseStudy:
    source: Path
    report: dict[str, Any]
    plan: dict[str, Any] | None
    registered_hash: str | None  # plan.sha256's hash, None if the folder has none

    @property
    def environment(self) -> dict[str, Any]:
        return self.report.get("environment", {})

    @property
    def plan_hash_matches(self) -> bool | None:
        return None if self.registered_hash is None else self.registered_hash == self.report.get("plan_hash")


def find(folder: Path) -> Path | None:
    return folder / FILE if folder.is_dir() and (folder / FILE).is_file() else None


def read(folder: Path) -> NoiseStudy:
    plan = read_json(folder / PLAN_FILE) if (folder / PLAN_FILE).is_file() else None
    registered = (folder / HASH_FILE).read_text().split()[0] if (folder / HASH_FILE).is_file() else None
    return NoiseStudy(source=folder / FILE, report=read_json(folder / FILE), plan=plan, registered_hash=registered)
