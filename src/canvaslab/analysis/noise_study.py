"""The noise study's measures and effects, computed from its results lines (no model needed).

``condition_outcomes`` turns one condition's observation and its matched no-plant baseline into the
plan's outcome measures (position-level ones averaged over the condition's planted positions).
``noise_study_effects`` pairs the conditions of each matched cell (same prompt, seed, budget, count and
position; different token class) and tests each difference of the plan's comparisons for equivalence
(``canvaslab.analysis.tost``). ``conclusion`` applies the plan's decision rule to the primary
outcome. The definitions are the plan's (``canvaslab.studies.unused_tokens.plan.OUTCOMES``).
"""

from __future__ import annotations

from collections import defaultdict
from statistics import fmean
from typing import Any

from canvaslab.analysis.tost import paired_equivalence


def condition_outcomes(observation: dict[str, Any], baseline: dict[str, Any], budget: int) -> dict[str, float]:
    """One condition's outcomes. ``observation``/``baseline``: ``Observation.to_record()`` dicts."""
    planted, positions, tokens = observation["planted"], observation["positions"], observation["tokens"]
    first_predictions = observation["predictions"][0]
    accept = [p if p is not None else budget + 1 for p in observation["first_accept_pass"]]
    base_tokens = baseline["tokens"]
    differing = sum(a != b for a, b in zip(tokens, base_tokens)) + abs(len(tokens) - len(base_tokens))
    return {
        "first_pass_keeps": fmean(float(p == t) for p, t in zip(first_predictions, planted)),
        "final_replaced": fmean(float(tokens[p] != t) for p, t in zip(positions, planted)),
        "first_entropy": fmean(observation["first_entropy"]),
        "first_accept_pass": fmean(accept),
        "text_changed": float(observation["text"] != baseline["text"]),
        "tokens_changed": differing / max(len(tokens), len(base_tokens), 1),
    }


def matched_cells(records: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """``cell_id -> token class -> outcomes`` over the conditions' results lines."""
    cells: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for record in records:
        cells[record["cell_id"]][record["token_class"]] = record["outcomes"]
    return dict(sorted(cells.items()))


def paired_differences(cells: dict[str, dict[str, dict[str, float]]], a: str, b: str, outcome: str) -> list[float]:
    """``a - b`` for ``outcome`` in every cell where both classes have finished."""
    return [cell[a][outcome] - cell[b][outcome] for cell in cells.values() if a in cell and b in cell]


def noise_study_effects(records: list[dict[str, Any]], analysis: dict[str, Any],
                        outcomes: list[str]) -> list[dict[str, Any]]:
    """One entry per (comparison, outcome): the paired difference, its CI, TOST p-value and verdict."""
    cells = matched_cells(records)
    effects = []
    for a, b in analysis["comparisons"]:
        for outcome in outcomes:
            test = paired_equivalence(paired_differences(cells, a, b, outcome), analysis["margins"][outcome],
                                      alpha=analysis["alpha"], ci_level=analysis["ci_level"])
            effects.append({"comparison": f"{a} - {b}", "outcome": outcome,
                            "primary": outcome == analysis["primary_outcome"], **test})
    return effects


def class_means(records: list[dict[str, Any]], outcomes: list[str]) -> dict[str, dict[str, Any]]:
    """Per token class: conditions finished and the mean of every outcome (context for the differences)."""
    by_class: dict[str, list[dict[str, float]]] = defaultdict(list)
    for record in records:
        by_class[record["token_class"]].append(record["outcomes"])
    return {cls: {"conditions": len(rows), **{o: fmean(r[o] for r in rows) for o in outcomes}}
            for cls, rows in sorted(by_class.items())}


def conclusion(effects: list[dict[str, Any]], primary_outcome: str) -> dict[str, Any]:
    """The plan's decision rule on the primary outcome: answer ``no``, ``yes`` or ``inconclusive``."""
    primary = [e for e in effects if e["outcome"] == primary_outcome]
    verdicts = [e["verdict"] for e in primary]
    signs = {e["mean_difference"] > 0 for e in primary if e["mean_difference"] is not None}
    if verdicts and all(v == "equivalent" for v in verdicts):
        answer, text = "no", "unused tokens were equivalent to every control on the primary outcome"
    elif verdicts and all(v == "different" for v in verdicts) and len(signs) == 1:
        answer, text = "yes", "unused tokens differed from every control on the primary outcome, in the same direction"
    else:
        answer, text = "inconclusive", "the primary outcome was neither equivalent nor consistently different"
    return {"answer": answer, "primary_outcome": primary_outcome,
            "verdicts": {e["comparison"]: e["verdict"] for e in primary}, "text": text}
