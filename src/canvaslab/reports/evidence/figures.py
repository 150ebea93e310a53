"""Figures inside sentences: ``<!-- value:NAME -->FIGURE<!-- /value -->``, each read from its result file."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from canvaslab.analysis import validity
from canvaslab.reports.evidence.tables import GRADED
from canvaslab.reports.evidence.gpu import (
    SERVE, gpu_values, h100_values, rates_text, routing_values, serve_figures, serve_runs,
)
from canvaslab.reports.evidence.sources import (
    BINS, DISTILLATION, GRAMMAR, HELDOUT, SHIPPED, TASKS, blind_evaluations, counted, heldout_answers_1_1,
    judged_prose, measured_regimes, order_rulings, percent_text, quality_1_0, quality_1_1, result_file, score_text,
    split_1_0,
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
    words = [answer for answer in quality_1_0(root, "diffusion")[1] if answer["task"] == "word"]
    for name, sign in (("additions", " + "), ("subtractions", " - ")):
        asked = [answer for answer in words if sign in answer["text"]]
        values[f"mini-1.0.in.word.{name}"] = f"{sum(answer['score'] for answer in asked)} of {len(asked)}"
    values.update(_wrong_1_0(root))
    prose = [answer for answer in quality_1_0(root, "diffusion")[1] if answer["task"] == "prose"]
    budget = result_file(root, SHIPPED / "quality_diffusion_add2_add3_word_fact_json_prose.json")["generation"][
        "max_denoising_steps"]
    values["mini-1.0.in.prose.to-budget"] = f"{sum(answer['passes'] >= budget for answer in prose)} of {len(prose)}"
    quality = result_file(root, GRAMMAR / "quality_gpu.json")
    values["mini-1.1.per-task"] = str(quality["per_task"])
    values["mini-1.1.budget"] = str(quality["generation"]["max_denoising_steps"])
    values["mini-1.0.heldout.per-task"] = str(result_file(root, HELDOUT / "quality_mini.json")["per_task"])
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


_OPERATION = re.compile(r"\d+ ([+-]) \d+")
_FUNCTION_NAME = re.compile(r"def (\w+)\(")


def _operation(text: str) -> str | None:
    """The sign of the first ``a + b`` or ``a - b`` a worked answer writes."""
    found = _OPERATION.search(text)
    return found[1] if found else None


def _parsed_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _wrong_1_0(root: Path) -> dict[str, str]:
    """``mini`` 1.0.0's and ``mini-ar``'s wrong in-template answers: word problems by operation, and sums."""
    values = {}
    for key, model in (("mini-1.0", "diffusion"), ("mini-ar", "autoregressive")):
        answers = quality_1_0(root, model)[1]
        for name, sign in (("additions", "+"), ("subtractions", "-")):
            asked = [a for a in answers if a["task"] == "word" and f" {sign} " in a["text"]]  # as the tables count
            values[f"{key}.in.word.{name}-wrong"] = f"{sum(not a['score'] for a in asked)} of {len(asked)}"
        sums = [a for a in answers if a["task"] in ("add2", "add3")]
        values[f"{key}.in.sums-wrong"] = f"{sum(not a['score'] for a in sums)} of {len(sums)}"
    return values


def _failure_values(root: Path) -> dict[str, str]:
    """How ``mini`` 1.1.0 fails on held-out templates, counted from its stored answers."""
    answers = heldout_answers_1_1(root)
    values = {f"mini-1.1.heldout-right.{task}": f"{sum(a['score'] for a in found)} of {len(found)}"
              for task, found in answers.items() if task != "prose"}  # prose is scored by a share, not right/wrong
    words = answers["word"]
    wrong = sum(_operation(a["expected"]) != _operation(a["text"]) for a in words)
    values["mini-1.1.heldout.word.wrong-operation"] = f"{wrong} of {len(words)}"
    parsed = [(json.loads(a["expected"]), _parsed_json(a["text"])) for a in answers["json"]]
    objects = [(wanted, got) for wanted, got in parsed if got is not None]
    values["mini-1.1.heldout.json.parsed"] = f"{len(objects)} of {len(parsed)}"
    values["mini-1.1.heldout.json.requested-keys"] = str(sum(isinstance(got, dict) and set(wanted) <= set(got)
                                                             for wanted, got in objects))
    named = sum(f"def {_FUNCTION_NAME.search(a['expected'])[1]}(" in a["text"] for a in answers["code"])
    values["mini-1.1.heldout.code.requested-name"] = f"{named} of {len(answers['code'])}"
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
        values[f"noise.{key}.conditions"] = f"{report['conditions_run']:,}"
        class_conditions = {means.get("conditions") for means in report["class_means"].values()}
        if len(class_conditions) == 1 and None not in class_conditions:
            values[f"noise.{key}.class-conditions"] = f"{class_conditions.pop():,}"
        if "prompts" in report:
            values[f"noise.{key}.prompts"] = str(report["prompts"])
        values[f"noise.{key}.safeguard"] = f"{report['safeguard']['fired']}/{report['safeguard']['compared']}"
        for e in (e for e in report["effects"] if e["primary"]):
            name = e["comparison"].split(" - ")[1]
            digits = 2 if abs(e["mean_difference"]) >= 0.1 else 3
            values[f"noise.{key}.{name}"] = f"{e['mean_difference']:+.{digits}f}" + (
                f" [{e['ci'][0]:+.{digits}f}, {e['ci'][1]:+.{digits}f}]" if e["ci"] else "")
            values[f"noise.{key}.{name}.sd"] = f"{e['sd']:.2f}"
            values[f"noise.{key}.{name}.pairs"] = f"{e['n_pairs']:,}"
            for field, label in (("tost_p", "tost-p"), ("p_two_sided", "two-sided-p")):
                if e.get(field) is not None:
                    values[f"noise.{key}.{name}.{label}"] = f"{e[field]:.2g}"
        for name, means in report["class_means"].items():
            if "planted_logprob_boost" in means:
                values[f"noise.{key}.boost.{name}"] = f"{means['planted_logprob_boost']:.2f}"
    return values


def _graded_noise_values(root: Path) -> dict[str, str]:
    """The graded noise study's run of record: prompts, the prompts its power rule asked for, safeguard, common."""
    report = result_file(root, GRADED / "confirmatory" / "noise_study.json")
    power = result_file(root, GRADED / "confirmatory" / "plan.json")["first_pass"]["power"]["per_comparison"]
    plan = result_file(root, GRADED / "confirmatory" / "plan.json")["first_pass"]["power"]
    pilot = result_file(root, GRADED / "pilot" / "noise_study.json")
    values = {"noise.graded.prompts": str(report["prompts"]),
              "noise.graded.prompts-needed": str(max(c["prompts_needed"] for c in power.values())),
              "noise.graded.planning-sd": f"{plan['planning_sd']:.2f}",
              "noise.graded.power": f"{plan['tost_power_per_comparison']:.2f}",
              "noise.graded.conditions": f"{report['conditions_run']}/{report['conditions_total']}",
              "noise.graded.safeguard": f"{report['safeguard']['fired']}/{report['safeguard']['compared']}",
              "noise.graded.pilot.prompts": str(pilot["prompts"]),
              "noise.graded.pilot.conditions": str(pilot["conditions_run"]),
              "noise.graded.pilot.safeguard": f"{pilot['safeguard']['fired']}/{pilot['safeguard']['compared']}"}
    for stratum in report["graded"]["strata"]:
        values[f"noise.graded.ids.{stratum['name']}"] = f"{stratum['id_count']:,}"
    for arm, strata in report["conclusion"]["per_stratum"].items():
        values[f"noise.graded.{arm}.common-less"] = f"{-strata['common']['mean_difference']:.2f}"
    return values


