#!/usr/bin/env python
"""Does the weighted training loss bias what `mini` predicts? A test on the shipped checkpoint, CPU only.

The loss (``objective.weighted_canvas_loss``) weighs a position by its *target*: 0.1 where the clean token is
``<pad>`` (``pad_weight``), 0.25 where the position was kept rather than noised (``kept_weight``). Under uniform
noise the model cannot tell a kept token from a noised one, and where an answer ends is often uncertain, so the
same input is sometimes a pad target and sometimes a word target. A weighted cross-entropy is minimised by
q(y | x) proportional to w(y, x) p(y | x), not by p(y | x): the model should give ``<pad>`` about 10 times and
the token it is shown about 4 times too little probability. If so, adding log(1 / pad_weight) to the pad logit
and log(1 / kept_weight) to the logit of the token each position shows (the decoder's input) undoes the bias,
and an answer of uncertain length (prose) should end earlier and stop sooner.

This generates held-out answers through canvaslab's generate with the checkpoint's defaults, with and without
those corrections (added to the decoder's logits; the next pass's self-conditioning signal is then the corrected
logits, as it is whatever the logits are), and scores them as the quality benchmark does.

    python benchmarks/mini_weight_bias.py --passages prose.txt --per-task 40 --out FILE.json
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from canvaslab.environment import environment_fingerprint
from canvaslab.io import write_json_atomic
from canvaslab.models import load_model
from canvaslab.training import chat
from canvaslab.training.batches import Pool, diffusion_rows
from canvaslab.training.evaluate import answer_diffusion, summarize
from canvaslab.training.objective import (DiffusionBatch, NoiseSchedule, decoder_logits, encode_prefix, noise_canvas,
                                         weight_logit_offsets)
from canvaslab.training.tasks import EVAL_TASKS, RUN4_STYLE, Mixture

# The weights each correction undoes (``weight_logit_offsets`` with sign -1); a weight of 1 undoes nothing.
CORRECTIONS = {"none": NoiseSchedule(pad_weight=1.0, kept_weight=1.0), "pad": NoiseSchedule(kept_weight=1.0),
               "pad+kept": NoiseSchedule()}


def corrected_forward(forward, undo: NoiseSchedule):
    """``forward`` with log(1 / w) added back to its logits. (transformers' loop calls ``self.forward`` for the
    decoder pass, so a module hook would not see it.)"""
    def wrapped(*args, **kwargs):
        output = forward(*args, **kwargs)
        output.logits = weight_logit_offsets(output.logits, kwargs["decoder_input_ids"], undo, sign=-1.0)
        return output
    return wrapped


@torch.no_grad()
def teacher_forced_nll(model, tokenizer, examples, seed: int = 0) -> dict:
    """Mean negative log-likelihood of the clean first canvas under the model's (corrected) distribution, at
    every position with equal weight (the model's honest probabilities, not the training loss), on canvases
    noised as in training (a uniform rate per row, no self-conditioning): overall, by target and by task."""
    canvas_length = model.config.canvas_length
    rows = [(e.task, chat.prompt_text(e.prompt), chat.answer_text(e.answer)) for e in examples]
    pool = Pool.build(tokenizer, rows, max_answer_tokens=canvas_length)
    batch = DiffusionBatch(*diffusion_rows(pool, list(range(len(pool))), canvas_length, random.Random(seed)))
    generator, schedule = torch.Generator().manual_seed(seed), NoiseSchedule()
    noisy, noised = noise_canvas(batch.canvas, schedule.rates(len(pool), generator, "cpu"),
                                 model.config.text_config.vocab_size, generator)
    logits = decoder_logits(model, encode_prefix(model, batch), batch, noisy).float()
    pad, tasks = batch.canvas == 0, torch.tensor([sorted(set(pool.tasks)).index(t) for t in pool.tasks])
    groups = {"all": torch.ones_like(pad), "pad targets": pad, "answer targets": ~pad, "kept": ~noised,
              "noised": noised, **{f"task {t}": (tasks == i)[:, None].expand_as(pad)
                                   for i, t in enumerate(sorted(set(pool.tasks)))}}
    result = {}
    for name, undo in CORRECTIONS.items():
        nll = F.cross_entropy(weight_logit_offsets(logits, noisy, undo, sign=-1.0).flatten(0, 1),
                              batch.canvas.reshape(-1), reduction="none").view(batch.canvas.shape)
        result[name] = {group: round(float(nll[where].mean()), 5) for group, where in groups.items()}
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="mini")
    parser.add_argument("--passages", type=Path, required=True)
    parser.add_argument("--per-task", type=int, default=40)
    parser.add_argument("--tasks", default="prose,add2,fact,json")
    parser.add_argument("--corrections", default="none,pad,pad+kept")
    parser.add_argument("--teacher-forced", type=int, default=100, help="held-out examples per task for the NLL check")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model(args.model, dtype="float32", device="cpu")
    mixture = Mixture(args.passages, RUN4_STYLE)  # the style the shipped checkpoint was trained in
    examples = [e for task in args.tasks.split(",") for e in mixture.heldout(task, args.per_task, 0)]
    report = {"model": args.model, "per_task": args.per_task, "schedule": asdict(NoiseSchedule()), "results": {}}
    if args.teacher_forced:
        forced = [e for task in EVAL_TASKS if task in mixture.makers
                  for e in mixture.heldout(task, args.teacher_forced, 1)]
        report["teacher_forced_nll"] = teacher_forced_nll(loaded.model, loaded.tokenizer, forced)
        report["teacher_forced_examples"] = len(forced)
        print("teacher-forced NLL", report["teacher_forced_nll"], flush=True)
    for name in args.corrections.split(",") if examples else ():
        loaded.model.forward = corrected_forward(type(loaded.model).forward.__get__(loaded.model), CORRECTIONS[name])
        started = time.perf_counter()
        try:
            answers = answer_diffusion(loaded, examples, batch_size=len(examples))
        finally:
            del loaded.model.forward
        summary = summarize(examples, answers, args.passages)
        for task in summary:
            lengths = [len(loaded.tokenizer(a["text"], add_special_tokens=False)["input_ids"])
                       for e, a in zip(examples, answers) if e.task == task]
            summary[task]["median_answer_tokens"] = statistics.median(lengths)
        report["results"][name] = {"summary": summary, "seconds": round(time.perf_counter() - started, 1),
                                   "samples": [{"task": e.task, "prompt": e.prompt, **a}
                                               for e, a in list(zip(examples, answers))[:: max(1, args.per_task // 3)]]}
        print(name, summary, flush=True)
    report["environment"] = environment_fingerprint(loaded.model, loaded.device)
    write_json_atomic(args.out, report)


if __name__ == "__main__":
    main()
