"""The generated tables: one renderer per ``<!-- evidence:NAME -->`` region, each printed by the validity rules."""

from __future__ import annotations

import statistics
from functools import partial
from pathlib import Path
from typing import Any, Callable

from canvaslab.analysis import validity
from canvaslab.analysis.order_metrics import ONE_CALL
from canvaslab.reports.evidence.sources import (
    BINS, GRAMMAR, SCORED_BY, SHIPPED, TASKS, blind_evaluations, counted, judged_prose, measured_regimes, order_rulings,
    quality_1_0, quality_1_1, result_file, score_text, split_1_0, table,
)
from canvaslab.reports.evidence.gpu import SERVE, readme_gpu, serve_levels, speed_h200
from canvaslab.training.blind_eval import score_text as blind_score

_table = table



def _accuracy(summary: dict[str, Any], baseline: dict[str, Any]) -> str:
    if summary["accuracy"] is None:
        return "-"
    return f"{summary['accuracy']:.2f} ({score_text((baseline or {}).get('accuracy'))})"


def quality_mini_1_1(root: Path) -> str:
    """``mini`` 1.1.0, in-template and held-out templates, 100 prompts per task and split."""
    scores, judge = quality_1_1(root), judged_prose(root)
    rows = [[label, score_text(scores["in_template"][task]), score_text(scores["heldout_template"][task])]
            for task, label in TASKS]
    rows.append(["prose: English word pairs", score_text(scores["in_template"]["word_pairs"]),
                 score_text(scores["heldout_template"]["word_pairs"])])
    rows.append(["prose: the sibling's NLL, nats per token (references)",
                 f"{judge['retrained on grammar']['sibling_nll']:.2f} ({judge['references (grammar)']['sibling_nll']:.2f})",
                 "not computed"])
    return _table(["task (`mini` 1.1.0, 100 prompts each)", "in-template", "held-out templates"], rows)


def _with_n(summary: dict[str, Any], key: str = "accuracy") -> str:
    return "-" if summary is None else f"{summary[key]:.2f} (n={summary['n']})"


def evaluation_mini_1_1(root: Path) -> str:
    """The model card's 1.1.0 table: both splits, median accept calls, and 1.0.0 and ``mini-ar`` held out."""
    scores = quality_1_1(root)
    old, sibling = split_1_0(root, "mini", "heldout_template"), split_1_0(root, "mini-ar", "heldout_template")
    rows = [[label, score_text(scores["in_template"][task]), score_text(scores["heldout_template"][task]),
             f"{scores['heldout_template']['median_calls'][task]:g}", _with_n(old[task]), _with_n(sibling[task])]
            for task, label in TASKS]
    rows.append(["prose: English word pairs", score_text(scores["in_template"]["word_pairs"]),
                 score_text(scores["heldout_template"]["word_pairs"]),
                 f"{scores['heldout_template']['median_calls']['prose']:g}",
                 _with_n(old["prose"], "english_bigram_share"), _with_n(sibling["prose"], "english_bigram_share")])
    return _table(["task", "in-template", "held-out template", "median accept calls (held-out)",
                   "1.0.0, held-out", "`mini-ar`, held-out"], rows)


def heldout_mini_1_0(root: Path) -> str:
    """``mini`` 1.0.0 and ``mini-ar`` on held-out templates (CPU, float32)."""
    old, sibling = split_1_0(root, "mini", "heldout_template"), split_1_0(root, "mini-ar", "heldout_template")
    return _table(["task (held-out templates)", "`mini` 1.0.0", "`mini-ar`"],
                  [[label.split(" (")[0], _with_n(old[task]), _with_n(sibling[task])] for task, label in TASKS])


def splits_mini_1_0(root: Path) -> str:
    """``mini`` 1.0.0 and ``mini-ar``, in-template beside held-out template, from the same CPU evaluation."""
    columns = [split_1_0(root, model, split) for model in ("mini", "mini-ar")
               for split in ("in_template", "heldout_template")]
    rows = [[label.split(" (")[0]] + [_with_n(c.get(task)) for c in columns] for task, label in TASKS]
    rows.append(["prose: English word pairs"] + [_with_n(c["prose"], "english_bigram_share") for c in columns])
    return _table(["task", "`mini` in-template", "`mini` held-out template", "`mini-ar` in-template",
                   "`mini-ar` held-out template"], rows)


