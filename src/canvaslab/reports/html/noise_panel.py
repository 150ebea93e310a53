"""The unused-token study's panel: a forest plot of the paired effects against the equivalence margin
(one subplot per outcome, since outcomes have their own scales and margins), the TOST verdict per
outcome, the plan hash and the batch safeguard's counts."""

from __future__ import annotations

import math
from typing import Any

from canvaslab.analysis import validity
from canvaslab.choices import NOISE_CHECK_DESIGNS
from canvaslab.reports.html import figures
from canvaslab.reports.html.markup import column, esc, number, table
from canvaslab.reports.readers.noise_study import NoiseStudy

VERDICT_MARKERS = {"equivalent": "o", "different": "s", "inconclusive": "D", "insufficient data": "x"}
# The figures stay a readable size whatever the report holds; the verdicts table lists every effect.
MAX_FOREST_ROWS = 48  # effects drawn in the forest plot; a real study has 12
MAX_FOREST_OUTCOMES = 8  # its subplots; a real study has 6
MAX_STRIP_ROWS = 24  # comparisons in the per-prompt strip plot; a real study has 2


def effects_by_outcome(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for effect in report.get("effects", []):
        grouped.setdefault(effect["outcome"], []).append(effect)
    return grouped


def _finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number; None for null, NaN, infinity or anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _interval(effect: dict[str, Any]) -> tuple[float, float] | None:
    """The effect's CI when both bounds are finite and hold its mean; None: drawn as "no interval"."""
    mean, ci = _finite(effect.get("mean_difference")), effect.get("ci")
    if mean is None or not isinstance(ci, (list, tuple)) or len(ci) != 2 or not validity.effect_interval_allowed(effect):
        return None
    low, high = _finite(ci[0]), _finite(ci[1])
    return (low, high) if low is not None and high is not None and low <= mean <= high else None


def _drawn(grouped: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """The effects the forest plot draws: at most ``MAX_FOREST_OUTCOMES`` outcomes, the primary first, and
    ``MAX_FOREST_ROWS`` effects in all, shared evenly among them."""
    order = sorted(grouped, key=lambda outcome: not any(e.get("primary") for e in grouped[outcome]))
    order = order[:MAX_FOREST_OUTCOMES]
    rows = max(1, MAX_FOREST_ROWS // len(order))
    return {outcome: grouped[outcome][:rows] for outcome in order}


def _drawn_note(drawn: dict[str, list], grouped: dict[str, list]) -> str:
    shown, total = sum(map(len, drawn.values())), sum(map(len, grouped.values()))
    if shown == total:
        return ""
    return (f"The forest plot draws {shown:,} of the {total:,} effects ({len(drawn)} of {len(grouped):,} outcomes, the "
            f"primary first, at most {max(map(len, drawn.values()))} comparisons each); the table below lists all.")


def _margin_band(ax, margin: Any) -> bool:
    """Shade the equivalence margin; False (nothing drawn) when the margin is not a finite number."""
    margin = _finite(margin)
    if margin is not None:
        ax.axvspan(-margin, margin, color=figures.OKABE_ITO[4], alpha=0.25, label=f"equivalence margin ±{margin:g}")
    return margin is not None


def _comparison(effect: dict[str, Any]) -> str:
    """The comparison's name, with its arm where the design has two (/4: the first pass, or a later canvas)."""
    return f"{effect['arm']}: {effect.get('comparison')}" if "arm" in effect else str(effect.get("comparison"))


def _draw_effect(ax, row: int, effect: dict[str, Any]) -> str:
    """One row: the mean and its CI (a hollow marker without one); returns the row's label, which says
    "no interval" or "no estimate" where the report has none."""
    label, mean, interval = _comparison(effect), _finite(effect.get("mean_difference")), _interval(effect)
    if mean is None:
        return f"{label} (no estimate)"
    colour = figures.OKABE_ITO[0 if effect.get("verdict") == "equivalent" else 5]
    err = None if interval is None else [[mean - interval[0]], [interval[1] - mean]]
    ax.errorbar(mean, row, xerr=err, fmt=VERDICT_MARKERS.get(effect.get("verdict"), "o"), capsize=3, color=colour,
                markerfacecolor=colour if interval else "none")
    return label if interval else f"{label} (no interval)"


def _draw_outcome(ax, outcome: str, effects: list[dict[str, Any]]) -> None:
    banded = _margin_band(ax, effects[0].get("margin"))
    ax.axvline(0, color="grey", linewidth=0.8)
    labels = [_draw_effect(ax, i, effect) for i, effect in enumerate(effects)]
    ax.set_yticks(range(len(effects)), labels, fontsize=7)
    ax.set_ylim(len(effects) - 0.5, -0.5)
    star = " (primary)" if effects[0].get("primary") else ""
    ax.set_title(f"{outcome}{star}{'' if banded else ' (no margin)'}", fontsize=8, loc="left")
    if banded:
        ax.legend(fontsize=6, frameon=False, loc="upper right")


def _forest(study: NoiseStudy, figs: figures.FigureSet, name: str) -> str:
    grouped = effects_by_outcome(study.report)
    if not grouped:
        return ""
    drawn = _drawn(grouped)
    rows = [len(effects) for effects in drawn.values()]
    with figures.style():
        fig, axes = figures.plt.subplots(len(drawn), 1, figsize=(6.4, 0.6 + sum(0.32 * n + 0.55 for n in rows)),
                                         squeeze=False, constrained_layout=True,
                                         gridspec_kw={"height_ratios": [n + 1 for n in rows]})
        for ax, (outcome, effects) in zip(axes[:, 0], drawn.items()):
            _draw_outcome(ax, outcome, effects)
        axes[-1, 0].set_xlabel("paired difference, unused − control (outcome units), 95% CI")
        fig.suptitle("Unused tokens vs controls: paired effects against the margin\n"
                     "(○ equivalent, □ different, ◇ inconclusive; hollow: no interval)")
        note = _drawn_note(drawn, grouped)
        return (f"<p>{esc(note)}</p>" if note else "") + figs.save(
            fig, name, "forest plot of paired effects against the equivalence margin")


def _strip_rows(report: dict[str, Any]) -> dict[str, list[float]]:
    """/3 reports: each comparison's finite per-prompt differences."""
    per_prompt = {k: v for k, v in (report.get("per_prompt") or {}).items() if isinstance(v, dict) and v}
    return {str(comparison): [x for x in map(_finite, values.values()) if x is not None]
            for comparison, values in per_prompt.items()}


def _per_prompt_strip(study: NoiseStudy, figs: figures.FigureSet, name: str) -> str:
    """/3 reports: each prompt's mean difference on the primary outcome, per comparison, against the margin."""
    report = study.report
    every = _strip_rows(report)
    rows = dict(list(every.items())[:MAX_STRIP_ROWS])
    primary = next((e for e in report.get("effects", []) if e.get("primary")), None)
    if not rows or primary is None:
        return ""
    with figures.style():
        fig, ax = figures.plt.subplots(figsize=(6.4, 0.9 + 0.5 * len(rows)), constrained_layout=True)
        banded = _margin_band(ax, primary.get("margin"))
        ax.axvline(0, color="grey", linewidth=0.8)
        for row, points in enumerate(rows.values()):
            # a deterministic jitter: the same page for the same report
            jitter = [row + 0.25 * (((i * 0.618034) % 1) - 0.5) for i in range(len(points))]
            ax.scatter(points, jitter, s=9, alpha=0.6, color=figures.OKABE_ITO[5], linewidths=0)
        ax.set_yticks(range(len(rows)), list(rows), fontsize=7)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlabel(f"{primary['outcome']}: per-prompt mean difference, unused − control"
                      f"{'' if banded else ' (no margin)'}")
        if banded:
            ax.legend(fontsize=6, frameon=False, loc="upper right")
        shown = "" if len(rows) == len(every) else f"; the first {len(rows)} of {len(every):,} comparisons"
        ax.set_title(f"One point per prompt ({report.get('prompts', '-')} prompts, the unit of analysis){shown}",
                     fontsize=8, loc="left")
        return figs.save(fig, name, "per-prompt differences of the primary outcome against the margin")


def _first_pass_rows(report: dict[str, Any]) -> list[tuple[str, Any]]:
    """/3 reports: which run was analysed, the unit, the prompts' format, where the model writes, the power."""
    design = report.get("first_pass")
    if not isinstance(design, dict):
        return []
    analysed = {"batched": "each condition's row of a batched run (checked against the condition alone)",
                "alone": "each condition alone (checked against its batched rows)"}
    rows = [("analysed run", analysed.get(report.get("analysed_run"), "-")),
            ("unit of analysis", f"the prompt ({report.get('prompts', '-')} prompts)"),
            ("prompts", f"suite {design.get('suite', '-')} ({design.get('split', '-')}), "
                        f"{'with' if design.get('chat_template') else 'without'} the chat template; "
                        f"{design.get('excluded_prompts', '-')} left out for too few content positions"),
            ("no-plant first pass: special or unused", f"{number(design.get('no_plant_special_share'))} of canvas "
                                                       "positions (plants go only where it predicts content)")]
    power = design.get("power")
    if isinstance(power, dict):
        rows.append(("planned power", f"{power.get('prompts_planned', '-')} prompts ({power.get('prompts_needed', '-')} "
                                      f"needed at planning sd {number(power.get('planning_sd'))}): TOST power "
                                      f"{number(power.get('tost_power_per_comparison'))} per comparison"))
    return rows


def _verdict(effect: dict[str, Any]) -> str:
    """The rule's verdict, with the validity flags beside it (a TOST 'equivalent' a two-sided test contradicts)."""
    flags = effect["flags"] if "flags" in effect else validity.effect_flags(effect, effect.get("unit", "pair"))
    return str(effect.get("verdict", "-")) + "".join(f" (! {flag})" for flag in flags)


def verdict_rows(report: dict[str, Any]) -> list[list[str]]:
    rows = []
    for e in report.get("effects", []):
        ci = e.get("ci")
        rows.append([_comparison(e), e["outcome"] + (" *" if e.get("primary") else ""), str(e.get("n_pairs")),
                     number(e.get("mean_difference")), f"[{number(ci[0])}, {number(ci[1])}]" if ci and validity.effect_interval_allowed(e) else "-",
                     f"±{number(e.get('margin'))}", number(e.get("tost_p")), _verdict(e)])
    return rows


def noise_column(study: NoiseStudy, key: str, title: str, figs: figures.FigureSet) -> str:
    report = study.report
    conclusion = report.get("conclusion", {})
    safeguard = report.get("safeguard", {})
    match = {None: "no plan.sha256 beside it", True: "matches plan.sha256", False: "DOES NOT match plan.sha256"}
    check = (f' (design {esc(report.get("design"))}: a check of the machinery, not a study)'
             if report.get("design") in NOISE_CHECK_DESIGNS else "")
    body = [f'<p><strong>Unused tokens act as masks? {esc(conclusion.get("answer"))}{check}</strong>: '
            f'{esc(conclusion.get("text"))}</p>',
            table(("", ""), [
                ("plan hash (sha256)", f"{report.get('plan_hash', '-')} ({match[study.plan_hash_matches]})"),
                ("conditions run", f"{report.get('conditions_run', '-')} / {report.get('conditions_total', '-')}"),
                ("batch safeguard fired", f"{safeguard.get('fired', '-')} / {safeguard.get('compared', '-')} conditions "
                                          f"(batch rows {safeguard.get('batch_rows', '-')})"),
                ("safeguard by field", ", ".join(f"{k} {v}" for k, v in (safeguard.get("by_field") or {}).items()) or "-"),
                ("with a changed outcome field", safeguard.get("outcome_fields_changed", "-")),
                *_first_pass_rows(report),
            ], cls="data kv"),
            _forest(study, figs, f"{key}-forest"),
            _per_prompt_strip(study, figs, f"{key}-per-prompt"),
            "<h4>TOST verdicts (* primary outcome)</h4>",
            '<div class="scroll">' + table(("comparison", "outcome", "prompts" if report.get("unit") == "prompt" else "pairs", "mean diff", "95% CI", "margin", "TOST p",
                                            "verdict"), verdict_rows(report)) + "</div>"]
    return column(title, study.environment, "".join(body), str(study.source))
