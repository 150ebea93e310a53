"""The docs' evidence tables, rendered from the result files under ``benchmarks/results/``.

A page marks each generated region ``<!-- evidence:NAME -->`` ... ``<!-- /evidence -->``; ``render_page`` refills
every region from its renderer, so a number on the page is the number in its file, printed through the validity
rules (``canvaslab.analysis.validity``). The README is read on GitHub, so the regions are plain Markdown in the
committed pages, and a test renders them again and fails on any difference.

    python -m canvaslab.reports.evidence            # rewrite the regions of every page
    python -m canvaslab.reports.evidence --check    # exit 1 and name the regions that differ from their files
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import sys
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any, Callable

from canvaslab.analysis import validity
from canvaslab.analysis.order_metrics import ONE_CALL, GenerationMeasures, measure_generation
from canvaslab.errors import CanvaslabError
from canvaslab.reports.readers.order_metrics import iter_traces

PAGES = ("README.md", "docs/findings-mini.md", "docs/mini-model.md", "docs/mini.md", "docs/evidence.md",
         "docs/commit-order-study.md", "docs/noise-study.md")
REGION = re.compile(r"(<!-- evidence:(?P<name>[a-z0-9.-]+) -->\n)(?P<body>.*?)(<!-- /evidence -->)", re.DOTALL)
GRAMMAR = Path("benchmarks/results/mini-grammar")
SHIPPED = Path("benchmarks/results/mini")
TASKS = (("add2", "2-digit sums"), ("add3", "3-digit sums"), ("add_mixed", "sums of two widths"),
         ("word", "word problems"), ("fact", "facts"), ("json", "JSON (valid, the requested keys, types and values)"),
         ("code", "code (passes its tests in the sandbox)"))
BINS = ("4", "8", "16", "32", "64")


@cache
def _json(root: Path, relative: Path) -> Any:
    path = root / relative
    if not path.is_file():
        raise CanvaslabError(f"evidence: {path} is missing")
    return json.loads(path.read_text(encoding="utf-8"))


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _accuracy(summary: dict[str, Any], baseline: dict[str, Any]) -> str:
    if summary["accuracy"] is None:
        return "-"
    return f"{summary['accuracy']:.2f} ({_score((baseline or {}).get('accuracy'))})"


def _count(n: int, name: str) -> str:
    return f"{n:,} {name}{'' if n == 1 else 's'}"


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


# ---------------------------------------------------------------- mini 1.1.0 quality


def _quality_1_1(root: Path) -> dict[str, dict[str, float | None]]:
    """Per split, task -> accuracy (code from the sandboxed CPU run), and the prose judge's figures."""
    gpu, code = _json(root, GRAMMAR / "quality_gpu.json"), _json(root, GRAMMAR / "quality_code.json")
    scores: dict[str, dict[str, float | None]] = {}
    for split in ("in_template", "heldout_template"):
        summary = {**gpu[split]["summary"]["diffusion"], **code[split]["summary"]["diffusion"]}
        scores[split] = {task: summary[task]["accuracy"] if task in summary else None for task, _ in TASKS}
        scores[split]["median_calls"] = {task: values["median_accept_calls"] for task, values in summary.items()}
        scores[split]["word_pairs"] = summary["prose"]["english_bigram_share"]
        scores[split]["frequent_words"] = summary["prose"]["frequent_word_share"]
        scores[split]["reference_frequent_words"] = summary["prose"]["reference_frequent_word_share"]
        prose = [answer for answer in gpu[split]["answers"]["diffusion"] if answer["task"] == "prose"]
        scores[split]["prose_ended"] = (sum(answer["eos_position"] is not None for answer in prose), len(prose))
    return scores


def _judge(root: Path) -> dict[str, dict[str, float]]:
    return {name: entry["summary"] for name, entry in _json(root, GRAMMAR / "judge.json")["sets"].items()}