def quality_mini_1_0(root: Path) -> str:
    """``mini`` 1.0.0 and ``mini-ar`` on 100 in-template held-out prompts per task."""
    (mini, answers), (sibling, _) = quality_1_0(root, "diffusion"), quality_1_0(root, "autoregressive")
    words = [a for a in answers if a["task"] == "word"]
    rows = []
    for task, label in TASKS:
        if task not in SCORED_BY:
            continue
        cell = score_text(mini[task]["accuracy"])
        if task == "word":
            cell += " ({})".format(", ".join(
                f"{name} {sum(a['score'] for a in words if sign in a['text'])} of "
                f"{sum(sign in a['text'] for a in words)}" for name, sign in (("additions", " + "),
                                                                             ("subtractions", " - "))))
        rows.append([label.split(" (")[0], SCORED_BY[task], cell, f"{mini[task]['median_accept_calls']:g}",
                     score_text(sibling[task]["accuracy"])])
    return _table(["task", "scored by", "`mini` 1.0.0", "median accept calls", "`mini-ar`"], rows)


def sibling_mini_1_0(root: Path) -> str:
    """The findings' accuracy beside the sibling: ``mini`` 1.0.0, ``mini-ar`` and the references, in-template."""
    judge = judged_prose(root)
    (mini, _), (sibling, _) = quality_1_0(root, "diffusion"), quality_1_0(root, "autoregressive")
    tasks = [(task, label.split(" (")[0]) for task, label in TASKS if task in SCORED_BY]

    def prose(name: str) -> str:
        return f"{judge[name]['word_pairs']:.3f}, {judge[name]['sibling_nll']:.2f}"
    rows = [["`mini` 1.0.0"] + [score_text(mini[t]["accuracy"]) for t, _ in tasks] + [prose("shipped")],
            ["`mini-ar` (greedy)"] + [score_text(sibling[t]["accuracy"]) for t, _ in tasks]
            + [prose("sibling greedy") + " (its own answers)"],
            ["the passages' own continuations"] + [""] * len(tasks) + [prose("references")]]
    return _table([""] + [label for _, label in tasks] + ["prose: word pairs, sibling NLL (nats)"], rows)


JUDGED = (("references", "the passages' own continuations"), ("shipped", "`mini` 1.0.0"),
          ("references (grammar)", "the passages' own continuations, grammar version's prompts"),
          ("retrained on grammar", "`mini` 1.1.0 (grammar version's prompts)"),
          ("sibling greedy", "`mini-ar`, greedy (as scored above)"),
          ("sibling sampled T=0.8", "`mini-ar`, sampled at temperature 0.8"))


def _prose_ended(root: Path) -> dict[str, str]:
    """How the two ``mini`` versions' in-template prose answers end, each in its own terms."""
    _, answers = quality_1_0(root, "diffusion")
    prose = [a for a in answers if a["task"] == "prose"]
    budget = result_file(root, SHIPPED / "quality_diffusion_add2_add3_word_fact_json_prose.json")["generation"][
        "max_denoising_steps"]
    ended, total = quality_1_1(root)["in_template"]["prose_ended"]
    return {"shipped": f"{sum(a['passes'] < budget for a in prose)} of {len(prose)} stop before the {budget}-pass "
                       "budget",
            "retrained on grammar": f"{ended} of {total} close with the end-of-turn token"}


def prose_judge(root: Path) -> str:
    """The prose judge's measures of every answer set, on the 100 in-template held-out prose prompts."""
    judge, ended = judged_prose(root), _prose_ended(root)
    rows = [[label, f"{judge[name]['word_share']:.3f}", f"{judge[name]['word_pairs']:.3f}",
             f"{judge[name]['sibling_nll']:.2f}", f"{judge[name]['frequent_word_share']:.3f}",
             f"{judge[name]['words']:g}", ended.get(name, "-")] for name, label in JUDGED]
    return _table(["100 in-template held-out prose prompts", "word share", "word pairs", "sibling NLL (nats)",
                   "frequent words", "median words", "how the answers end"], rows)


