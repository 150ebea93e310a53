"""Figures inside sentences: ``<!-- value:NAME -->FIGURE<!-- /value -->``, each read from its result file."""

from __future__ import annotations

import json
from pathlib import Path

from canvaslab.reports.evidence.sources import (
    DISTILLATION, GRAMMAR, SHIPPED, TASKS, blind_evaluations, judged_prose, percent_text, quality_1_0, quality_1_1,
    result_file, score_text, split_1_0,
)
from canvaslab.scoring.probes.extraction import first_json_object

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
SERVE = {"h100-6l": Path("benchmarks/results/h100-serve-load"),
         "h200-30l": Path("benchmarks/results/h200-serve-load-30l"),
         "cpu-mini": Path("benchmarks/results/cpu-serve-load"),
         "cpu-tiny": Path("benchmarks/results/cpu-serve-load-tiny")}
TRAINING = {"mini-1.1": (GRAMMAR / "training.json", "diffusion"),
            "mini-1.0": (SHIPPED / "training.json", "diffusion"),
            "mini-ar": (SHIPPED / "sibling" / "training.json", "autoregressive")}


def _quality_values(root: Path) -> dict[str, str]:
    scores = quality_1_1(root)
    (mini, _), (sibling, _) = quality_1_0(root, "diffusion"), quality_1_0(root, "autoregressive")
    old, sibling_heldout = split_1_0(root, "mini", "heldout_template"), split_1_0(root, "mini-ar", "heldout_template")
    values = {}
    for task, _ in TASKS:
        values[f"mini-1.1.in.{task}"] = percent_text(scores["in_template"][task])
        values[f"mini-1.1.heldout.{task}"] = percent_text(scores["heldout_template"][task])
        values[f"mini-1.0.heldout.{task}"] = percent_text(old[task]["accuracy"])
        values[f"mini-ar.heldout.{task}"] = percent_text(sibling_heldout[task]["accuracy"])
        if task in mini:
            values[f"mini-1.0.in.{task}"] = percent_text(mini[task]["accuracy"])
            values[f"mini-ar.in.{task}"] = percent_text(sibling[task]["accuracy"])
    for name, key in (("shipped", "mini-1.0"), ("retrained on grammar", "mini-1.1"), ("references", "references"),
                      ("references (grammar)", "references-grammar"), ("sibling greedy", "mini-ar")):
        judged = judged_prose(root)[name]
        values[f"judge.{key}.word-pairs"] = f"{judged['word_pairs']:.2f}"
        values[f"judge.{key}.nll"] = f"{judged['sibling_nll']:.2f}"
    values["judge.mini-1.1.held-out.word-pairs"] = f"{scores['heldout_template']['word_pairs']:.2f}"
    values["judge.mini-1.1.frequent-words"] = f"{judged_prose(root)['retrained on grammar']['frequent_word_share']:.2f}"
    values["judge.references-grammar.frequent-words"] = \
        f"{judged_prose(root)['references (grammar)']['frequent_word_share']:.2f}"
    distilled = result_file(root, DISTILLATION / "judge.json")["sets"]
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
        report = result_file(root, folder / "noise_study.json")
        plan = result_file(root, folder / "plan.json") if (root / folder / "plan.json").is_file() else {}
        power = plan.get("first_pass", {}).get("power")
        if power:
            values[f"noise.{key}.power"] = f"{power['tost_power_per_comparison']:.2f}"
            values[f"noise.{key}.prompts-needed"] = str(power["prompts_needed"])
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
            for field, label in (("tost_p", "tost-p"), ("p_two_sided", "two-sided-p")):
                if e.get(field) is not None:
                    values[f"noise.{key}.{name}.{label}"] = f"{e[field]:.2g}"
        for name, means in report["class_means"].items():
            if "planted_logprob_boost" in means:
                values[f"noise.{key}.boost.{name}"] = f"{means['planted_logprob_boost']:.2f}"
    return values


def _order_values(root: Path) -> dict[str, str]:
    values = {}
    for key, folder in (("mini-1.1", GRAMMAR), ("mini-1.0", SHIPPED)):
        metrics = result_file(root, folder / "order_study_cpu" / "order_metrics.json")
        for regime, summary in metrics["regimes"].items():
            values[f"order.{key}.{regime}.tau"] = f"{summary['tau_b']:.2f}"
            values[f"order.{key}.{regime}.accuracy"] = score_text(summary["accuracy"])
            if summary["auroc"] is not None:
                values[f"order.{key}.{regime}.auroc"] = f"{summary['auroc']:.2f}"
                values[f"order.{key}.{regime}.auroc-skipped"] = f"{summary['auroc_ci_resamples_skipped']:,}"
            for third in summary.get("reliability") or ():
                values[f"order.{key}.{regime}.right-in-third-{third['tertile']}"] = percent_text(third["accuracy"])
    return values