def quality_mini_1_1(root: Path) -> str:
    """``mini`` 1.1.0, in-template and held-out templates, 100 prompts per task and split."""
    scores, judge = _quality_1_1(root), _judge(root)
    rows = [[label, _score(scores["in_template"][task]), _score(scores["heldout_template"][task])]
            for task, label in TASKS]
    rows.append(["prose: English word pairs", _score(scores["in_template"]["word_pairs"]),
                 _score(scores["heldout_template"]["word_pairs"])])
    rows.append(["prose: the sibling's NLL, nats per token (references)",
                 f"{judge['retrained on grammar']['sibling_nll']:.2f} ({judge['references (grammar)']['sibling_nll']:.2f})",
                 "not computed"])
    return _table(["task (`mini` 1.1.0, 100 prompts each)", "in-template", "held-out templates"], rows)


HELDOUT = Path("benchmarks/results/mini-heldout-templates")
SCORED_BY = {"add2": "the last number is the sum", "add3": "the last number is the sum",
             "word": "the last number is the answer", "fact": "the value, as a whole word",
             "json": "valid, the schema's keys and types, the requested values",
             "code": "the function passes its 5 tests in the sandbox"}


def _split_1_0(root: Path, model: str, split: str) -> dict[str, dict[str, Any]]:
    """``mini`` 1.0.0's or ``mini-ar``'s summary on one split of the 50-prompt CPU evaluation."""
    folder = _json(root, HELDOUT / f"quality_{model}.json")
    return next(iter(folder[split]["summary"].values()))


def _with_n(summary: dict[str, Any], key: str = "accuracy") -> str:
    return "-" if summary is None else f"{summary[key]:.2f} (n={summary['n']})"


def evaluation_mini_1_1(root: Path) -> str:
    """The model card's 1.1.0 table: both splits, median accept calls, and 1.0.0 and ``mini-ar`` held out."""
    scores = _quality_1_1(root)
    old, sibling = _split_1_0(root, "mini", "heldout_template"), _split_1_0(root, "mini-ar", "heldout_template")
    rows = [[label, _score(scores["in_template"][task]), _score(scores["heldout_template"][task]),
             f"{scores['heldout_template']['median_calls'][task]:g}", _with_n(old[task]), _with_n(sibling[task])]
            for task, label in TASKS]
    rows.append(["prose: English word pairs", _score(scores["in_template"]["word_pairs"]),
                 _score(scores["heldout_template"]["word_pairs"]),
                 f"{scores['heldout_template']['median_calls']['prose']:g}",
                 _with_n(old["prose"], "english_bigram_share"), _with_n(sibling["prose"], "english_bigram_share")])
    return _table(["task", "in-template", "held-out template", "median accept calls (held-out)",
                   "1.0.0, held-out", "`mini-ar`, held-out"], rows)


def heldout_mini_1_0(root: Path) -> str:
    """``mini`` 1.0.0 and ``mini-ar`` on held-out templates (CPU, float32)."""
    old, sibling = _split_1_0(root, "mini", "heldout_template"), _split_1_0(root, "mini-ar", "heldout_template")
    return _table(["task (held-out templates)", "`mini` 1.0.0", "`mini-ar`"],
                  [[label.split(" (")[0], _with_n(old[task]), _with_n(sibling[task])] for task, label in TASKS])


def splits_mini_1_0(root: Path) -> str:
    """``mini`` 1.0.0 and ``mini-ar``, in-template beside held-out template, from the same CPU evaluation."""
    columns = [_split_1_0(root, model, split) for model in ("mini", "mini-ar")
               for split in ("in_template", "heldout_template")]
    rows = [[label.split(" (")[0]] + [_with_n(c.get(task)) for c in columns] for task, label in TASKS]
    rows.append(["prose: English word pairs"] + [_with_n(c["prose"], "english_bigram_share") for c in columns])
    return _table(["task", "`mini` in-template", "`mini` held-out template", "`mini-ar` in-template",
                   "`mini-ar` held-out template"], rows)


