"""Reader of the unused-token study's ``noise_study.json`` and ``plan.json`` (``canvaslab noise-study``).

The plan hash is shown as the report recorded it and checked against ``plan.sha256`` when present.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from canvaslab.io import read_json, read_text
from canvaslab.reports.readers import RESULT_LIMIT, environment_of, is_file, too_many

STUDY = "unused_tokens"
FILE = "noise_study.json"
PLAN_FILE = "plan.json"
HASH_FILE = "plan.sha256"
MAX_EFFECTS = 4_096  # a real study reports 12 (2 comparisons x 6 outcomes); each is a row of the forest plot
HASH_LIMIT = 64 * 1024
MAX_PROMPT_POINTS = 20_000  # a /3 report has one per prompt and comparison: a few hundred


@dataclass
class NoiseStudy:
    source: Path
    report: dict[str, Any]
    plan: dict[str, Any] | None
    registered_hash: str | None  # plan.sha256's hash, None if the folder has none

    @property
    def environment(self) -> dict[str, Any]:
        return environment_of(self.report)

    @property
    def plan_hash_matches(self) -> bool | None:
        return None if self.registered_hash is None else self.registered_hash == self.report.get("plan_hash")


def find(folder: Path) -> Path | None:
    return folder / FILE if folder.is_dir() and is_file(folder / FILE) else None


def read(folder: Path) -> NoiseStudy:
    report = read_json(folder / FILE, max_bytes=RESULT_LIMIT)
    too_many(folder / FILE, "effects", len(report.get("effects", [])), MAX_EFFECTS)
    per_prompt = report.get("per_prompt") or {}
    if isinstance(per_prompt, dict):  # /3 reports: one point per prompt and comparison in the strip plot
        too_many(folder / FILE, "per-prompt differences",
                 sum(len(v) for v in per_prompt.values() if isinstance(v, dict)), MAX_PROMPT_POINTS)
    plan = read_json(folder / PLAN_FILE, max_bytes=RESULT_LIMIT) if os.path.lexists(folder / PLAN_FILE) else None
    registered = (read_text(folder / HASH_FILE, max_bytes=HASH_LIMIT).split() or [None])[0] \
        if os.path.lexists(folder / HASH_FILE) else None
    return NoiseStudy(source=folder / FILE, report=report, plan=plan, registered_hash=registered)
