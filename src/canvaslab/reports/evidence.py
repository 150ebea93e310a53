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
import sys
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any, Callable

from canvaslab.analysis import validity
from canvaslab.errors import CanvaslabError

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
        scores[split]["median_calls"] = {task: summary[task]["median_accept_calls"] for task, _ in TASKS
                                         if task in summary}
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


def _canvas_length(folder: Path) -> int:
    """The canvas length of a study's generations: the first trace's ``content`` mask."""
    path = next(iter(sorted(folder.glob("traces*.jsonl.gz"))))
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return len(json.loads(handle.readline())["content"])


def _tau_b_prompts(folder: Path) -> dict[str, set[str]]:
    """Per regime, the prompts with a generation whose tau_b is defined (content committed over 2+ calls).

    Files written before the validity rules hold no per-measure prompt counts; with several seeds per prompt the
    count of generations alone does not give them, so they are read back from the traces.
    """
    prompts: dict[str, set[str]] = {}
    for path in sorted(folder.glob("traces*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for line in handle:
                trace = json.loads(line)
                commit: dict[int, int] = {}
                for index, call in enumerate(trace["calls"]):
                    for position in call["accepted"]:
                        commit.setdefault(position, index)
                calls = {commit[p] for p, content in enumerate(trace["content"]) if content and p in commit}
                if len(calls) > 1:
                    prompts.setdefault(trace["regime"], set()).add(trace["prompt_id"])
    return prompts


def _order(root: Path, folder: Path) -> tuple[dict[str, Any], dict[str, dict[str, tuple]]]:
    metrics = _json(root, folder / "order_metrics.json")
    canvas = _canvas_length(root / folder)
    exact = _tau_b_prompts(root / folder) if metrics["n_generations"] > sum(
        s["n_prompts"] for s in metrics["regimes"].values()) else None
    rulings = {}
    for regime, summary in metrics["regimes"].items():
        ruled = validity.regime_rulings({"canvas_length": canvas, **summary}, metrics["n_bootstrap"])
        if exact is not None:
            support = replace(ruled["tau_b"][1], clusters=len(exact.get(regime, ())))
            ruled["tau_b"] = (validity.rule(support, canvas_length=canvas), support)
        rulings[regime] = ruled
    return metrics, rulings


def _block(summary: dict[str, Any], rulings: dict[str, tuple], kind: str) -> str:
    cells = []
    for size in BINS:
        ruling, support = rulings[f"{kind}_{size}"]
        cells.append(validity.format_value(summary[kind][size], None, ruling, 2, support))
    return " / ".join(cells)


def _auroc(summary: dict[str, Any], rulings: dict[str, tuple]) -> str:
    if summary.get("auroc") is None:
        return "- (one class)" if summary.get("accuracy") is not None else "-"
    ruling, support = rulings["auroc"]
    text = validity.format_value(summary["auroc"], summary["auroc_ci"], ruling, 2)
    return text + f" ({support.minority} {support.minority_name}{'' if support.minority == 1 else 's'})"


def order_mini_1_1(root: Path) -> str:
    """Commit order on ``mini`` 1.1.0 (CPU, one seed): tau_b, block tau (bin level, token level), AUROC."""
    metrics, rulings = _order(root, GRAMMAR / "order_study_cpu")
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


def order_mini_1_0(root: Path) -> str:
    """Commit order on ``mini`` 1.0.0 (CPU, 5 seeds x 20 prompts per regime)."""
    metrics, rulings = _order(root, SHIPPED / "order_study_cpu")
    baseline = metrics["baseline"]["regimes"]
    rows = []
    for regime, s in metrics["regimes"].items():
        ruling, support = rulings[regime]["tau_b"]
        tau = validity.format_value(s["tau_b"], s["tau_b_ci"], ruling, support=support)
        if not ruling.interval:
            tau += f" (no CI: {support.generations} generations of {support.clusters} prompts)"
        rows.append([regime, tau, f"{s['tokens_per_call']:.1f}", f"{s['accept_calls']['mean']:.1f}",
                     _accuracy(s, baseline.get(regime))])
    return _table(["regime (`mini` 1.0.0)", "tau_b [95% CI]", "tokens per call", "accept calls (budget 48)",
                   "accuracy (`mini-ar`)"], rows)


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


GRADED = Path("benchmarks/results/mini-noise-v4")


def _count_range(stratum: dict[str, Any]) -> str:
    low, high = stratum["range"]
    return f"{low}" if low == high else f"{low}-{high}" if high is not None else f"> {low - 1}"


def noise_mini_v4(root: Path) -> str:
    """The graded noise study's run of record: per arm and frequency stratum, unused minus the stratum."""
    report = _json(root, GRADED / "confirmatory" / "noise_study.json")
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


RENDERERS: dict[str, Callable[[Path], str]] = {
    "readme-mini-1.1": readme_mini_1_1,
    "quality-mini-1.1": quality_mini_1_1,
    "targets-mini-1.1": targets_mini_1_1,
    "order-mini-1.1": order_mini_1_1,
    "order-mini-1.0": order_mini_1_0,
    "noise-mini-1.1": noise_mini_1_1,
    "noise-mini-v4": noise_mini_v4,
}


def render_page(text: str, root: Path) -> str:
    """The page with every evidence region refilled from its result files."""
    def fill(match: re.Match) -> str:
        name = match["name"]
        if name not in RENDERERS:
            raise CanvaslabError(f"evidence: no renderer named {name!r} (known: {', '.join(RENDERERS)})")
        return f"{match[1]}{RENDERERS[name](root)}\n{match[4]}"
    return REGION.sub(fill, text)


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
        fresh = {m["name"]: m["body"] for m in REGION.finditer(render_page(text, root))}
        stale += [f"{page}: {m['name']}" for m in REGION.finditer(text) if fresh[m["name"]] != m["body"]]
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