def _quality_1_0(root: Path, model: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``mini`` 1.0.0's (``diffusion``) or ``mini-ar``'s (``autoregressive``) in-template summary and answers."""
    folder = SHIPPED if model == "diffusion" else SHIPPED / "sibling"
    summary, answers = {}, []
    for name in (f"quality_{model}_add2_add3_word_fact_json_prose.json", f"quality_{model}_code.json"):
        quality = _json(root, folder / name)
        summary.update(quality[model])
        answers += quality["answers"][model]
    return summary, answers


def quality_mini_1_0(root: Path) -> str:
    """``mini`` 1.0.0 and ``mini-ar`` on 100 in-template held-out prompts per task."""
    (mini, answers), (sibling, _) = _quality_1_0(root, "diffusion"), _quality_1_0(root, "autoregressive")
    words = [a for a in answers if a["task"] == "word"]
    rows = []
    for task, label in TASKS:
        if task not in SCORED_BY:
            continue
        cell = _score(mini[task]["accuracy"])
        if task == "word":
            cell += " ({})".format(", ".join(
                f"{name} {sum(a['score'] for a in words if sign in a['text'])} of "
                f"{sum(sign in a['text'] for a in words)}" for name, sign in (("additions", " + "),
                                                                             ("subtractions", " - "))))
        rows.append([label.split(" (")[0], SCORED_BY[task], cell, f"{mini[task]['median_accept_calls']:g}",
                     _score(sibling[task]["accuracy"])])
    return _table(["task", "scored by", "`mini` 1.0.0", "median accept calls", "`mini-ar`"], rows)


def sibling_mini_1_0(root: Path) -> str:
    """The findings' accuracy beside the sibling: ``mini`` 1.0.0, ``mini-ar`` and the references, in-template."""
    judge = _judge(root)
    (mini, _), (sibling, _) = _quality_1_0(root, "diffusion"), _quality_1_0(root, "autoregressive")
    tasks = [(task, label.split(" (")[0]) for task, label in TASKS if task in SCORED_BY]

    def prose(name: str) -> str:
        return f"{judge[name]['word_pairs']:.3f}, {judge[name]['sibling_nll']:.2f}"
    rows = [["`mini` 1.0.0"] + [_score(mini[t]["accuracy"]) for t, _ in tasks] + [prose("shipped")],
            ["`mini-ar` (greedy)"] + [_score(sibling[t]["accuracy"]) for t, _ in tasks]
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
    _, answers = _quality_1_0(root, "diffusion")
    prose = [a for a in answers if a["task"] == "prose"]
    budget = _json(root, SHIPPED / "quality_diffusion_add2_add3_word_fact_json_prose.json")["generation"][
        "max_denoising_steps"]
    ended, total = _quality_1_1(root)["in_template"]["prose_ended"]
    return {"shipped": f"{sum(a['passes'] < budget for a in prose)} of {len(prose)} stop before the {budget}-pass "
                       "budget",
            "retrained on grammar": f"{ended} of {total} close with the end-of-turn token"}


def prose_judge(root: Path) -> str:
    """The prose judge's measures of every answer set, on the 100 in-template held-out prose prompts."""
    judge, ended = _judge(root), _prose_ended(root)
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
    scores, judge = _quality_1_1(root), _judge(root)
    rows = []
    for target, met, shown, why in TARGETS:
        hit = met(scores, judge)
        rows.append([target, shown(scores, judge), "yes" if hit else "no", "" if hit else why])
    return _table(["target", "`mini` 1.1.0", "met?", "why not"], rows)


# ---------------------------------------------------------------- commit order


@cache
def _measured(folder: Path) -> tuple[GenerationMeasures, ...]:
    """Every generation of a study's traces, measured by the study's own definitions (read once per folder)."""
    return tuple(measure_generation(trace) for trace in iter_traces(sorted(folder.glob("traces*.jsonl.gz"))))


def _generations(root: Path, folder: Path) -> dict[str, list[GenerationMeasures]]:
    """Per regime, in the order of the traces, the measured generations of a study folder."""
    regimes: dict[str, list[GenerationMeasures]] = {}
    for measures in _measured((root / folder).resolve()):
        regimes.setdefault(measures.regime, []).append(measures)
    return regimes


def _block_support(rows: list[GenerationMeasures], size: int, support: validity.Support) -> validity.Support:
    """A bin-level block tau's support from its traces: prompts, and the bins its generations' answers occupy."""
    spans = [(m.prompt_id, m.block_bins[size]) for m in rows if m.block_tau[size] is not None]
    if not spans:
        return support
    return replace(support, clusters=len({prompt for prompt, _ in spans}), bins=min(b for _, b in spans),
                   narrow=sum(b < validity.MIN_BINS for _, b in spans))


def _order(root: Path, folder: Path) -> tuple[dict[str, Any], dict[str, dict[str, tuple]]]:
    """The study's metrics, and each statistic's ruling from the counts its traces give.

    Files written before the validity rules hold no per-measure prompt counts (with several seeds per prompt the
    count of generations does not give them) nor the prompts of the AUROC's minority class: both are read back
    from the traces.
    """
    metrics = _json(root, folder / "order_metrics.json")
    generations = _generations(root, folder)
    rulings = {}
    for regime, summary in metrics["regimes"].items():
        rows = generations[regime]
        canvas = rows[0].canvas_length
        ruled = validity.regime_rulings({"canvas_length": canvas, **summary}, metrics["n_bootstrap"])
        tau = replace(ruled["tau_b"][1], clusters=len({m.prompt_id for m in rows if m.tau_b is not None}))
        ruled["tau_b"] = (validity.rule(tau, canvas_length=canvas), tau)
        for size in map(int, BINS):
            block = _block_support(rows, size, ruled[f"block_tau_{size}"][1])
            ruled[f"block_tau_{size}"] = (validity.rule(block, canvas_length=canvas, bin_size=size), block)
        if "auroc" in ruled:
            auroc = ruled["auroc"][1]
            minority_correct = auroc.minority_name == "right answer"
            auroc = replace(auroc, minority_clusters=len({m.prompt_id for m in rows
                                                          if m.correct is not None and m.correct == minority_correct}))
            ruled["auroc"] = (validity.rule(auroc, canvas_length=canvas), auroc)
        rulings[regime] = ruled
    return metrics, rulings


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
        f" from {_count(support.minority_clusters, 'prompt')}"
    return text + f" ({_count(support.minority, support.minority_name)}{prompts})"


def _order_table(root: Path, folder: Path) -> str:
    """A study's commit order per regime: tau_b, block tau (bin level, token level), accuracy, AUROC."""
    metrics, rulings = _order(root, folder)
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
    metrics = _json(root, folder / "order_metrics.json")
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
    metrics, rulings = _order(root, SHIPPED / "order_study_cpu")
    generations = _generations(root, SHIPPED / "order_study_cpu")
    rows = []
    for regime, s in metrics["regimes"].items():
        measured = generations[regime]
        defined = [m for m in measured if m.tau_b is not None]
        one_call = sum(m.undefined.get("tau_b") == ONE_CALL for m in measured)
        ruling, support = rulings[regime]["tau_b"]
        rows.append([regime, f"{statistics.median(m.content_positions for m in measured):g}",
                     f"{one_call} of {len(measured)}",
                     f"{_count(len(defined), 'generation')} of {_count(support.clusters, 'prompt')}",
                     _without_interval(s["tau_b"], s["tau_b_ci"], ruling)])
    return _table(["regime (`mini` 1.0.0)", "content tokens (median)", "committed in one call", "tau_b defined for",
                   "tau_b [95% CI]"], rows)


def auroc_mini_1_0(root: Path) -> str:
    """``mini`` 1.0.0: does commit entropy rank wrong answers below right ones, and on how many wrong answers."""
    metrics, rulings = _order(root, SHIPPED / "order_study_cpu")
    generations = _generations(root, SHIPPED / "order_study_cpu")
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
                     + (f", from {_count(wrong_prompts, 'prompt')}" if wrong else ""), why])
    pooled = metrics["pooled_auroc"]
    rows.append(["pooled (a diagnostic)", f"{pooled['value']:.3f} ({pooled['n']} generations); Simpson flag "
                 f"{'raised' if pooled['simpson_prone'] else 'not raised'}", "-", "-"])
    return _table(["regime (`mini` 1.0.0)", "AUROC of mean commit entropy [95% CI]", "wrong answers",
                   "why no interval"], rows)