TARGETS = (  # (target, how it is read from the files, why not when missed)
    ("facts ≥ 80% (held-out templates)", lambda s, j: s["heldout_template"]["fact"] >= 0.80,
     lambda s, j: f"{s['heldout_template']['fact']:.0%}", ""),
    ("JSON with unseen keys and types ≥ 80% valid with the required keys (held-out templates)",
     lambda s, j: s["heldout_template"]["json"] >= 0.80, lambda s, j: f"{s['heldout_template']['json']:.0%}",
     "the model does not copy a key it never saw in JSON: the 453 training key names teach JSON's shape, not "
     "copying from the prompt at this size"),
    ("code for unseen behaviours ≥ 40% of tests passed (held-out templates)",
     lambda s, j: s["heldout_template"]["code"] >= 0.40, lambda s, j: f"{s['heldout_template']['code']:.0%}",
     "as with JSON keys, it does not copy a name it never saw: no answer carries the requested function name"),
    ("sums of two widths ≥ 90% (held-out templates)", lambda s, j: s["heldout_template"]["add_mixed"] >= 0.90,
     lambda s, j: f"{s['heldout_template']['add_mixed']:.0%}",
     "the training's mixed-width sums all have a 4-digit operand; the model stretches the shorter operand to the "
     "longer one's width before adding"),
    ("2- and 3-digit sums stay ≥ 95% (held-out templates)",
     lambda s, j: min(s["heldout_template"]["add2"], s["heldout_template"]["add3"]) >= 0.95,
     lambda s, j: f"{s['heldout_template']['add2']:.0%}, {s['heldout_template']['add3']:.0%} (in-template "
                  f"{s['in_template']['add2']:.0%}, {s['in_template']['add3']:.0%})",
     "the worked answer repeats the operands, and in new wordings it copies one wrong or drops a carry"),
    ("prose: sibling NLL ≤ 7.1 nats (1.3x the references'), in-template prompts",
     lambda s, j: j["retrained on grammar"]["sibling_nll"] <= 7.1,
     lambda s, j: f"{j['retrained on grammar']['sibling_nll']:.2f} (references {j['references (grammar)']['sibling_nll']:.2f}); "
                  "held-out: not computed", ""),
    ("prose: word pairs ≥ 0.90, in-template prompts", lambda s, j: s["in_template"]["word_pairs"] >= 0.90,
     lambda s, j: f"{s['in_template']['word_pairs']:.3f} (held-out {s['heldout_template']['word_pairs']:.3f})",
     "distillation at this size closes most of the gap from 1.0.0's 0.55 to its greedy teacher's 0.98, not all"),
    ("prose: frequent-word share within 0.05 of the references', in-template prompts",
     lambda s, j: abs(s["in_template"]["frequent_words"] - s["in_template"]["reference_frequent_words"]) <= 0.05,
     lambda s, j: f"{s['in_template']['frequent_words']:.3f} against {s['in_template']['reference_frequent_words']:.3f}",
     "the distillation teacher's greedy answers lean on frequent words too: the student learned the teacher's style"),
    ("prose: ≥ 50% of answers end before the budget, in-template prompts",
     lambda s, j: s["in_template"]["prose_ended"][0] >= 0.5 * s["in_template"]["prose_ended"][1],
     lambda s, j: "{} of {} close with the end-of-turn token (held-out {} of {})".format(
         *s["in_template"]["prose_ended"], *s["heldout_template"]["prose_ended"]), ""),
)


def targets_mini_1_1(root: Path) -> str:
    """The model card's targets for 1.1.0, each read from its file and labelled with the split it was met on."""
    scores, judge = quality_1_1(root), judged_prose(root)
    rows = []
    for target, met, shown, why in TARGETS:
        hit = met(scores, judge)
        rows.append([target, shown(scores, judge), "yes" if hit else "no", "" if hit else why])
    return _table(["target", "`mini` 1.1.0", "met?", "why not"], rows)


