"""Quality of trained `mini` checkpoints on in-template and held-out-template prompts, task by task.

Per-task accuracy of the diffusion model (through canvaslab's generate with the checkpoint's own sampler settings)
and of the AR sibling (greedy) on two held-out splits, with n per cell, failure examples, median accept calls,
prose readability and every answer.

    python benchmarks/mini_quality.py (--run DIR | --installed NAME) [--models diffusion,autoregressive]
        [--splits in_template,heldout_template] [--passages FILE] [--per-task 40] [--prose-per-task N]
        [--failures 3] [--device cpu|cuda] [--dtype bfloat16|float32] [--tasks add2,add3,...] --out FILE.json

The two splits (``canvaslab.training.tasks``):

- ``in_template``: ``Mixture.heldout``, the training templates with operands, values or combinations held out of
  training (what the model card's first evaluation measured).
- ``heldout_template``: ``Mixture.heldout_templates``, question forms, wrappers, stories, JSON key names and value
  types, function behaviours and names, instructions and sum widths (``add_mixed``: 7 + 385) that no training
  generator produces (``canvaslab.training.tasks.heldout_templates``).

``--run DIR`` reads ``DIR/diffusion/`` and/or ``DIR/autoregressive/`` as written by ``canvaslab mini train`` (or
``benchmarks/mini_train_h200.py``); ``--installed mini`` the installed `mini` and its registered sibling `mini-ar`.
The prompts are a function of ``--per-task`` and ``--seed`` only, so runs of the two models on different machines
score the same prompts. The prose task needs ``--passages`` (the file the run trained with); the code task needs
the sandbox (bubblewrap). Beside ``--out`` it writes the table as Markdown (``.md``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from transformers import Gemma4ForCausalLM

from canvaslab.environment import environment_fingerprint, record_result
from canvaslab.io import read_json, write_json_atomic
from canvaslab.models import load_model
from canvaslab.models.registry import baseline_of, model_folder
from canvaslab.training.evaluate import answer_causal, answer_diffusion, summarize
from canvaslab.training.run import MINI_GENERATION, load_tokenizer
from canvaslab.training.tasks import DATA_VERSIONS, EVAL_TASKS, Mixture

SPLITS = ("in_template", "heldout_template")
SPLIT_MEANS = {
    "in_template": "training templates, held-out operands/values/combinations (Mixture.heldout)",
    "heldout_template": "templates, wrappers, key names, value types, behaviours and sum widths never in training "
                        "(Mixture.heldout_templates)",
}
TASK_NAMES = {"add2": "2-digit sums", "add3": "3-digit sums", "add_mixed": "sums of two widths",
              "word": "word problems", "fact": "facts", "json": "JSON", "code": "code", "prose": "prose"}


def model_folders(args: argparse.Namespace) -> dict[str, Path]:
    if args.run is not None:
        return {"diffusion": args.run / "diffusion", "autoregressive": args.run / "autoregressive"}
    return {"diffusion": model_folder(args.installed), "autoregressive": model_folder(baseline_of(args.installed))}


def model_labels(args: argparse.Namespace) -> dict[str, str]:
    if args.run is not None:
        return {"diffusion": f"{args.run}/diffusion", "autoregressive": f"{args.run}/autoregressive"}
    return {"diffusion": args.installed, "autoregressive": baseline_of(args.installed)}


def data_version(args: argparse.Namespace) -> str:
    """``--data``, else the run's own (its training.json's ``data``), else the shipped version: the in-template
    split is drawn from the generators the models were trained on."""
    if args.data:
        return args.data
    training = args.run / "training.json" if args.run is not None else None
    if training is not None and training.is_file():
        return read_json(training).get("data", "shipped")
    return "shipped"


def split_examples(mixture: Mixture, split: str, per_task: int, seed: int, tasks: tuple[str, ...],
                   prose_per_task: int | None = None) -> dict:
    """The split's examples by task (``tasks``: a subset, default every task the split has; prose:
    ``prose_per_task`` prompts where given)."""
    if split == "in_template":
        every = [t for t in EVAL_TASKS if t in mixture.makers]
        make = mixture.heldout
    else:
        every = list(mixture.template_tasks())
        make = mixture.heldout_templates
    return {task: make(task, prose_per_task if task == "prose" and prose_per_task is not None else per_task, seed)
            for task in every if not tasks or task in tasks}


def answerer(name: str, folder: Path, args: argparse.Namespace):
    """A function from examples to answers for one model (loaded once), and the environment's fingerprint."""
    if name == "diffusion":
        loaded = load_model(str(folder), device=args.device, dtype=args.dtype)
        return (lambda examples: answer_diffusion(loaded, examples, seed=args.seed, batch_size=args.batch_size)), \
            environment_fingerprint(loaded.model, loaded.device)
    tokenizer = load_tokenizer(folder)  # each checkpoint carries the tokenizer it was trained with
    causal = Gemma4ForCausalLM.from_pretrained(folder, dtype=getattr(torch, args.dtype)).to(args.device).eval()
    return (lambda examples: answer_causal(causal, tokenizer, examples, max_new_tokens=256,
                                           batch_size=args.batch_size)), environment_fingerprint(
        device=torch.device(args.device))