# ---------------------------------------------------------------- noise study


def noise_mini_1_1(root: Path) -> str:
    """The noise study's run of record on ``mini`` 1.1.0: the primary outcome's two comparisons, flagged."""
    report = _json(root, GRAMMAR / "noise_study" / "confirmatory" / "noise_study.json")
    rows = []
    for e in (e for e in report["effects"] if e["primary"]):
        flags = e["flags"] if "flags" in e else validity.effect_flags(e, e.get("unit", "pair"))
        ci = f"[{e['ci'][0]:+.3f}, {e['ci'][1]:+.3f}]" if validity.effect_interval_allowed(e) and e["ci"] else "-"
        rows.append([e["comparison"], str(e["n_pairs"]), f"{e['mean_difference']:+.3f}", f"{e['sd']:.3f}", ci,
                     f"{e['tost_p']:.2g}", f"{e['p_two_sided']:.2g}", e["verdict"], "; ".join(flags) or "-"])
    return _table([f"comparison (primary: `{report['conclusion']['primary_outcome']}`)", "prompts",
                   "mean difference, nats", "sd", "95% CI", "TOST p", "two-sided p", "verdict", "flag"], rows)


def noise_mini_1_0(root: Path) -> str:
    """The noise study's default design on ``mini`` 1.0.0 (H200): every outcome's two comparisons, the answer."""
    report = _json(root, SHIPPED / "noise_study" / "noise_study.json")
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
    scores, judge = _quality_1_1(root), _judge(root)
    held, inside = scores["heldout_template"], scores["in_template"]
    quality = (", ".join(f"{label.split(' (')[0]} {held[task]:.2f}" for task, label in TASKS)
               + f"; prose word pairs {held['word_pairs']:.2f} (no NLL computed on held-out prompts); in-template "
               f"prose: word pairs {inside['word_pairs']:.2f}, the sibling's NLL "
               f"{judge['retrained on grammar']['sibling_nll']:.2f} nats (references "
               f"{judge['references (grammar)']['sibling_nll']:.2f})")
    metrics, rulings = _order(root, GRAMMAR / "order_study_cpu")
    math = metrics["regimes"]["math"]
    ruling, support = rulings["math"]["tau_b"]
    tau = validity.format_value(math["tau_b"], math["tau_b_ci"], ruling, 2, support)
    order = (f"tau_b math {tau} on worked sums (block tau {_block(math, rulings['math'], 'block_tau')} at bins of "
             f"4 to 64: the canvas holds 128 positions, so bins of 64 give 2 bins, a split share, and no value is set "
             f"beside the paper's 256-position canvas); AUROC math {_auroc(math, rulings['math'])}, no interval; "
             f"facts {metrics['regimes']['factual']['tau_b']:.2f}, prose {metrics['regimes']['open_ended']['tau_b']:.2f}")
    report = _json(root, GRAMMAR / "noise_study" / "confirmatory" / "noise_study.json")
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
    (mini, answers), (sibling, _) = _quality_1_0(root, "diffusion"), _quality_1_0(root, "autoregressive")
    judge = _judge(root)
    tasks = [(task, label.split(" (")[0]) for task, label in TASKS if task in SCORED_BY]
    quality = (", ".join(f"{label} {mini[task]['accuracy']:.2f}" for task, label in tasks)
               + f"; prose word pairs {judge['shipped']['word_pairs']:.2f}, not English; `mini-ar`: "
               + ", ".join(f"{sibling[task]['accuracy']:.2f}" for task, _ in tasks)
               + f", prose {judge['sibling greedy']['word_pairs']:.2f}")
    large = _json(root, Path("benchmarks/results/mini-noise-first-pass-large/confirmatory/noise_study.json"))
    sandbox = _json(root, Path("benchmarks/results/cpu-sandbox-overhead/cpu_sandbox_overhead.json"))
    engine = _json(root, Path("benchmarks/results/cpu-engine-ray-scaling/cpu_engine_ray_scaling_tiny_idle.json"))
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