def _block(summary: dict[str, Any], rulings: dict[str, tuple], kind: str) -> str:
    cells = []
    for size in BINS:
        ruling, support = rulings[f"{kind}_{size}"]
        cell = validity.format_value(summary[kind][size], None, ruling, 2, support)
        if ruling.reading == validity.VALUE and support.narrow:
            cell += f" ({support.narrow} of {support.generations} over 2 bins)"
        cells.append(cell)
    return " / ".join(cells)


def _auroc(summary: dict[str, Any], rulings: dict[str, tuple]) -> str:
    if summary.get("auroc") is None:
        return "- (one class)" if summary.get("accuracy") is not None else "-"
    ruling, support = rulings["auroc"]
    text = validity.format_value(summary["auroc"], summary["auroc_ci"], ruling, 2)
    prompts = "" if support.minority_clusters in (None, support.minority) else \
        f" from {counted(support.minority_clusters, 'prompt')}"
    return text + f" ({counted(support.minority, support.minority_name)}{prompts})"


def _order_table(root: Path, folder: Path) -> str:
    """A study's commit order per regime: tau_b, block tau (bin level, token level), accuracy, AUROC."""
    metrics, rulings = order_rulings(root, folder)
    baseline = metrics["baseline"]["regimes"]
    rows = []
    for regime, s in metrics["regimes"].items():
        r = rulings[regime]
        rows.append([regime, f"{r['tau_b'][1].generations} of {s['n_generations']}",
                     validity.format_value(s["tau_b"], s["tau_b_ci"], r["tau_b"][0], support=r["tau_b"][1]),
                     _block(s, r, "block_tau"), _block(s, r, "token_block_tau"),
                     _accuracy(s, baseline.get(regime)), _auroc(s, r)])
    return _table(["regime", "tau_b defined for", "tau_b [95% CI]", "block tau, bins of 4 / 8 / 16 / 32 / 64",
                   "token-level block tau, same bins", "accuracy (`mini-ar`)", "AUROC [95% CI]"], rows)


def order_mini_1_1(root: Path) -> str:
    """Commit order on ``mini`` 1.1.0 (CPU, one seed x 20 prompts per regime)."""
    return _order_table(root, GRAMMAR / "order_study_cpu")


def order_mini_1_0(root: Path) -> str:
    """Commit order on ``mini`` 1.0.0 (CPU, 5 seeds x 20 prompts per regime)."""
    return _order_table(root, SHIPPED / "order_study_cpu")


def _commit_rows(root: Path, folder: Path) -> str:
    metrics = result_file(root, folder / "order_metrics.json")
    baseline = metrics["baseline"]["regimes"]
    budgets = {s["accept_calls"]["budget"] for s in metrics["regimes"].values()}
    rows = []
    for regime, s in metrics["regimes"].items():
        calls = s["accept_calls"]
        rows.append([regime, f"{s['tokens_per_call']:.1f}", f"{s['same_call_fraction']:.2f}",
                     f"{calls['mean']:.3g} ({calls['min']}-{calls['max']})", f"{s['commit_entropy_mean']:.2g}",
                     f"{s['unaccept_events']:.3g}", _accuracy(s, baseline.get(regime))])
    return _table(["regime", "tokens per call", "same-call token pairs",
                   f"accept calls of {'/'.join(map(str, sorted(budgets)))}, mean (range)",
                   "mean commit entropy (nats)", "un-accepts per generation", "accuracy (`mini-ar`)"], rows)


def commit_mini_1_1(root: Path) -> str:
    """How ``mini`` 1.1.0 commits: tokens per call, same-call pairs, accept calls, entropy, un-accepts."""
    return _commit_rows(root, GRAMMAR / "order_study_cpu")


def commit_mini_1_0(root: Path) -> str:
    """How ``mini`` 1.0.0 commits, as ``commit_mini_1_1``."""
    return _commit_rows(root, SHIPPED / "order_study_cpu")


