"""The batch-size study's summary, computed from its stored prompt records alone (no model needed).

A prompt record (``canvaslab.studies.batch_size``) holds its batched runs and the signature of every batch
size's run, B=1 included; the first prompt's record also holds the repeat control. From them: the classes
of batch sizes per prompt and study-wide (``batch_classes``), and the counts of ``summary``.
"""

from __future__ import annotations

from typing import Any

from canvaslab.analysis.batch_classes import common_classes, equivalence_classes


def summarize(runs: list[dict], classes: list[list[int]], repeat_identical: bool) -> dict[str, Any]:
    return {
        "runs": len(runs),
        "diverged": sum(r["diverged"] for r in runs),
        "text_changed": sum(r["text_changed"] for r in runs),
        "stop_changed": sum(r["stop_changed"] for r in runs),
        "passes_total": sum(r["passes_total"] for r in runs),
        "passes_matching": sum(r["passes_matching"] for r in runs),
        "bytes_compared": sum(r["bytes_compared"] for r in runs),
        "equivalence_classes": classes,
        "repeat_control_identical": repeat_identical,
    }


def batch_study_summary(prompt_records: list[dict[str, Any]], repeat: dict[str, Any] | None) -> dict[str, Any]:
    """``runs``, ``equivalence_classes_per_prompt`` and ``summary`` over the records (in plan order)."""
    runs = [run for record in prompt_records for run in record["runs"]]
    per_prompt = {r["prompt_id"]: equivalence_classes({int(b): s for b, s in r["signatures"].items()})
                  for r in prompt_records}
    classes = common_classes(list(per_prompt.values()))
    return {"runs": runs, "equivalence_classes_per_prompt": per_prompt,
            "summary": summarize(runs, classes, bool(repeat and repeat["identical"]))}