RENDERERS: dict[str, Callable[[Path], str]] = {
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
    "noise-mini-1.0": noise_mini_1_0,
}


# ---------------------------------------------------------------- figures inside a sentence

NOISE = {"mini-1.0-default": SHIPPED / "noise_study",
         "mini-1.0-first-pass": Path("benchmarks/results/mini-noise-first-pass/confirmatory"),
         "mini-1.0-large": Path("benchmarks/results/mini-noise-first-pass-large/confirmatory"),
         "mini-1.1": GRAMMAR / "noise_study" / "confirmatory",
         "mini-1.1-h200": GRAMMAR / "noise_study" / "confirmatory-gpu",
         "mini-1.1-h200-stock": GRAMMAR / "noise_study" / "confirmatory-stock-gpu",
         "mini-1.1-pilot": GRAMMAR / "noise_study" / "pilot",
         "mini-1.0-large-pilot": Path("benchmarks/results/mini-noise-first-pass-large/pilot"),
         "mini-1.0-first-pass-cpu": Path("benchmarks/results/mini-noise-first-pass/confirmatory-cpu"),
         "mini-1.0-first-pass-stock-h100": Path("benchmarks/results/mini-noise-first-pass/confirmatory-stock-gpu"),
         "mini-1.0-first-pass-stock-cpu": Path("benchmarks/results/mini-noise-first-pass/confirmatory-stock-cpu")}