def _without_interval(value: float, ci: list[float] | None, ruling: validity.Ruling, digits: int = 3) -> str:
    text = validity.format_value(value, ci, ruling, digits)
    return text if ruling.interval else text + ", no CI"


def tau_mini_1_0(root: Path) -> str:
    """``mini`` 1.0.0's tau_b with what it rests on: answer lengths, one-call answers, generations and prompts."""
    metrics, rulings = order_rulings(root, SHIPPED / "order_study_cpu")
    generations = measured_regimes(root, SHIPPED / "order_study_cpu")
    rows = []
    for regime, s in metrics["regimes"].items():
        measured = generations[regime]
        defined = [m for m in measured if m.tau_b is not None]
        one_call = sum(m.undefined.get("tau_b") == ONE_CALL for m in measured)
        ruling, support = rulings[regime]["tau_b"]
        rows.append([regime, f"{statistics.median(m.content_positions for m in measured):g}",
                     f"{one_call} of {len(measured)}",
                     f"{counted(len(defined), 'generation')} of {counted(support.clusters, 'prompt')}",
                     _without_interval(s["tau_b"], s["tau_b_ci"], ruling)])
    return _table(["regime (`mini` 1.0.0)", "content tokens (median)", "committed in one call", "tau_b defined for",
                   "tau_b [95% CI]"], rows)


def auroc_mini_1_0(root: Path) -> str:
    """``mini`` 1.0.0: does commit entropy rank wrong answers below right ones, and on how many wrong answers."""
    metrics, rulings = order_rulings(root, SHIPPED / "order_study_cpu")
    generations = measured_regimes(root, SHIPPED / "order_study_cpu")
    rows = []
    for regime, s in metrics["regimes"].items():
        if s["accuracy"] is None:
            continue
        scored = [m for m in generations[regime] if m.correct is not None]
        wrong = [m for m in scored if not m.correct]
        why = "-"
        if s["auroc"] is None:
            auroc = "- (every answer right)" if not wrong else "- (every answer wrong)"
        else:
            ruling, _ = rulings[regime]["auroc"]
            auroc = _without_interval(s["auroc"], s["auroc_ci"], ruling)
            why = "; ".join(ruling.flags) or "-"
        wrong_prompts = len({m.prompt_id for m in wrong})
        rows.append([regime, auroc, f"{len(wrong)} of {len(scored)} generations"
                     + (f", from {counted(wrong_prompts, 'prompt')}" if wrong else ""), why])
    pooled = metrics["pooled_auroc"]
    rows.append(["pooled (a diagnostic)", f"{pooled['value']:.3f} ({pooled['n']} generations); Simpson flag "
                 f"{'raised' if pooled['simpson_prone'] else 'not raised'}", "-", "-"])
    return _table(["regime (`mini` 1.0.0)", "AUROC of mean commit entropy [95% CI]", "wrong answers",
                   "why no interval"], rows)


def noise_mini_1_1(root: Path) -> str:
    """The noise study's run of record on ``mini`` 1.1.0: the primary outcome's two comparisons, flagged."""
    report = result_file(root, GRAMMAR / "noise_study" / "confirmatory" / "noise_study.json")
    rows = []
    for e in (e for e in report["effects"] if e["primary"]):
        flags = e["flags"] if "flags" in e else validity.effect_flags(e, e.get("unit", "pair"))
        ci = f"[{e['ci'][0]:+.3f}, {e['ci'][1]:+.3f}]" if validity.effect_interval_allowed(e) and e["ci"] else "-"
        rows.append([e["comparison"], str(e["n_pairs"]), f"{e['mean_difference']:+.3f}", f"{e['sd']:.3f}", ci,
                     f"{e['tost_p']:.2g}", f"{e['p_two_sided']:.2g}", e["verdict"], "; ".join(flags) or "-"])
    return _table([f"comparison (primary: `{report['conclusion']['primary_outcome']}`)", "prompts",
                   "mean difference, nats", "sd", "95% CI", "TOST p", "two-sided p", "verdict", "flag"], rows)