def _order_values(root: Path) -> dict[str, str]:
    values = {}
    for key, folder in (("mini-1.1", GRAMMAR), ("mini-1.0", SHIPPED)):
        metrics = result_file(root, folder / "order_study_cpu" / "order_metrics.json")
        for regime, summary in metrics["regimes"].items():
            values[f"order.{key}.{regime}.tau"] = f"{summary['tau_b']:.2f}"
            values[f"order.{key}.{regime}.accuracy"] = score_text(summary["accuracy"])
            baseline = metrics["baseline"]["regimes"].get(regime)
            if baseline:
                values[f"order.{key}.{regime}.baseline-accuracy"] = score_text(baseline["accuracy"])
            if summary["auroc"] is not None:
                values[f"order.{key}.{regime}.auroc"] = f"{summary['auroc']:.2f}"
                values[f"order.{key}.{regime}.auroc-skipped"] = f"{summary['auroc_ci_resamples_skipped']:,}"
            for third in summary.get("reliability") or ():
                values[f"order.{key}.{regime}.right-in-third-{third['tertile']}"] = percent_text(third["accuracy"])
        values.update(_order_support_values(root, key, folder / "order_study_cpu"))
    return values


def _order_support_values(root: Path, key: str, folder: Path) -> dict[str, str]:
    """What each commit-order statistic rests on, read from the traces: generations, prompts, bins, minority."""
    metrics, rulings = order_rulings(root, folder)
    values, wrong = {}, []
    for regime, rows in measured_regimes(root, folder).items():
        ruled, summary = rulings[regime], metrics["regimes"][regime]
        tau = ruled["tau_b"][1]
        values[f"order.{key}.{regime}.tau-defined"] = (f"{counted(tau.generations, 'generation')} of "
                                                       f"{counted(tau.clusters, 'prompt')}")
        waves = sum(m.tokens_per_call is not None and round(m.content_positions / m.tokens_per_call) == 2
                    for m in rows)
        values[f"order.{key}.{regime}.content-in-2-calls"] = f"{waves} of {len(rows)}"
        for size in BINS:
            ruling, support = ruled[f"block_tau_{size}"]
            if ruling.reading == validity.SPLIT_SHARE and summary["block_tau"][size] is not None:
                later = round(validity.split_share(summary["block_tau"][size]) * support.generations)
                values[f"order.{key}.{regime}.block-{size}.later"] = str(later)
                values[f"order.{key}.{regime}.block-{size}.defined"] = str(support.generations)
        if "auroc" in ruled:
            auroc = ruled["auroc"][1]
            scored = sum(m.correct is not None for m in rows)
            minority = counted(auroc.minority, auroc.minority_name)
            values[f"order.{key}.{regime}.auroc-minority"] = f"{minority} of {scored}"
            wrong += [(regime, m.prompt_id) for m in rows if m.correct is False]
    values[f"order.{key}.wrong-answers"] = f"{len(wrong)}, from {counted(len(set(wrong)), 'prompt')}"
    return values