DISTILLATION = Path("benchmarks/results/mini-distillation-cpu")


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _quality_values(root: Path) -> dict[str, str]:
    scores = _quality_1_1(root)
    (mini, _), (sibling, _) = _quality_1_0(root, "diffusion"), _quality_1_0(root, "autoregressive")
    values = {}
    for task, _ in TASKS:
        values[f"mini-1.1.in.{task}"] = _percent(scores["in_template"][task])
        values[f"mini-1.1.heldout.{task}"] = _percent(scores["heldout_template"][task])
        values[f"mini-1.0.heldout.{task}"] = _percent(_split_1_0(root, "mini", "heldout_template")[task]["accuracy"])
        values[f"mini-ar.heldout.{task}"] = _percent(_split_1_0(root, "mini-ar", "heldout_template")[task]["accuracy"])
        if task in mini:
            values[f"mini-1.0.in.{task}"] = _percent(mini[task]["accuracy"])
            values[f"mini-ar.in.{task}"] = _percent(sibling[task]["accuracy"])
    for name, key in (("shipped", "mini-1.0"), ("retrained on grammar", "mini-1.1"), ("references", "references"),
                      ("references (grammar)", "references-grammar"), ("sibling greedy", "mini-ar")):
        judged = _judge(root)[name]
        values[f"judge.{key}.word-pairs"] = f"{judged['word_pairs']:.2f}"
        values[f"judge.{key}.nll"] = f"{judged['sibling_nll']:.2f}"
    values["judge.mini-1.1.held-out.word-pairs"] = f"{scores['heldout_template']['word_pairs']:.2f}"
    values["judge.mini-1.1.frequent-words"] = f"{_judge(root)['retrained on grammar']['frequent_word_share']:.2f}"
    values["judge.references-grammar.frequent-words"] = \
        f"{_judge(root)['references (grammar)']['frequent_word_share']:.2f}"
    distilled = _json(root, DISTILLATION / "judge.json")["sets"]
    for name, key in (("run 8 (shipped, H200)", "shipped"), ("run 8 + 300 steps own prose", "own"),
                      ("run 8 + 300 steps distilled prose", "distilled"),
                      ("run 8 + 300 steps distilled prose, seed 1", "distilled-seed-1")):
        values[f"distillation.{key}.word-pairs"] = f"{distilled[name]['summary']['word_pairs']:.2f}"
        values[f"distillation.{key}.nll"] = f"{distilled[name]['summary']['sibling_nll']:.2f}"
    return values


