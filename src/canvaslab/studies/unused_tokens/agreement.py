"""Device agreement: two runs of one registered plan (a CPU and a GPU, or two modes), compared condition by condition.

Every analysed record of a run holds the condition's outcomes; two runs of the same plan on identical inputs
should give the same numbers, and how far they do not is the numerics' share of the answer. A difference
per condition larger than the equivalence margin means the device, not the model, could move a verdict. Only
runs of the same registered plan are compared (the hash each store cites); conditions only one run holds are
counted, not compared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from canvaslab.analysis.noise_study import outcome_agreement
from canvaslab.errors import CanvaslabError
from canvaslab.studies.engine.export import store_rows
from canvaslab.studies.unused_tokens.noise_study import NoiseStudy
from canvaslab.studies.unused_tokens.plan import load_plan


def _records(folder: Path) -> list[dict[str, Any]]:
    rows = [row for row in store_rows(folder, NoiseStudy.units_of_plan) if row["failed"] is None]
    return [{key.removeprefix("record."): value for key, value in row.items() if key.startswith("record.")}
            for row in rows]


def _execution(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    return records[0].get("execution") if records else None


def compare_runs(first: str | Path, second: str | Path) -> dict[str, Any]:
    """Per-condition differences of every outcome between the runs in ``first`` and ``second`` (same plan)."""
    first, second = Path(first), Path(second)
    plan, digest = load_plan(first)
    _, other = load_plan(second)
    if digest != other:
        raise CanvaslabError(f"{first} and {second} hold different plans ({digest[:12]}..., {other[:12]}...): only "
                             "runs of one registered plan can be compared condition by condition")
    records = {folder: _records(folder) for folder in (first, second)}
    if not all(records.values()):
        empty = next(folder for folder, found in records.items() if not found)
        raise CanvaslabError(f"{empty} holds no stored conditions: run the plan there first")
    outcomes = [o["name"] for o in plan.outcomes]
    agreement = outcome_agreement(records[first], records[second], outcomes)
    return {"plan_hash": digest, "first": {"folder": str(first), "execution": _execution(records[first])},
            "second": {"folder": str(second), "execution": _execution(records[second])},
            "primary_outcome": plan.analysis.primary_outcome,
            "margin": plan.analysis.margins[plan.analysis.primary_outcome], **agreement}