def failures(examples, answers, count: int) -> list[dict]:
    """Up to ``count`` wrong answers (prose: the lowest English word-pair shares)."""
    rows = [{"prompt": e.prompt, "expected": e.answer, "text": a["text"], "score": a.get("score"),
             **({"bigram_score": a["bigram_score"]} if "bigram_score" in a else {})} for e, a in zip(examples, answers)]
    if examples and examples[0].task == "prose":
        return sorted((r for r in rows if "bigram_score" in r), key=lambda r: r["bigram_score"])[:count]
    return [r for r in rows if r["score"] is False][:count]


def table(result: dict, models: tuple[str, ...]) -> list[dict]:
    rows = []
    for split in result["splits"]:
        for task in TASK_NAMES:
            for name in models:
                cell = result[split]["summary"].get(name, {}).get(task)
                if cell is None:
                    continue
                metric = "english_bigram_share" if task == "prose" else "accuracy"
                rows.append({"task": task, "split": split, "model": result["models"][name], "n": cell["n"],
                             "metric": metric, "value": cell.get(metric)})
    return rows


def markdown(result: dict, models: tuple[str, ...]) -> str:
    labels = [result["models"][m] for m in models]
    head = "| task | metric | " + " | ".join(f"{label} {split}" for label in labels for split in result["splits"]) + " |"
    lines = [head, "|" + " --- |" * (2 + len(labels) * len(result["splits"]))]
    cells = {(r["task"], r["split"], r["model"]): r for r in result["table"]}
    for task, title in TASK_NAMES.items():
        found = [cells.get((task, split, label)) for label in labels for split in result["splits"]]
        if not any(found):
            continue
        metric = next(r["metric"] for r in found if r)
        values = ["-" if r is None or r["value"] is None else f"{r['value']:.2f} (n={r['n']})" for r in found]
        lines.append(f"| {title} | {'word pairs' if metric != 'accuracy' else 'accuracy'} | " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", type=Path, help="a training run's folder (diffusion/, autoregressive/)")
    source.add_argument("--installed", help="an installed diffusion model (e.g. mini) and its registered sibling")
    parser.add_argument("--models", default="diffusion,autoregressive", help="comma-separated: diffusion, autoregressive")
    parser.add_argument("--splits", default=",".join(SPLITS), help=f"comma-separated: {', '.join(SPLITS)}")
    parser.add_argument("--passages", type=Path, help="the run's prose passages (for the prose task)")
    parser.add_argument("--per-task", type=int, default=40, help="prompts per task and split")
    parser.add_argument("--prose-per-task", type=int, help="prose prompts per split (default --per-task): a "
                        "diffusion prose answer runs to the pass budget, 50 times the passes of a sum")
    parser.add_argument("--failures", type=int, default=3, help="wrong answers kept per task, split and model")
    parser.add_argument("--seed", type=int, default=0, help="which held-out prompts, and generate's seed")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"),
                        help="the models' compute dtype (the weights are bf16; float32 on a CPU without bf16 matmuls)")
    parser.add_argument("--batch-size", type=int, default=64, help="rows per generate call")
    parser.add_argument("--tasks", default="", help="comma-separated subset of the tasks (default all; add_mixed "
                        "has held-out templates only)")
    parser.add_argument("--data", default="", choices=("", *DATA_VERSIONS),
                        help="the data version whose in-template split is drawn (default: a --run's own, else shipped)")
    parser.add_argument("--out", type=Path, required=True, help="JSON result file")
    args = parser.parse_args()
    models = tuple(args.models.split(","))
    splits = tuple(args.splits.split(","))
    tasks = tuple(t for t in args.tasks.split(",") if t)
    if set(models) - {"diffusion", "autoregressive"} or set(splits) - set(SPLITS):
        parser.error(f"--models takes diffusion, autoregressive; --splits takes {', '.join(SPLITS)}")
    folders, labels = model_folders(args), model_labels(args)

    data = data_version(args)
    mixture = Mixture(args.passages, data=data)
    examples = {split: split_examples(mixture, split, args.per_task, args.seed, tasks, args.prose_per_task)
                for split in splits}
    result = {"per_task": args.per_task, "seed": args.seed, "prose_per_task": args.prose_per_task, "data": data,
              "dtype": args.dtype, "device": args.device, "generation": MINI_GENERATION, "splits": list(splits),
              "split_means": {s: SPLIT_MEANS[s] for s in splits}, "models": {m: labels[m] for m in models},
              "samples": {}, "answers": {}, "failures": {}, "seconds": {}}
    for split in splits:
        result[split] = {"summary": {}, "answers": {}}
    for name in models:
        started = time.perf_counter()
        answer, environment = answerer(name, folders[name], args)
        result.setdefault("environment", environment)
        for split in splits:
            # one generate call per task: a prose row runs to the budget, and no sum should wait on it
            answers = {task: answer(task_examples) for task, task_examples in examples[split].items()}
            flat_examples = [e for task in examples[split] for e in examples[split][task]]
            flat_answers = [a for task in examples[split] for a in answers[task]]
            summary = summarize(flat_examples, flat_answers, args.passages)
            rows = [{"task": e.task, "prompt": e.prompt, "expected": e.answer, **a}
                    for e, a in zip(flat_examples, flat_answers)]
            result[split]["summary"][name] = summary
            result[split]["answers"][name] = rows
            result["failures"].setdefault(name, {})[split] = {
                task: failures(examples[split][task], answers[task], args.failures) for task in examples[split]}
            print(f"{labels[name]} {split}: " + ", ".join(
                f"{t} {s.get('accuracy', s.get('english_bigram_share'))} (n={s['n']})" for t, s in summary.items()),
                flush=True)
        result["seconds"][name] = round(time.perf_counter() - started, 1)
        # the layout earlier quality files had (mini_prose_judge.py reads it): the in-template split's
        if "in_template" in splits:
            result[name] = result["in_template"]["summary"][name]
            rows = result["in_template"]["answers"][name]
            result["answers"][name] = [{k: v for k, v in row.items() if k != "expected"} for row in rows]
            result["samples"][name] = rows[:: max(1, args.per_task // 4)]
    result["table"] = table(result, models)
    write_json_atomic(args.out, result)
    table_file = args.out.with_suffix(".md")
    table_file.write_text(markdown(result, models), encoding="utf-8")
    shows = (f"per-task accuracy of {' and '.join(labels[m] for m in models)} on {args.per_task} prompts per task "
             f"and split ({', '.join(splits)}), failure examples, median accept calls, prose readability, every answer")
    record_result(args.out, shows=shows, environment=result.get("environment"))
    record_result(table_file, shows=f"the table of {args.out.name}: {shows.split(', failure')[0]}",
                  environment=result.get("environment"))
    print(table_file.read_text(encoding="utf-8"))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