def _noise_values(root: Path) -> dict[str, str]:
    """Per noise-study run: each primary comparison as ``mean [low, high]`` in nats, the answer, the boosts."""
    values = {}
    for key, folder in NOISE.items():
        report = _json(root, folder / "noise_study.json")
        values[f"noise.{key}.answer"] = report["conclusion"]["answer"]
        if "prompts" in report:
            values[f"noise.{key}.prompts"] = str(report["prompts"])
        values[f"noise.{key}.safeguard"] = f"{report['safeguard']['fired']}/{report['safeguard']['compared']}"
        for e in (e for e in report["effects"] if e["primary"]):
            name = e["comparison"].split(" - ")[1]
            digits = 2 if abs(e["mean_difference"]) >= 0.1 else 3
            values[f"noise.{key}.{name}"] = f"{e['mean_difference']:+.{digits}f}" + (
                f" [{e['ci'][0]:+.{digits}f}, {e['ci'][1]:+.{digits}f}]" if e["ci"] else "")
            values[f"noise.{key}.{name}.sd"] = f"{e['sd']:.2f}"
        for name, means in report["class_means"].items():
            if "planted_logprob_boost" in means:
                values[f"noise.{key}.boost.{name}"] = f"{means['planted_logprob_boost']:.2f}"
    return values


def _order_values(root: Path) -> dict[str, str]:
    values = {}
    for key, folder in (("mini-1.1", GRAMMAR), ("mini-1.0", SHIPPED)):
        metrics = _json(root, folder / "order_study_cpu" / "order_metrics.json")
        for regime, summary in metrics["regimes"].items():
            values[f"order.{key}.{regime}.tau"] = f"{summary['tau_b']:.2f}"
            values[f"order.{key}.{regime}.accuracy"] = _score(summary["accuracy"])
            if summary["auroc"] is not None:
                values[f"order.{key}.{regime}.auroc"] = f"{summary['auroc']:.2f}"
                values[f"order.{key}.{regime}.auroc-skipped"] = f"{summary['auroc_ci_resamples_skipped']:,}"
            for third in summary.get("reliability") or ():
                values[f"order.{key}.{regime}.right-in-third-{third['tertile']}"] = _percent(third["accuracy"])
    return values


SERVE = {"h100-6l": Path("benchmarks/results/h100-serve-load"), "h200-30l": Path("benchmarks/results/h200-serve-load-30l"),
         "cpu-mini": Path("benchmarks/results/cpu-serve-load"), "cpu-tiny": Path("benchmarks/results/cpu-serve-load-tiny")}


def _serve_values(root: Path) -> dict[str, str]:
    """Per serve-load run and mode: probe answers differing from their answers alone, and the requests/s range."""
    values = {}
    for key, folder in SERVE.items():
        for mode, run in _json(root, folder / "serve_load.json")["modes"].items():
            levels = run["levels"]
            rates = [level["requests_per_s"] for level in levels]
            values[f"serve.{key}.{mode}.differing"] = (f"{sum(len(level['differing']) for level in levels)} of "
                                                       f"{sum(level['probe_answers'] for level in levels)}")
            digits = 2 if max(rates) < 2 else 1  # a CPU's rates below 2 requests/s need the second digit
            values[f"serve.{key}.{mode}.requests"] = f"{min(rates):.{digits}f}-{max(rates):.{digits}f}"
    return values


def _batch_values(root: Path) -> dict[str, str]:
    """The stock batch-size study at real shapes: runs diverged, texts changed, passes matching."""
    summary = _json(root, Path("benchmarks/results/h200-batch-study/h200_batch_study_real_shapes_6l_bf16.json"))[
        "summary"]
    return {"batch.h200.diverged": f"{summary['diverged']}/{summary['runs']}",
            "batch.h200.text-changed": f"{summary['text_changed']}/{summary['runs']}",
            "batch.h200.passes-matching": f"{summary['passes_matching']}/{summary['passes_total']}"}


TRAINING = {"mini-1.1": (GRAMMAR / "training.json", "diffusion"), "mini-1.0": (SHIPPED / "training.json", "diffusion"),
            "mini-ar": (SHIPPED / "sibling" / "training.json", "autoregressive")}