def _serve_values(root: Path) -> dict[str, str]:
    """Per serve-load run and mode: probe answers differing from their answers alone, and the requests/s range."""
    values = {}
    for key, folder in SERVE.items():
        for mode, run in result_file(root, folder / "serve_load.json")["modes"].items():
            levels = run["levels"]
            rates = [level["requests_per_s"] for level in levels]
            values[f"serve.{key}.{mode}.differing"] = (f"{sum(len(level['differing']) for level in levels)} of "
                                                       f"{sum(level['probe_answers'] for level in levels)}")
            digits = 2 if max(rates) < 2 else 1  # a CPU's rates below 2 requests/s need the second digit
            values[f"serve.{key}.{mode}.requests"] = f"{min(rates):.{digits}f}-{max(rates):.{digits}f}"
    return values


def _batch_values(root: Path) -> dict[str, str]:
    """The stock batch-size study at real shapes: runs diverged, texts changed, passes matching."""
    summary = result_file(root, Path("benchmarks/results/h200-batch-study/h200_batch_study_real_shapes_6l_bf16.json"))[
        "summary"]
    return {"batch.h200.diverged": f"{summary['diverged']}/{summary['runs']}",
            "batch.h200.text-changed": f"{summary['text_changed']}/{summary['runs']}",
            "batch.h200.passes-matching": f"{summary['passes_matching']}/{summary['passes_total']}"}


def _training_values(root: Path) -> dict[str, str]:
    """Each training run's pool, parameters, clock, tokens and last step, from its ``training.json``."""
    values = {}
    for key, (path, model) in TRAINING.items():
        training = result_file(root, path)
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
        counts = result_file(root, folder / "noise_study" / "counts.json")
        values[f"pool.{key}.ids-seen"] = f"{counts['ids_seen']:,}"
        values[f"pool.{key}.unused-seen"] = f"{counts['unused_occurrences']:,} of the {counts['unused_ids']:,}"
    return values


def blind_failures(answers: list[dict]) -> dict[str, str]:
    """How a release's blind answers go wrong, read from each answer and its item key (``tasks.blind``)."""
    words = [a for a in answers if a["task"] == "word"]
    signs = {"gain": ("We add", " + "), "loss": ("We subtract", " - ")}
    right_operation = [a for a in words if any(s in a["text"] for s in signs[a["key"].split(":")[2][:4]])]
    objects = [(first_json_object(a["text"]), json.loads(a["key"].split(":", 3)[3]))
               for a in answers if a["task"] == "json"]
    code = [a for a in answers if a["task"] == "code"]
    named = sum(f"def {a['key'].rsplit(':', 1)[1]}(" in a["text"] for a in code)
    return {"word.right-operation": f"{len(right_operation)} of {len(words)}",
            "word.right-operation-wrong-result": str(sum(not a["score"] for a in right_operation)),
            "json.parsed": f"{sum(found is not None for found, _ in objects)} of {len(objects)}",
            "json.every-key": str(sum(found is not None and set(asked) <= set(found) for found, asked in objects)),
            "code.named": f"{named} of {len(code)}"}


def _blind_values(root: Path) -> dict[str, str]:
    """Per release on the blind set (``blind.MODEL-VERSION.…``): k/n per task and its failures, counted."""
    values = {}
    for entry, result in blind_evaluations(root):
        if entry["rerun"]:
            continue
        label = f"blind.{result['model']}-{result['release'].rsplit(' ', 1)[1]}"
        values.update({f"{label}.{name}": value for name, value in blind_failures(result["answers"]).items()})
        values.update({f"{label}.{task}": f"{cell['k']}/{cell['n']}" for task, cell in result["summary"].items()})
    return values


def figures(root: Path) -> dict[str, str]:
    """Every figure a sentence may carry, by name: ``<!-- value:NAME -->FIGURE<!-- /value -->`` on a page."""
    return {**_quality_values(root), **_noise_values(root), **_order_values(root), **_serve_values(root),
            **_batch_values(root), **_training_values(root), **_blind_values(root)}
