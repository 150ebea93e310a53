"""The result files behind the docs' evidence, read once each: quality, prose judge, commit order, by version.

``mini`` 1.1.0's files are under ``benchmarks/results/mini-grammar/``, 1.0.0's (and ``mini-ar``'s) under
``benchmarks/results/mini/``; the commit-order rulings are recomputed from the traces where a file predates the
counts the validity rules read.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from canvaslab.analysis import validity
from canvaslab.analysis.order_metrics import GenerationMeasures, measure_generation
from canvaslab.errors import CanvaslabError
from canvaslab.reports.readers.order_metrics import iter_traces

GRAMMAR = Path("benchmarks/results/mini-grammar")
SHIPPED = Path("benchmarks/results/mini")
HELDOUT = Path("benchmarks/results/mini-heldout-templates")
DISTILLATION = Path("benchmarks/results/mini-distillation-cpu")
BLIND = Path("benchmarks/results/mini-blind")
TASKS = (("add2", "2-digit sums"), ("add3", "3-digit sums"), ("add_mixed", "sums of two widths"),
         ("word", "word problems"), ("fact", "facts"), ("json", "JSON (valid, the requested keys, types and values)"),
         ("code", "code (passes its tests in the sandbox)"))
SCORED_BY = {"add2": "the last number is the sum", "add3": "the last number is the sum",
             "word": "the last number is the answer", "fact": "the value, as a whole word",
             "json": "valid, the schema's keys and types, the requested values",
             "code": "the function passes its 5 tests in the sandbox"}
BINS = ("4", "8", "16", "32", "64")


@cache
def result_file(root: Path, relative: Path) -> Any:
    path = root / relative
    if not path.is_file():
        raise CanvaslabError(f"evidence: {path} is missing")
    return json.loads(path.read_text(encoding="utf-8"))


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def counted(n: int, name: str) -> str:
    return f"{n:,} {name}{'' if n == 1 else 's'}"


def score_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def percent_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def quality_1_1(root: Path) -> dict[str, dict[str, float | None]]:
    """Per split, task -> accuracy (code from the sandboxed CPU run), and the prose judge's figures."""
    gpu, code = result_file(root, GRAMMAR / "quality_gpu.json"), result_file(root, GRAMMAR / "quality_code.json")
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


def heldout_answers_1_1(root: Path) -> dict[str, list[dict[str, Any]]]:
    """``mini`` 1.1.0's held-out-template answers by task (code from the sandboxed CPU run)."""
    by_task: dict[str, list[dict[str, Any]]] = {}
    for name in ("quality_gpu.json", "quality_code.json"):
        for answer in result_file(root, GRAMMAR / name)["heldout_template"]["answers"]["diffusion"]:
            if name == "quality_code.json" or answer["task"] != "code":
                by_task.setdefault(answer["task"], []).append(answer)
    return by_task


def judged_prose(root: Path) -> dict[str, dict[str, float]]:
    return {name: entry["summary"] for name, entry in result_file(root, GRAMMAR / "judge.json")["sets"].items()}


def split_1_0(root: Path, model: str, split: str) -> dict[str, dict[str, Any]]:
    """``mini`` 1.0.0's or ``mini-ar``'s summary on one split of the 50-prompt CPU evaluation."""
    folder = result_file(root, HELDOUT / f"quality_{model}.json")
    return next(iter(folder[split]["summary"].values()))


def quality_1_0(root: Path, model: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``mini`` 1.0.0's (``diffusion``) or ``mini-ar``'s (``autoregressive``) in-template summary and answers."""
    folder = SHIPPED if model == "diffusion" else SHIPPED / "sibling"
    summary, answers = {}, []
    for name in (f"quality_{model}_add2_add3_word_fact_json_prose.json", f"quality_{model}_code.json"):
        quality = result_file(root, folder / name)
        summary.update(quality[model])
        answers += quality["answers"][model]
    return summary, answers


def blind_evaluations(root: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every evaluation on the blind set, in the record's order: its record entry and its result file."""
    record = result_file(root, BLIND / "record.json")
    return [(entry, result_file(root, BLIND / entry["result"])) for entry in record["evaluations"]]


@cache
def _measured(folder: Path) -> tuple[GenerationMeasures, ...]:
    """Every generation of a study's traces, measured by the study's own definitions (read once per folder)."""
    return tuple(measure_generation(trace) for trace in iter_traces(sorted(folder.glob("traces*.jsonl.gz"))))


def measured_regimes(root: Path, folder: Path) -> dict[str, list[GenerationMeasures]]:
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


def order_rulings(root: Path, folder: Path) -> tuple[dict[str, Any], dict[str, dict[str, tuple]]]:
    """The study's metrics, and each statistic's ruling from the counts its traces give.

    Files written before the validity rules hold no per-measure prompt counts (with several seeds per prompt the
    count of generations does not give them) nor the prompts of the AUROC's minority class: both are read back
    from the traces.
    """
    metrics = result_file(root, folder / "order_metrics.json")
    generations = measured_regimes(root, folder)
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
