"""The unused-token study's panel: a forest plot of the paired effects against the equivalence margin
(one subplot per outcome, since outcomes have their own scales and margins), the TOST verdict per
outcome, the plan hash and the batch safeguard's counts."""

from __future__ import annotations

from typing import Any

from canvaslab.choices import NOISE_CHECK_DESIGNS
from canvaslab.reports.html import figures
from canvaslab.reports.html.markup import column, esc, number, table
from canvaslab.reports.readers.noise_study import NoiseStudy

VERDICT_MARKERS = {"equivalent": "o", "different": "s", "inconclusive": "D", "insufficient data": "x"}


def effects_by_outcome(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for effect in report.get("effects", []):
        grouped.setdefault(effect["outcome"], []).append(effect)
    return grouped


def _forest(study: NoiseStudy, figs: figures.FigureSet, name: str) -> str:
    grouped = effects_by_outcome(study.report)
    if not grouped:
        return ""
    with figures.style():
        fig, axes = figures.plt.subplots(len(grouped), 1, figsize=(6.4, 0.6 + sum(0.32 * len(v) + 0.55 for v in grouped.values())),
                                         squeeze=False, constrained_layout=True,
                                         gridspec_kw={"height_ratios": [len(v) + 1 for v in grouped.values()]})
        for ax, (outcome, effects) in zip(axes[:, 0], grouped.items()):
            margin = effects[0]["margin"]
            ax.axvspan(-margin, margin, color=figures.OKABE_ITO[4], alpha=0.25, label=f"equivalence margin ±{margin:g}")
            ax.axvline(0, color="grey", linewidth=0.8)
            for i, effect in enumerate(effects):
                mean, ci = effect.get("mean_difference"), effect.get("ci")
                if mean is None:
                    continue
                err = None if not ci else [[mean - ci[0]], [ci[1] - mean]]
                ax.errorbar(mean, i, xerr=err, fmt=VERDICT_MARKERS.get(effect["verdict"], "o"), capsize=3,
                            color=figures.OKABE_ITO[0 if effect["verdict"] == "equivalent" else 5])
            ax.set_yticks(range(len(effects)), [e["comparison"] for e in effects], fontsize=7)
            ax.set_ylim(len(effects) - 0.5, -0.5)
            star = " (primary)" if effects[0].get("primary") else ""
            ax.set_title(f"{outcome}{star}", fontsize=8, loc="left")
            ax.legend(fontsize=6, frameon=False, loc="upper right")
        axes[-1, 0].set_xlabel("paired difference, unused − control (outcome units), 95% CI")
        fig.suptitle("Unused tokens vs controls: paired effects against the margin\n(○ equivalent, □ different, ◇ inconclusive)")
        return figs.save(fig, name, "forest plot of paired effects against the equivalence margin")


def _per_prompt_strip(study: NoiseStudy, figs: figures.FigureSet, name: str) -> str:
    """/3 reports: each prompt's mean difference on the primary outcome, per comparison, against the margin."""
    report = study.report
    per_prompt = {k: v for k, v in (report.get("per_prompt") or {}).items() if isinstance(v, dict) and v}
    primary = next((e for e in report.get("effects", []) if e.get("primary")), None)
    if not per_prompt or primary is None:
        return ""
    margin = primary["margin"]
    with figures.style():
        fig, ax = figures.plt.subplots(figsize=(6.4, 0.9 + 0.5 * len(per_prompt)), constrained_layout=True)
        ax.axvspan(-margin, margin, color=figures.OKABE_ITO[4], alpha=0.25, label=f"equivalence margin ±{margin:g}")
        ax.axvline(0, color="grey", linewidth=0.8)
        for row, (comparison, values) in enumerate(per_prompt.items()):
            points = [float(v) for v in values.values() if isinstance(v, (int, float))]
            # a deterministic jitter: the same page for the same report
            jitter = [row + 0.25 * (((i * 0.618034) % 1) - 0.5) for i in range(len(points))]
            ax.scatter(points, jitter, s=9, alpha=0.6, color=figures.OKABE_ITO[5], linewidths=0)
        ax.set_yticks(range(len(per_prompt)), list(per_prompt), fontsize=7)
        ax.set_ylim(len(per_prompt) - 0.5, -0.5)
        ax.set_xlabel(f"{primary['outcome']}: per-prompt mean difference, unused − control")
        ax.legend(fontsize=6, frameon=False, loc="upper right")
        ax.set_title(f"One point per prompt ({report.get('prompts', '-')} prompts, the unit of analysis)", fontsize=8,
                     loc="left")
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


def verdict_rows(report: dict[str, Any]) -> list[list[str]]:
    rows = []
    for e in report.get("effects", []):
        ci = e.get("ci")
        rows.append([e["comparison"], e["outcome"] + (" *" if e.get("primary") else ""), str(e.get("n_pairs")),
                     number(e.get("mean_difference")), f"[{number(ci[0])}, {number(ci[1])}]" if ci else "-",
                     f"±{number(e.get('margin'))}", number(e.get("tost_p")), e.get("verdict", "-")])
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
