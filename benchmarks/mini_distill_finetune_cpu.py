#!/usr/bin/env python
"""Does distilled prose make `mini` write English? A CPU-sized test of sequence-level distillation.

The shipped `mini` is fine-tuned on prose alone for a few hundred small steps, either on the passages' own
continuations (the control: more prose training, nothing else) or on a teacher's (``--prose-answers``, from
``canvaslab mini distill``: the sibling's greedy continuations of the same training passages). Both arms draw the
same prompts in the same order with the same noise; only the answers differ. Each arm then answers the held-out
prose prompts through generate with the model's defaults, stored as the quality benchmark stores answers, so
``mini_prose_judge.py`` reads them.

    python benchmarks/mini_distill_finetune_cpu.py --passages prose.txt [--prose-answers answers.json]
        [--steps 300] [--batch-size 32] [--lr 2e-4] [--per-task 100] [--seed 0] --out FILE.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


from canvaslab.environment import environment_fingerprint
from canvaslab.errors import CanvaslabError
from canvaslab.io import write_json_atomic
from canvaslab.models import load_model
from canvaslab.training.batches import Pool, generate_texts
from canvaslab.training.evaluate import answer_diffusion, summarize
from canvaslab.training.loop import TrainSettings, train
from canvaslab.training.tasks import MIXTURE, AnswerStyle, Mixture
from canvaslab.training.tasks.prose import checked_answers_file

PROSE_ONLY = {task: 0.0 for task in MIXTURE if task != "prose"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--passages", type=Path, required=True)
    parser.add_argument("--prose-answers", type=Path, help="a teacher's prose answers (default: the passages' own)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--per-task", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0, help="the pool's draws and the training's noise (not the prompts scored)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.steps < 1 or args.batch_size < 1 or not args.lr > 0 or args.per_task < 1:
        parser.error("--steps, --batch-size, --lr and --per-task must be positive")
    try:
        if not args.passages.is_file():
            raise CanvaslabError(f"--passages {args.passages}: no such file")
        style = AnswerStyle(prose_answers=checked_answers_file(args.prose_answers, args.passages))
    except CanvaslabError as error:
        parser.error(str(error))
    loaded = load_model("mini", dtype="float32", device="cpu")
    rows = generate_texts(args.passages, args.steps * args.batch_size, args.seed, style=style, shares=PROSE_ONLY)
    pool = Pool.build(loaded.tokenizer, rows, max_answer_tokens=256)
    settings = TrainSettings(steps=args.steps, batch_size=args.batch_size, learning_rate=args.lr, seed=args.seed,
                             warmup_steps=max(1, args.steps // 15), log_every=10)
    started = time.perf_counter()
    history = train(loaded.model, pool, settings, "diffusion", canvas_length=loaded.model.config.canvas_length,
                    progress=lambda entry: print(entry, flush=True))
    train_seconds = round(time.perf_counter() - started, 1)
    examples = Mixture(args.passages).heldout("prose", args.per_task, 0)
    answers = answer_diffusion(loaded, examples, seed=0)
    for example, answer in zip(examples, answers):
        answer.update(task=example.task, prompt=example.prompt)
    summary = summarize(examples, answers, args.passages)
    print(summary, flush=True)
    write_json_atomic(args.out, {
        "per_task": args.per_task, "seed": 0, "generation": loaded.generation_defaults,
        "fine_tune": {"from": "mini", "prose_answers": style.prose_answers, "settings": settings.as_dict(),
                      "pool_examples": len(pool), "pool_tokens": pool.tokens(), "train_seconds": train_seconds,
                      "history": history},
        "diffusion": summary, "answers": {"diffusion": answers},
        "environment": environment_fingerprint(loaded.model, loaded.device)})


if __name__ == "__main__":
    sys.exit(main())
