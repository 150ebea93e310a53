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

import numpy as np

from canvaslab.analysis import validity
from canvaslab.analysis.tost import paired_equivalence


def _mean_of_defined(values: list[float | None]) -> float | None:
    defined = [value for value in values if value is not None]
    return fmean(defined) if defined else None


def first_pass_condition_outcomes(observation: dict[str, Any]) -> dict[str, float | None]:
    """A /3 condition's outcomes, from its first pass (``observation["first_pass"]``)."""
    measured = observation["first_pass"]
    return {
        "planted_logprob_boost": fmean(measured["boost"]),
        "neighbour_kl": _mean_of_defined(measured["neighbour_kl"]),
        "first_pass_keeps": fmean(float(p == t) for p, t in zip(observation["predictions"][0], observation["planted"])),
        "first_entropy": fmean(observation["first_entropy"]),
    }


def condition_outcomes(observation: dict[str, Any], baseline: dict[str, Any], budget: int) -> dict[str, float]:
    """One condition's outcomes. ``observation``/``baseline``: ``Observation.to_record()`` dicts."""
    if "first_pass" in observation:
        return first_pass_condition_outcomes(observation)
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
    """``a - b`` for ``outcome`` in every cell where both classes have finished (and the outcome is defined)."""
    return [cell[a][outcome] - cell[b][outcome] for cell in cells.values()
            if a in cell and b in cell and cell[a][outcome] is not None and cell[b][outcome] is not None]


def prompt_of(cell_id: str) -> str:
    """The prompt id of a cell id ``<prompt>/s<seed>/b<budget>/n<count>/<position>`` (prompt ids may hold '/')."""
    return cell_id.rsplit("/", 4)[0]


def per_prompt_differences(cells: dict[str, dict[str, dict[str, float]]], a: str, b: str,
                           outcome: str) -> dict[str, float]:
    """Prompt -> the mean over its cells of ``a - b``: the unit of analysis of /3 plans."""
    by_prompt: dict[str, list[float]] = defaultdict(list)
    for cell_id, cell in cells.items():
        if a in cell and b in cell and cell[a][outcome] is not None and cell[b][outcome] is not None:
            by_prompt[prompt_of(cell_id)].append(cell[a][outcome] - cell[b][outcome])
    return {prompt: fmean(values) for prompt, values in sorted(by_prompt.items())}


def noise_study_effects(records: list[dict[str, Any]], analysis: dict[str, Any], outcomes: list[str],
                        unit: str = "cell", min_units: int = 2) -> list[dict[str, Any]]:
    """One entry per (comparison, outcome): the paired difference, its CI, TOST p-value and verdict.

    ``unit``: ``cell`` (each matched cell is a pair; /1 and /2 plans) or ``prompt`` (each prompt's mean over its
    cells is one pair; /3 plans), with ``min_units`` pairs needed for a test."""
    cells = matched_cells(records)
    effects = []
    for a, b in analysis["comparisons"]:
        for outcome in outcomes:
            if unit == "prompt":
                differences = list(per_prompt_differences(cells, a, b, outcome).values())
            else:
                differences = paired_differences(cells, a, b, outcome)
            test = paired_equivalence(differences, analysis["margins"][outcome], alpha=analysis["alpha"],
                                      ci_level=analysis["ci_level"])
            if len(differences) < min_units:  # no interval from too few independent units
                test.update(verdict="insufficient data", ci=None, p_lower=None, p_upper=None, tost_p=None,
                            p_two_sided=None)
            effect = {"comparison": f"{a} - {b}", "outcome": outcome,
                      "primary": outcome == analysis["primary_outcome"], **test}
            if unit != "cell":
                effect["unit"] = unit
            effect["flags"] = validity.effect_flags(effect, "pair" if unit == "cell" else unit, analysis["alpha"])
            effects.append(effect)
    return effects


FIRST_PASS_ANSWERS = {
    "yes": "unused tokens were read less as content than both ordinary controls, as a mask symbol would be",
    "no": "unused tokens were not read less as content than ordinary tokens",
    "like rare tokens": "unused tokens differed from random ordinary tokens but not from rare ones: their "
                        "frequency, not a mask role, sets them apart",
    "between the controls": "unused tokens differed from both controls in opposite directions",
    "inconclusive": "the primary outcome's comparisons did not all reach a verdict",
}


def _direction(effect: dict[str, Any]) -> str:
    """``equivalent`` (TOST), ``lower``/``higher`` (the confidence interval wholly beyond -margin/+margin: a
    difference of at least the smallest effect of interest), or ``undecided``."""
    if effect["verdict"] == "equivalent":
        return "equivalent"
    ci, margin = effect.get("ci"), effect.get("margin")
    if effect["verdict"] == "different" and ci is not None and margin is not None:
        if ci[1] < -margin:
            return "lower"
        if ci[0] > margin:
            return "higher"
    return "undecided"