GRADED = Path("benchmarks/results/mini-noise-v4")


def _count_range(stratum: dict[str, Any]) -> str:
    low, high = stratum["range"]
    return f"{low}" if low == high else f"{low}-{high}" if high is not None else f"> {low - 1}"


def noise_mini_v4(root: Path) -> str:
    """The graded noise study's run of record: per arm and frequency stratum, unused minus the stratum."""
    report = result_file(root, GRADED / "confirmatory" / "noise_study.json")
    primary = report["conclusion"]["primary_outcome"]
    strata = {s["name"]: s for s in report["graded"]["strata"]}
    rows = []
    for e in (e for e in report["effects"] if e["primary"]):
        name = e["comparison"].split(" - ", 1)[1]
        means = report["class_means"][e["arm"]]
        ci = f"[{e['ci'][0]:+.3f}, {e['ci'][1]:+.3f}]" if validity.effect_interval_allowed(e) and e["ci"] else "-"
        direction = report["conclusion"]["per_stratum"][e["arm"]][name]["direction"]
        rows.append([e["arm"], name, _count_range(strata[name]), f"{strata[name]['id_count']:,}", str(e["n_pairs"]),
                     f"{means['unused'][primary]:.2f} / {means[name][primary]:.2f}", f"{e['mean_difference']:+.3f}",
                     f"{e['sd']:.3f}", ci, f"{e['tost_p']:.2g}", f"{e['p_two_sided']:.2g}", direction,
                     "; ".join(e["flags"]) or "-"])
    return _table(["arm", "stratum", "training count", "ids", "prompts", "mean boost unused / stratum, nats",
                   "unused - stratum", "sd", "95% CI", "TOST p", "two-sided p", "answer", "flag"], rows)


def noise_mini_1_0(root: Path) -> str:
    """The noise study's default design on ``mini`` 1.0.0 (H200): every outcome's two comparisons, the answer."""
    report = result_file(root, SHIPPED / "noise_study" / "noise_study.json")
    rows = []
    for e in sorted(report["effects"], key=lambda e: (e["comparison"], not e["primary"])):
        ci = f"[{e['ci'][0]:+.4f}, {e['ci'][1]:+.4f}]" if validity.effect_interval_allowed(e) and e["ci"] else "-"
        rows.append([e["comparison"], f"`{e['outcome']}`" + (" (primary)" if e["primary"] else ""),
                     str(e["n_pairs"]), f"{e['mean_difference']:+.4f}", ci, f"{e['margin']:g}", e["verdict"],
                     "; ".join(validity.effect_flags(e, "pair")) or "-"])
    guard, total = report["safeguard"], report["conditions_run"]
    changed = guard["outcome_fields_changed"]
    return (_table(["comparison", "outcome", "pairs", "mean difference", "95% CI", "margin", "verdict", "flag"], rows)
            + f"\n\nAnswer by the plan's rule: **{report['conclusion']['answer']}** "
            f"({report['conclusion']['text']}). Batch safeguard (alone against row 0 of a batch of "
            f"{report['execution']['batch_size']}): fired in {guard['fired']:,} of {guard['compared']:,} conditions "
            f"({guard['fired'] / guard['compared']:.0%}); tokens, stop, acceptance or predictions changed in "
            f"{changed:,} ({changed / total:.0%}); by field: "
            + ", ".join(f"{field.replace('_', ' ')} {count:,}" for field, count in guard["by_field"].items()) + ".")


