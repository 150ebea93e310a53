#!/usr/bin/env python
"""Is `mini`'s arithmetic limited by the generate loop or by what the model knows?

For held-out addition prompts, the model sees its answer clean except the result's digits, which are
replaced by uniform noise (the easiest canvas generate could ever reach: every other token already
right), and its argmax is read (with no self-conditioning, and with self-conditioning from a first pass
on a fully noised canvas). Beside it: exact accuracy of the same prompts through canvaslab's generate
with the model's defaults. If generate were losing answers the model knows, the first would be far
above the second. ``--noised units`` noises the units digit alone (every other digit of the result clean too),
and the report adds the mean probability and entropy the model gives that digit: does it know the units digit
once it knows the rest of the sum?

    python benchmarks/mini_teacher_forced.py --model mini --out FILE.json [--per-task 48] [--noised result|units]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import torch

from canvaslab.environment import environment_fingerprint
from canvaslab.io import write_json_atomic
from canvaslab.models import load_model
from canvaslab.training import chat
from canvaslab.training.batches import _left_pad
from canvaslab.training.evaluate import answer_diffusion, summarize
from canvaslab.training.objective import DiffusionBatch, decoder_logits, encode_prefix
from canvaslab.training.tasks import RUN4_STYLE, AnswerStyle, Mixture
from canvaslab.training.tasks.arithmetic import SUM_FORMATS


def _result_span(tokenizer, answer: list[int]) -> tuple[int, int]:
    """Token positions of the result digits: after '=', before the closing '.' and <end_of_turn>."""
    equals = max(i for i, t in enumerate(answer) if tokenizer.decode([t]).strip() == "=")
    return equals + 1, len(answer) - 2


@torch.no_grad()
def teacher_forced(loaded, examples, generator: torch.Generator, noised: str = "result") -> dict:
    tokenizer, model = loaded.tokenizer, loaded.model
    canvas_length, vocab = model.config.canvas_length, loaded.vocab_size
    prompts = [tokenizer(chat.prompt_text(e.prompt), add_special_tokens=False)["input_ids"] for e in examples]
    answers = [tokenizer(chat.answer_text(e.answer), add_special_tokens=False)["input_ids"] for e in examples]
    ids, mask = _left_pad(prompts, 0)
    clean = torch.zeros((len(examples), canvas_length), dtype=torch.long)
    noisy = clean.clone()
    units = []  # each answer's units-digit position
    for row, answer in enumerate(answers):
        clean[row, : len(answer)] = noisy[row, : len(answer)] = torch.tensor(answer)
        start, end = _result_span(tokenizer, answer)
        units.append(end - 1)
        start = end - 1 if noised == "units" else start
        noisy[row, start:end] = torch.randint(0, vocab, (end - start,), generator=generator)
    batch = DiffusionBatch(ids.to(loaded.device), mask.to(loaded.device), clean.to(loaded.device))
    cache = encode_prefix(model, batch)
    plain = decoder_logits(model, cache, batch, noisy.to(loaded.device))
    first = decoder_logits(model, cache, batch, torch.randint(0, vocab, clean.shape, generator=generator).to(loaded.device))
    conditioned = decoder_logits(model, cache, batch, noisy.to(loaded.device), self_conditioning_logits=first / 0.8)
    result = {}
    rows, units = torch.arange(len(answers)), torch.tensor(units)
    for name, logits in (("no_self_conditioning", plain), ("self_conditioned", conditioned)):
        predicted = logits.argmax(-1).cpu()
        exact = [bool((predicted[r, : len(a)] == clean[r, : len(a)]).all()) for r, a in enumerate(answers)]
        result[name] = sum(exact) / len(exact)
        probabilities = logits.cpu()[rows, units].float().softmax(-1)  # the units digit's position only
        right = probabilities[rows, clean[rows, units]]
        entropy = -(probabilities * probabilities.clamp_min(1e-12).log()).sum(-1)
        result[f"{name}_units_digit"] = {"mean_probability_right": round(float(right.mean()), 4),
                                         "mean_entropy_nats": round(float(entropy.mean()), 3)}
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="mini")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--per-task", type=int, default=48)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--noised", default="result", choices=("result", "units"),
                        help="which digits of the result are noised: all of them, or the units digit alone")
    parser.add_argument("--sum-format", default=RUN4_STYLE.sum_format, choices=SUM_FORMATS,
                        help="how the model was trained to write sums (the shipped mini, run 4: plain)")
    args = parser.parse_args()
    loaded = load_model(args.model, dtype="float32", device=args.device)
    mixture = Mixture(None, AnswerStyle(sum_format=args.sum_format))
    report = {"model": args.model, "per_task": args.per_task, "sum_format": args.sum_format, "noised": args.noised,
              "tasks": {}}
    for task in ("add2", "add3"):
        examples = mixture.heldout(task, args.per_task, 0)
        forced = teacher_forced(loaded, examples, torch.Generator().manual_seed(0), args.noised)
        generated = summarize(examples, answer_diffusion(loaded, examples, seed=0), None)[task]
        report["tasks"][task] = {"teacher_forced_exact": forced, "generate_exact": generated["accuracy"],
                                 "generate_median_accept_calls": generated["median_accept_calls"]}
        print(task, report["tasks"][task], flush=True)
    report["environment"] = environment_fingerprint(loaded.model, loaded.device)
    write_json_atomic(args.out, report)


if __name__ == "__main__":
    random.seed(0)
    main()