def first_pass_conclusion(effects: list[dict[str, Any]], primary_outcome: str) -> dict[str, Any]:
    """The /3 decision table (first_pass.DECISION_RULE) on the primary outcome's two comparisons."""
    primary = {e["comparison"]: e for e in effects if e["outcome"] == primary_outcome}
    random_, rare = (_direction(primary[name]) if name in primary else "undecided"
                     for name in ("unused - random", "unused - rare"))
    if "undecided" in (random_, rare):
        answer = "inconclusive"
    elif "higher" in (random_, rare):
        answer = "between the controls" if {random_, rare} == {"higher", "lower"} else "no"
    elif (random_, rare) == ("lower", "lower"):
        answer = "yes"
    elif (random_, rare) == ("lower", "equivalent"):
        answer = "like rare tokens"
    else:  # equivalent to both, or equivalent to random and lower than rare
        answer = "no"
    return {"answer": answer, "primary_outcome": primary_outcome,
            "verdicts": {name: e["verdict"] for name, e in primary.items()},
            "directions": {"unused - random": random_, "unused - rare": rare}, "text": FIRST_PASS_ANSWERS[answer],
            "flags": {name: e["flags"] for name, e in primary.items() if e.get("flags")}}


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


# ---------------------------------------------------------------- the frequency-graded design (/4)

DIRECTION_SIGNS = {"equivalent": "=", "lower": "<", "higher": ">", "undecided": "?"}


def arm_of(record: dict[str, Any]) -> str:
    """The arm of a /4 condition, from its cell id ``<prompt>/s<seed>/b<budget>/<arm>/n<count>``."""
    return record["cell_id"].rsplit("/", 2)[1]


def graded_effects(arms: dict[str, list[dict[str, Any]]], analysis: dict[str, Any], outcomes: list[str],
                   min_units: int) -> list[dict[str, Any]]:
    """``noise_study_effects`` per prompt within each arm, every effect naming its arm."""
    return [{"arm": arm, **effect} for arm, records in arms.items()
            for effect in noise_study_effects(records, analysis, outcomes, unit="prompt", min_units=min_units)]


def graded_conclusion(effects: list[dict[str, Any]], primary_outcome: str) -> dict[str, Any]:
    """Per arm and stratum, where unused tokens stand on the primary outcome: equivalent (TOST), lower or higher
    (interval wholly beyond the margin) or undecided, with the validity flags beside each."""
    strata: dict[str, dict[str, Any]] = defaultdict(dict)
    for effect in effects:
        if effect["outcome"] != primary_outcome:
            continue
        stratum = effect["comparison"].split(" - ", 1)[1]
        strata[effect["arm"]][stratum] = {"direction": _direction(effect), "verdict": effect["verdict"],
                                          "mean_difference": effect["mean_difference"], "ci": effect["ci"],
                                          "prompts": effect["n_pairs"], "flags": effect["flags"]}
    text = "; ".join(f"{arm}: " + ", ".join(f"{DIRECTION_SIGNS[s['direction']]} {name}" for name, s in found.items())
                     for arm, found in strata.items())
    return {"answer": "per stratum", "primary_outcome": primary_outcome, "per_stratum": dict(strata),
            "text": f"unused tokens against each frequency stratum ({primary_outcome}; = equivalent, < lower, "
                    f"> higher, ? undecided): {text}",
            "flags": {f"{arm}: unused - {name}": s["flags"] for arm, found in strata.items()
                      for name, s in found.items() if s["flags"]}}


def outcome_agreement(first: list[dict[str, Any]], second: list[dict[str, Any]],
                      outcomes: list[str]) -> dict[str, Any]:
    """Per condition, how far two runs of one plan (e.g. two devices) differ on each outcome: over the conditions
    both hold, the sd, mean and largest absolute difference, overall and per token class (and arm, where the
    cell id names one). Exact agreement counts are given too: equal to the last bit is a finding of its own."""
    by_id = {record["condition_id"]: record for record in second}
    pairs = [(record, by_id[record["condition_id"]]) for record in first if record["condition_id"] in by_id]
    result: dict[str, Any] = {"conditions": len(pairs), "only_first": len(first) - len(pairs),
                              "only_second": len(second) - len(pairs), "outcomes": {}}
    for outcome in outcomes:
        groups: dict[str, list[float]] = defaultdict(list)
        for a, b in pairs:
            if a["outcomes"].get(outcome) is None or b["outcomes"].get(outcome) is None:
                continue
            difference = a["outcomes"][outcome] - b["outcomes"][outcome]
            groups["all"].append(difference)
            groups[_agreement_group(a)].append(difference)
        result["outcomes"][outcome] = {name: _spread(values) for name, values in sorted(groups.items())}
    return result


def _agreement_group(record: dict[str, Any]) -> str:
    cell = record["cell_id"].rsplit("/", 2)
    arm = f"{cell[1]} " if cell[-1].startswith("n") and len(cell) == 3 else ""
    return f"{arm}{record['token_class']}"


def _spread(values: list[float]) -> dict[str, Any]:
    array = np.asarray(values, dtype=np.float64)
    return {"n": int(array.size), "mean": float(array.mean()), "sd": float(array.std(ddof=1)) if array.size > 1 else None,
            "max_abs": float(np.abs(array).max()), "exactly_equal": int((array == 0).sum())}