def readme_mini_1_1(root: Path) -> str:
    """The README's rows for the installed ``mini`` 1.1.0: quality, commit order, noise study."""
    scores, judge = quality_1_1(root), judged_prose(root)
    held, inside = scores["heldout_template"], scores["in_template"]
    quality = (", ".join(f"{label.split(' (')[0]} {held[task]:.2f}" for task, label in TASKS)
               + f"; prose word pairs {held['word_pairs']:.2f} (no NLL computed on held-out prompts); in-template "
               f"prose: word pairs {inside['word_pairs']:.2f}, the sibling's NLL "
               f"{judge['retrained on grammar']['sibling_nll']:.2f} nats (references "
               f"{judge['references (grammar)']['sibling_nll']:.2f})")
    metrics, rulings = order_rulings(root, GRAMMAR / "order_study_cpu")
    math = metrics["regimes"]["math"]
    ruling, support = rulings["math"]["tau_b"]
    tau = validity.format_value(math["tau_b"], math["tau_b_ci"], ruling, 2, support)
    order = (f"tau_b math {tau} on worked sums (block tau {_block(math, rulings['math'], 'block_tau')} at bins of "
             f"4 to 64: the canvas holds 128 positions, so bins of 64 give 2 bins, a split share, and no value is set "
             f"beside the paper's 256-position canvas); AUROC math {_auroc(math, rulings['math'])}, no interval; "
             f"facts {metrics['regimes']['factual']['tau_b']:.2f}, prose {metrics['regimes']['open_ended']['tau_b']:.2f}")
    report = result_file(root, GRAMMAR / "noise_study" / "confirmatory" / "noise_study.json")
    primary = {e["comparison"]: e for e in report["effects"] if e["primary"]}
    random_, rare = primary["unused - random"], primary["unused - rare"]
    means = report["class_means"]
    noise = (f"planted unused tokens read back {-random_['mean_difference']:.2f} nats less than random tokens "
             f"[{-random_['ci'][1]:.2f}, {-random_['ci'][0]:.2f}] and {rare['mean_difference']:+.3f} "
             f"[{rare['ci'][0]:+.3f}, {rare['ci'][1]:+.3f}] against rare ones: **{report['conclusion']['answer']}** "
             f"by the registered rule, flagged: {'; '.join(validity.effect_flags(rare, 'prompt'))}; mean boosts: "
             + ", ".join(f"{name} {means[name]['planted_logprob_boost']:.2f}" for name in ("unused", "rare", "random"))
             + f" nats; safeguard {report['safeguard']['fired']}/{report['safeguard']['compared']}")
    rows = [["`mini` 1.1.0, 100 prompts per task on held-out templates", quality, "`benchmarks/results/mini-grammar/`"],
            [f"commit order on `mini` 1.1.0 (CPU, {metrics['n_generations']} generations, one seed)", order,
             "`benchmarks/results/mini-grammar/order_study_cpu/`"],
            [f"noise study on `mini` 1.1.0, run of record ({report['prompts']} prompts, "
             f"{report['conditions_run']:,} conditions, CPU)", noise, "`benchmarks/results/mini-grammar/noise_study/`"]]
    return _table(["what", "result", "folder"], rows)


def _noise_primary(report: dict[str, Any]) -> str:
    """The primary outcome's two comparisons, in nats read back, for a README row."""
    primary = {e["comparison"]: e for e in report["effects"] if e["primary"]}
    random_, rare = primary["unused - random"], primary["unused - rare"]

    def less(e: dict[str, Any]) -> str:
        return f"{-e['mean_difference']:.2f} [{-e['ci'][1]:.2f}, {-e['ci'][0]:.2f}]"
    means = report["class_means"]
    guard = report["safeguard"]
    return (f"planted unused tokens read back {less(random_)} nats less than random tokens and {less(rare)} less "
            f"than rare ones: **{report['conclusion']['answer']}** by the registered rule ("
            f"{report['conclusion']['text']}); mean boosts: "
            + ", ".join(f"{name} {means[name]['planted_logprob_boost']:.2f}" for name in ("unused", "rare", "random"))
            + f" nats; safeguard {guard['fired']}/{guard['compared']}")