def _serve_values(root: Path) -> dict[str, str]:
    """Per serve-load run and mode: probe answers differing from their answers alone, and the requests/s range."""
    values = {}
    for key in SERVE:
        for run_name, run in serve_runs(root, key).items():
            mode = run_name.replace("/", "-")  # invariant/continuous -> invariant-continuous: a mark's name
            differing, answers, rates = serve_figures(run)
            values[f"serve.{key}.{mode}.differing"] = f"{differing} of {answers}"
            values[f"serve.{key}.{mode}.requests"] = rates_text(rates)
            for level, rate in zip(run["levels"], rates):
                # below one request a second (a CPU), three decimals: one would print 0.0
                values[f"serve.{key}.{mode}.requests-at-{level['concurrency']}"] = \
                    f"{rate:.1f}" if rate >= 1 else f"{rate:.3f}"
        runs = serve_runs(root, key)
        if {"invariant", "stock"} <= set(runs):
            ratios = [serve_figures(runs["invariant"])[2][i] / rate
                      for i, rate in enumerate(serve_figures(runs["stock"])[2])]
            values[f"serve.{key}.speed-up"] = f"{min(ratios):.1f} to {max(ratios):.1f}"
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
                       f"training.{key}.pool-tokens-millions": f"{training['pool_tokens'] / 1e6:.1f}M",
                       f"training.{key}.parameters": f"{run['parameters']:,}",
                       f"training.{key}.seconds": f"{run['train_seconds']:,.1f}",
                       f"training.{key}.tokens": f"{last['tokens']:,}",
                       f"training.{key}.skipped": f"{last['skipped_steps']}",
                       f"training.{key}.loss": f"{last['loss']:.3f}",
                       f"training.{key}.steps": f"{training['settings']['steps']:,}",
                       f"training.{key}.parameters-millions": f"{run['parameters'] / 1e6:.1f}M"})
        if "content_loss" in last:
            values[f"training.{key}.content-loss"] = f"{last['content_loss']:.2f}"
            values[f"training.{key}.content-accuracy"] = f"{last['content_accuracy']:.2f}"
        for task, count in training["mixture_counts"].items():
            values[f"training.{key}.examples.{task}"] = f"{count:,}"
        for task, share in training["mixture_shares"].items():
            values[f"training.{key}.share.{task}"] = f"{share:.0%}"
        settings = training["settings"]
        values[f"training.{key}.batch-size"] = f"{settings['batch_size']:,}"
        values[f"training.{key}.examples-drawn"] = f"{settings['steps'] * settings['batch_size'] / 1e6:.2f}M"
    for key, folder in (("mini-1.1", GRAMMAR), ("mini-1.0", SHIPPED)):
        counts = result_file(root, folder / "noise_study" / "counts.json")
        values[f"pool.{key}.ids-seen"] = f"{counts['ids_seen']:,}"
        values[f"pool.{key}.unused-seen"] = f"{counts['unused_occurrences']:,} of the {counts['unused_ids']:,}"
        values[f"pool.{key}.unused-ids"] = f"{counts['unused_ids']:,}"
        values[f"pool.{key}.vocabulary"] = f"{counts['vocabulary']:,}"
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


