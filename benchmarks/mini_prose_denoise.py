#!/usr/bin/env python
"""Does `mini` know English locally, or does its prose fail only when written from noise?

On held-out prose examples, the reference answer is put on the canvas with a share ``rate`` of its positions
replaced by uniform noise (the training objective's canvas, pads included), and the decoder's argmax is read at
the noised positions. Per rate: accuracy and cross-entropy (nats) on the noised
answer tokens, the same with self-conditioning (from a first pass on a nested noisier canvas, as training feeds
it, and from a first pass on the same canvas), and the English word-pair share of the answer so filled in. Beside it, the AR sibling reads the
same answers teacher-forced (next-token accuracy and cross-entropy, left context only), and the answers both
models generate from the prompt alone. If the denoiser fills in a lightly noised answer with English while its
generated prose is not, the parallel writing from noise is what fails; if the fill-in is poor too, its
predictions are.

    python benchmarks/mini_prose_denoise.py --passages prose.txt --out FILE.json [--per-task 64]
        [--rates 0.1,0.3,0.5,0.7,0.9,1.0] [--model mini|DIR] [--no-generation]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F

from canvaslab.environment import environment_fingerprint
from canvaslab.io import write_json_atomic
from canvaslab.models import load_model
from canvaslab.models.mini import MINI_EOS_IDS, packaged_folder
from canvaslab.training import chat
from canvaslab.training.batches import _left_pad
from canvaslab.training.evaluate import _until_eos, answer_causal, answer_diffusion, english_bigram_fraction
from canvaslab.training.objective import DiffusionBatch, decoder_logits, encode_prefix, noise_canvas
from canvaslab.training.tasks import Mixture
from mini_prose_judge import sibling_token_scores

def _encoded(tokenizer, examples):
    prompts = [tokenizer(chat.prompt_text(e.prompt), add_special_tokens=False)["input_ids"] for e in examples]
    answers = [tokenizer(chat.answer_text(e.answer), add_special_tokens=False)["input_ids"] for e in examples]
    return prompts, answers


def _answer_text(tokenizer, tokens: list[int]) -> str:
    return tokenizer.decode(_until_eos(tokens, MINI_EOS_IDS), skip_special_tokens=True)


@torch.no_grad()
def denoiser_fill_in(loaded, examples, rates: list[float], passages: Path) -> list[dict]:
    tokenizer, model = loaded.tokenizer, loaded.model
    prompts, answers = _encoded(tokenizer, examples)
    ids, mask = _left_pad(prompts, 0)
    clean = torch.zeros((len(examples), model.config.canvas_length), dtype=torch.long)
    for row, answer in enumerate(answers):
        answer = answer[: clean.shape[1]]
        clean[row, : len(answer)] = torch.tensor(answer)
    batch = DiffusionBatch(ids, mask, clean)
    cache = encode_prefix(model, batch)
    results = []
    for rate in rates:
        generator = torch.Generator().manual_seed(0)
        keep = torch.rand(clean.shape, generator=generator)
        noisy, noised = noise_canvas(clean, torch.full((len(examples),), rate), loaded.vocab_size, generator, keep)
        logits = decoder_logits(model, cache, batch, noisy).float()
        scored = noised & (clean != 0)
        filled = torch.where(noised, logits.argmax(-1), clean)
        texts = [_answer_text(tokenizer, filled[row].tolist()) for row in range(len(examples))]
        # Self-conditioning as training feeds it (a first pass on a nested, noisier canvas) and from a first pass
        # on this same canvas; temperature 0.6, the middle of the sampler's range. Does the model use it?
        earlier_rate = rate + (1 - rate) * torch.rand(len(examples), generator=generator)
        earlier, _ = noise_canvas(clean, earlier_rate, loaded.vocab_size, generator, keep)
        nested = decoder_logits(model, cache, batch, noisy,
                                self_conditioning_logits=decoder_logits(model, cache, batch, earlier) / 0.6)
        same = decoder_logits(model, cache, batch, noisy, self_conditioning_logits=logits / 0.6)
        results.append({"rate": rate, **_scored(logits, clean, scored),
                        "self_conditioned_nested": _scored(nested, clean, scored),
                        "self_conditioned_same_canvas": _scored(same, clean, scored),
                        "filled_word_pairs": round(statistics.mean(english_bigram_fraction(t, passages)
                                                                   for t in texts), 3),
                        "sample": texts[0]})
        print(results[-1], flush=True)
    return results


def _scored(logits: torch.Tensor, clean: torch.Tensor, scored: torch.Tensor) -> dict:
    logits = logits.float()
    losses = F.cross_entropy(logits.flatten(0, 1), clean.reshape(-1), reduction="none").view(clean.shape)
    return {"noised_answer_token_accuracy": round(float(((logits.argmax(-1) == clean) & scored).sum() / scored.sum()), 4),
            "noised_answer_token_loss_nats": round(float((losses * scored).sum() / scored.sum()), 4)}


def sibling_teacher_forced(model, tokenizer, examples) -> dict:
    scores = [sibling_token_scores(model, tokenizer, e.prompt, chat.answer_text(e.answer)) for e in examples]
    losses, right = torch.cat([loss for loss, _ in scores]), torch.cat([hit for _, hit in scores])
    return {"next_token_accuracy": round(float(right.float().mean()), 4),
            "next_token_loss_nats": round(float(losses.mean()), 4)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="mini")
    parser.add_argument("--sibling", default=str(packaged_folder("mini-ar")))
    parser.add_argument("--passages", type=Path, required=True)
    parser.add_argument("--per-task", type=int, default=64)
    parser.add_argument("--rates", default="0.1,0.3,0.5,0.7,0.9,1.0")
    parser.add_argument("--no-generation", action="store_true", help="skip the generated answers (toy checkpoints)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM

    loaded = load_model(args.model, dtype="float32", device="cpu")
    examples = Mixture(args.passages).heldout("prose", args.per_task, 0)
    sibling = AutoModelForCausalLM.from_pretrained(args.sibling, dtype=torch.float32).eval()
    report = {"model": args.model, "sibling": args.sibling, "per_task": args.per_task,
              "denoiser_fill_in": denoiser_fill_in(loaded, examples, [float(r) for r in args.rates.split(",")],
                                                   args.passages),
              "sibling_teacher_forced": sibling_teacher_forced(sibling, loaded.tokenizer, examples)}
    if not args.no_generation:
        generated = answer_diffusion(loaded, examples, seed=0)
        greedy = answer_causal(sibling, loaded.tokenizer, examples, max_new_tokens=256)
        report["generated_word_pairs"] = {
            "diffusion": round(statistics.mean(english_bigram_fraction(a["text"], args.passages) for a in generated), 3),
            "sibling": round(statistics.mean(english_bigram_fraction(a["text"], args.passages) for a in greedy), 3)}
    report["reference_word_pairs"] = round(statistics.mean(
        english_bigram_fraction(e.answer, args.passages) for e in examples), 3)
    report["environment"] = environment_fingerprint(loaded.model, loaded.device)
    print({k: v for k, v in report.items() if k not in ("denoiser_fill_in", "environment")}, flush=True)
    write_json_atomic(args.out, report)


if __name__ == "__main__":
    main()