def readme_earlier(root: Path) -> str:
    """The README's rows for ``mini`` 1.0.0 and the CPU costs, each from its folder."""
    (mini, answers), (sibling, _) = quality_1_0(root, "diffusion"), quality_1_0(root, "autoregressive")
    judge = judged_prose(root)
    tasks = [(task, label.split(" (")[0]) for task, label in TASKS if task in SCORED_BY]
    quality = (", ".join(f"{label} {mini[task]['accuracy']:.2f}" for task, label in tasks)
               + f"; prose word pairs {judge['shipped']['word_pairs']:.2f}, not English; `mini-ar`: "
               + ", ".join(f"{sibling[task]['accuracy']:.2f}" for task, _ in tasks)
               + f", prose {judge['sibling greedy']['word_pairs']:.2f}")
    large = result_file(root, Path("benchmarks/results/mini-noise-first-pass-large/confirmatory/noise_study.json"))
    sandbox = result_file(root, Path("benchmarks/results/cpu-sandbox-overhead/cpu_sandbox_overhead.json"))
    engine = result_file(root, Path("benchmarks/results/cpu-engine-ray-scaling/cpu_engine_ray_scaling_tiny_idle.json"))
    walls = {name: result["wall_s"] for name, result in engine["results"].items()}
    rows = [[f"`mini` 1.0.0 (the previous weights), {mini['add2']['n']} in-template held-out prompts per task",
             quality, "`benchmarks/results/mini/`"],
            [f"noise study on `mini` 1.0.0, first-pass design with the registered power (`mini-large` suite: pilot, "
             f"then {large['prompts']} prompts, {large['conditions_run']:,} conditions batched in "
             f"{large['execution']['mode']} mode, {large['environment']['device']})", _noise_primary(large),
             "`benchmarks/results/mini-noise-first-pass-large/`"],
            ["code sandbox cost per probe", f"{sandbox['median_sandbox_s']:.2f} s median against "
             f"{sandbox['median_unprotected_s']:.2f} s unprotected ({sandbox['probes']} probes)",
             "`benchmarks/results/cpu-sandbox-overhead/`"],
            ["engine, tiny study, 2 idle cores", "; ".join(f"{name}: {wall:.1f} s" for name, wall in walls.items()),
             "`benchmarks/results/cpu-engine-ray-scaling/`"]]
    return _table(["what", "result", "folder"], rows)


def blind_mini(root: Path) -> str:
    """Every release evaluated on the blind set: per task k/n, the share and its Wilson 95% interval as the
    validity rules allow (no interval from fewer than 5 right or 5 wrong answers)."""
    evaluations = blind_evaluations(root)
    header = ["task"] + [f"`{result['model']}` {result['release'].rsplit(' ', 1)[1]}"
                         + (" (re-run)" if entry["rerun"] else "") for entry, result in evaluations]
    tasks = dict.fromkeys(task for _, result in evaluations for task in result["summary"])
    labels = dict(TASKS)
    rows = [[labels.get(task, task).split(" (")[0]] + [blind_score(result["summary"][task])
                                                        for _, result in evaluations] for task in tasks]
    return _table(header, rows)


RENDERERS: dict[str, Callable[[Path], str]] = {
    "readme-gpu": readme_gpu,
    "speed-h200": speed_h200,
    "readme-mini-1.1": readme_mini_1_1,
    "readme-earlier": readme_earlier,
    "quality-mini-1.1": quality_mini_1_1,
    "targets-mini-1.1": targets_mini_1_1,
    "evaluation-mini-1.1": evaluation_mini_1_1,
    "heldout-mini-1.0": heldout_mini_1_0,
    "splits-mini-1.0": splits_mini_1_0,
    "quality-mini-1.0": quality_mini_1_0,
    "sibling-mini-1.0": sibling_mini_1_0,
    "prose-judge": prose_judge,
    "order-mini-1.1": order_mini_1_1,
    "order-mini-1.0": order_mini_1_0,
    "commit-mini-1.1": commit_mini_1_1,
    "commit-mini-1.0": commit_mini_1_0,
    "tau-mini-1.0": tau_mini_1_0,
    "auroc-mini-1.0": auroc_mini_1_0,
    "noise-mini-1.1": noise_mini_1_1,
    "noise-mini-v4": noise_mini_v4,
    "noise-mini-1.0": noise_mini_1_0,
    **{f"serve-{key}": partial(serve_levels, key=key) for key in SERVE},
    "blind-mini": blind_mini,
}