def _device_agreement_values(root: Path) -> dict[str, str]:
    """The graded plan's CPU run of record against its float32 H100 run: per arm the largest per-condition sd and
    difference of the primary outcome, and how many stratum answers the two runs share."""
    folder = GRADED
    agreement = result_file(root, folder / "agreement-gpu-cpu.json")
    primary = agreement["outcomes"][agreement["primary_outcome"]]
    values = {"noise.v4-gpu.conditions": str(agreement["conditions"])}
    for arm in ("content", "later"):
        cells = [cell for key, cell in primary.items() if key.startswith(f"{arm} ")]
        values[f"noise.v4-gpu.{arm}.sd"] = f"{max(cell['sd'] for cell in cells):.2g}"
        values[f"noise.v4-gpu.{arm}.max"] = f"{max(cell['max_abs'] for cell in cells):.2g}"
    answers = [result_file(root, folder / run / "noise_study.json")["conclusion"]["per_stratum"]
               for run in ("confirmatory", "confirmatory-gpu")]
    pairs = [(cpu[stratum]["verdict"], answers[1][arm][stratum]["verdict"])
             for arm, cpu in answers[0].items() for stratum in cpu]
    values["noise.v4-gpu.same-answers"] = f"{sum(a == b for a, b in pairs)} of {len(pairs)}"
    return values


def figures(root: Path) -> dict[str, str]:
    """Every figure a sentence may carry, by name: ``<!-- value:NAME -->FIGURE<!-- /value -->`` on a page."""
    return {**_quality_values(root), **_failure_values(root), **_noise_values(root), **_graded_noise_values(root),
            **_order_values(root), **_serve_values(root), **_batch_values(root), **_training_values(root),
            **gpu_values(root), **h100_values(root), **routing_values(root), **_blind_values(root),
            **_device_agreement_values(root)}