def _training_values(root: Path) -> dict[str, str]:
    """Each training run's pool, parameters, clock, tokens and last step, from its ``training.json``."""
    values = {}
    for key, (path, model) in TRAINING.items():
        training = _json(root, path)
        run, last = training[model], training[model]["history"][-1]
        values.update({f"training.{key}.pool-examples": f"{training['pool_examples']:,}",
                       f"training.{key}.pool-tokens": f"{training['pool_tokens']:,}",
                       f"training.{key}.parameters": f"{run['parameters']:,}",
                       f"training.{key}.seconds": f"{run['train_seconds']:,.1f}",
                       f"training.{key}.tokens": f"{last['tokens']:,}",
                       f"training.{key}.skipped": f"{last['skipped_steps']}",
                       f"training.{key}.loss": f"{last['loss']:.3f}"})
        if "content_loss" in last:
            values[f"training.{key}.content-loss"] = f"{last['content_loss']:.2f}"
            values[f"training.{key}.content-accuracy"] = f"{last['content_accuracy']:.2f}"
        for task, count in training["mixture_counts"].items():
            values[f"training.{key}.examples.{task}"] = f"{count:,}"
    for key, folder in (("mini-1.1", GRAMMAR), ("mini-1.0", SHIPPED)):
        counts = _json(root, folder / "noise_study" / "counts.json")
        values[f"pool.{key}.ids-seen"] = f"{counts['ids_seen']:,}"
        values[f"pool.{key}.unused-seen"] = f"{counts['unused_occurrences']:,} of the {counts['unused_ids']:,}"
    return values


def figures(root: Path) -> dict[str, str]:
    """Every figure a sentence may carry, by name: ``<!-- value:NAME -->FIGURE<!-- /value -->`` on a page."""
    return {**_quality_values(root), **_noise_values(root), **_order_values(root), **_serve_values(root),
            **_batch_values(root), **_training_values(root)}


VALUE = re.compile(r"(<!-- value:(?P<name>[a-z0-9.-]+) -->)(?P<body>.*?)(<!-- /value -->)")


def render_page(text: str, root: Path) -> str:
    """The page with every evidence region and every figure in a sentence refilled from its result files."""
    def fill(match: re.Match) -> str:
        name = match["name"]
        if name not in RENDERERS:
            raise CanvaslabError(f"evidence: no renderer named {name!r} (known: {', '.join(RENDERERS)})")
        return f"{match[1]}{RENDERERS[name](root)}\n{match[4]}"
    text = REGION.sub(fill, text)
    if not VALUE.search(text):
        return text
    known = figures(root)

    def value(match: re.Match) -> str:
        if match["name"] not in known:
            raise CanvaslabError(f"evidence: no figure named {match['name']!r}")
        return f"{match[1]}{known[match['name']]}{match[4]}"
    return VALUE.sub(value, text)


def _page(root: Path, page: str) -> str:
    path = root / page
    if not path.is_file():
        raise CanvaslabError(f"evidence: the page {path} is missing")
    return path.read_text(encoding="utf-8")


def stale_regions(root: Path, pages: tuple[str, ...] = PAGES) -> list[str]:
    """``page: region`` for every region whose text differs from its files."""
    stale = []
    for page in pages:
        text = _page(root, page)
        rendered = render_page(text, root)
        fresh = {m["name"]: m["body"] for m in REGION.finditer(rendered)}
        stale += [f"{page}: {m['name']}" for m in REGION.finditer(text) if fresh[m["name"]] != m["body"]]
        stale += [f"{page}: value {old['name']} ({old['body']}, the files say {new['body']})"
                  for old, new in zip(VALUE.finditer(text), VALUE.finditer(rendered)) if old["body"] != new["body"]]
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m canvaslab.reports.evidence", description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository root (default: .)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a region differs")
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = stale_regions(args.root)
            print("\n".join(stale) or "every evidence region matches its files")
            return 1 if stale else 0
        for page in PAGES:
            (args.root / page).write_text(render_page(_page(args.root, page), args.root), encoding="utf-8")
    except CanvaslabError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
