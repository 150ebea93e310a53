"""The noise study's terminal table: one row per (comparison, outcome), the safeguard in the caption. A real study
has 12 effects; past ``MAX_TABLE_ROWS`` the table lists the first ones and its caption counts every verdict
(``noise_study.json`` holds them all).

Names read from the report (comparisons, outcomes, verdicts, fields) are shown with control characters escaped
and never read as markup."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.table import Table

from canvaslab.analysis import validity
from canvaslab.choices import NOISE_CHECK_DESIGNS
from canvaslab.reports.names import plain
from canvaslab.terminal import printable

MAX_TABLE_ROWS = 64


def _number(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def _flags(effect: dict[str, Any]) -> list[str]:
    """The validity flags stored with the effect, or those of the rules for reports written before them."""
    return effect["flags"] if "flags" in effect else validity.effect_flags(effect, effect.get("unit", "pair"))


def _ci(effect: dict[str, Any]) -> str:
    ci = effect["ci"]
    if ci is None or not validity.effect_interval_allowed(effect):
        return "-"
    return f"[{_number(ci[0])}, {_number(ci[1])}]"


def _verdict(effect: dict[str, Any]) -> str:
    return printable(effect["verdict"]) + (" !" if _flags(effect) else "")


def _primary_flagged(effects: list[dict[str, Any]]) -> bool:
    return any(e["primary"] and _flags(e) for e in effects)


def _flags_note(effects: list[dict[str, Any]]) -> str:
    """Each flagged effect's flags, beside the rule's verdict (the verdict column marks them with !)."""
    notes = [f"! {_arm(e)}{e['comparison']}, {e['outcome']}: {'; '.join(_flags(e))}. " for e in effects if _flags(e)]
    return "".join(notes)


def _safeguard_caption(safeguard: dict[str, Any], analysed: str | None) -> str:
    fields = ", ".join(f"{name} {count}" for name, count in safeguard["by_field"].items())
    changed = "token, stop, acceptance, prediction or first-pass measure" if "first_pass" in safeguard["by_field"] \
        else "token, stop, acceptance or prediction"
    # /3 reports say which run was analysed: the batched rows (invariant mode) or each condition alone
    checked = "" if analysed is None else (f" (analysed: each condition's {'batched row' if analysed == 'batched' else 'run alone'}; "
                                           f"checked against its {'run alone' if analysed == 'batched' else 'batched rows'})")
    return (f"batch safeguard{checked}: fired for {safeguard['fired']}/{safeguard['compared']} conditions ({fields}); "
            f"{safeguard['outcome_fields_changed']} with a changed {changed}")


def _arm(effect: dict[str, Any]) -> str:
    return f"{effect['arm']}: " if "arm" in effect else ""


def _row(effect: dict[str, Any]) -> list[str]:
    return [*([printable(effect["arm"])] if "arm" in effect else []), printable(effect["comparison"]), printable(effect["outcome"]) + (" *" if effect["primary"] else ""),
            printable(effect["n_pairs"]), _number(effect["mean_difference"]), _ci(effect), _number(effect["margin"]),
            _number(effect["tost_p"], 3), _verdict(effect)]


def _rows_note(effects: list[dict[str, Any]]) -> str:
    """Where the table lists only the first effects: how many, and the verdicts of all of them."""
    if len(effects) <= MAX_TABLE_ROWS:
        return ""
    verdicts = ", ".join(f"{verdict} {count:,}" for verdict, count in Counter(str(e["verdict"]) for e in effects).items())
    return (f"Listed: the first {MAX_TABLE_ROWS} of {len(effects):,} effects (every one is in noise_study.json); "
            f"verdicts of all {len(effects):,}: {verdicts}. ")


def _check_note(report: dict[str, Any]) -> str:
    """Designs sized to test the machinery answer like studies; say that they are not."""
    design = report.get("design")
    return f" (design {design}: a check of the machinery, not a study)" if design in NOISE_CHECK_DESIGNS else ""


def noise_study_table(report: dict[str, Any]) -> Table:
    conclusion = report["conclusion"]
    table = Table(title=plain(printable(
        f"unused-token noise study, plan {report['plan_hash'][:12]}: {report['conditions_run']}/"
        f"{report['conditions_total']} conditions; unused tokens act as masks? "
        # the decision rule is for the whole design: a partial run's answer is provisional
        f"{conclusion['answer']}{'' if report['complete'] else ' (interim, design incomplete)'}"
        f"{' (a primary verdict is flagged: !)' if _primary_flagged(report['effects']) else ''}"
        f"{_check_note(report)}")))
    columns = (*(("arm",) if "arm" in report["effects"][0] else ()), "comparison", "outcome", "prompts" if report.get("unit") == "prompt" else "pairs", "mean diff", f"{report['effects'][0]['ci_level']:.0%} CI", "margin",
               "TOST p", "verdict")
    rows = [_row(effect) for effect in report["effects"][:MAX_TABLE_ROWS]]
    for index, name in enumerate(columns):
        # Never narrower than the longest cell: a narrow terminal wraps the table, not the numbers.
        table.add_column(name, min_width=max(len(cell) for cell in [name, *(row[index] for row in rows)]))
    for row in rows:
        table.add_row(*map(plain, row))
    answer = f"{conclusion['text']}. " if "per_stratum" in conclusion else ""
    table.caption = plain(printable(f"* primary outcome. {answer}{_flags_note(report['effects'][:MAX_TABLE_ROWS])}"
                                    f"{_rows_note(report['effects'])}"
                                    f"{_safeguard_caption(report['safeguard'], report.get('analysed_run'))}"))
    return table


def _execution_text(side: dict[str, Any]) -> str:
    execution = side.get("execution") or {}
    return f"{execution.get('device_type', '?')}, {execution.get('dtype', '?')}, {execution.get('mode', '?')}"


def agreement_table(agreement: dict[str, Any]) -> Table:
    """Two runs of one plan, condition by condition: one row per outcome and group (all conditions, then per arm
    and token class), the differences' sd, mean and largest absolute value, and how many were exactly equal."""
    table = Table(title=plain(printable(
        f"device agreement, plan {agreement['plan_hash'][:12]}: {agreement['conditions']} conditions in both runs "
        f"({_execution_text(agreement['first'])} minus {_execution_text(agreement['second'])})")))
    for name in ("outcome", "conditions", "n", "mean diff", "sd", "max |diff|", "exactly equal"):
        table.add_column(name)
    for outcome, groups in agreement["outcomes"].items():
        for group, spread in groups.items():
            marked = printable(outcome) + (" *" if outcome == agreement["primary_outcome"] else "")
            table.add_row(*map(plain, [marked, printable(group), str(spread["n"]), _number(spread["mean"]),
                                       _number(spread["sd"]), _number(spread["max_abs"]),
                                       f"{spread['exactly_equal']}/{spread['n']}"]))
    table.caption = plain(printable(
        f"* primary outcome, margin {agreement['margin']}. First run: {agreement['first']['folder']}; second: "
        f"{agreement['second']['folder']}; conditions in one run only: {agreement['only_first']} and "
        f"{agreement['only_second']}"))
    return table
