#!/usr/bin/env python
"""Why is `mini`'s prose not English: where its answers end, when that is settled, and whether a known length helps.

Two measurements on held-out prose prompts, through canvaslab's generate with the checkpoint's defaults:

1. **Pass by pass** (transformers' ``EntropyBoundSampler.accept_canvas`` observed, not changed): at each pass,
   how many positions are accepted and how many of them are ``<pad>``/``<end_of_turn>``, and the pass from which
   the answer's end (its ``<end_of_turn>``) stays accepted. If the end is settled before most of the content,
   the length comes from the position prior and not from the text.
2. **A length given** (``--lengths``): the decoder's logits at positions >= K are replaced by a certain ``<pad>``
   (entropy 0, so the sampler accepts them at once and the answer must end before K); the English-word share
   of the answers beside the unconstrained ones. If the length were what spoils the prose, K near the
   references' length would make it English.

    python benchmarks/mini_prose_passes.py --passages prose.txt --per-task 24 --lengths 0,48,32 --out FILE.json
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
import transformers.models.diffusion_gemma.generation_diffusion_gemma as diffusion_generation

from canvaslab.environment import environment_fingerprint
from canvaslab.io import write_json_atomic
from canvaslab.models import load_model
from canvaslab.models.mini import MINI_EOS_IDS
from canvaslab.training import chat
from canvaslab.training.evaluate import answer_diffusion, english_fraction
from canvaslab.training.tasks import Mixture

END_OF_TURN = max(MINI_EOS_IDS)


def _observed_passes(records: list):
    """Record (accepted mask, denoiser canvas) of every accept_canvas call; returns the undo function."""
    original = diffusion_generation.EntropyBoundSampler.accept_canvas

    def observed(self, current, denoised, logits, step):
        accepted = original(self, current, denoised, logits, step)
        records.append((self.accepted_token_mask.cpu().clone(), denoised.cpu().clone()))
        return accepted
    diffusion_generation.EntropyBoundSampler.accept_canvas = observed
    return lambda: setattr(diffusion_generation.EntropyBoundSampler, "accept_canvas", original)


def pass_by_pass(loaded, examples) -> dict:
    records: list = []
    undo = _observed_passes(records)
    try:
        answer_diffusion(loaded, examples, seed=0, batch_size=len(examples))
    finally:
        undo()
    rows = []
    for row in range(len(examples)):
        passes = [(mask[row], canvas[row]) for mask, canvas in records]
        accepted = [int(mask.sum()) for mask, _ in passes]
        tail = [int((mask & ((canvas == 0) | (canvas == END_OF_TURN))).sum()) for mask, canvas in passes]
        ends = [bool((mask & (canvas == END_OF_TURN)).any()) for mask, canvas in passes]
        settled = next((i for i in range(len(ends)) if all(ends[i:])), None)
        rows.append({"accepted": accepted, "pad_or_end_accepted": tail, "end_settled_at_pass": settled,
                     "content_accepted_when_end_settled": None if settled is None else accepted[settled] - tail[settled]})
    settled = [r["end_settled_at_pass"] for r in rows if r["end_settled_at_pass"] is not None]
    content = [r["content_accepted_when_end_settled"] for r in rows if r["end_settled_at_pass"] is not None]
    return {"rows": rows, "end_settled": len(settled), "median_end_settled_at_pass": statistics.median(settled) if settled else None,
            "median_content_accepted_when_end_settled": statistics.median(content) if content else None,
            "median_pad_or_end_accepted_in_first_6_passes": statistics.median(r["pad_or_end_accepted"][min(5, len(r["accepted"]) - 1)] for r in rows)}


def with_length(loaded, examples, passages: Path, length: int) -> dict:
    forward = loaded.model.forward

    def capped(*args, **kwargs):
        output = forward(*args, **kwargs)
        if length:
            logits = output.logits.clone()
            logits[:, length:, :] = -1e4
            logits[:, length:, 0] = 0.0
            output.logits = logits
        return output
    loaded.model.forward = capped
    try:
        answers = answer_diffusion(loaded, examples, seed=0, batch_size=len(examples))
    finally:
        loaded.model.forward = forward
    return {"length_cap": length or None,
            "english_share": round(statistics.mean(english_fraction(a["text"], passages) for a in answers), 3),
            "median_passes": statistics.median(a["passes"] for a in answers),
            "median_end_position": statistics.median(a["eos_position"] if a["eos_position"] is not None else 999
                                                     for a in answers),
            "samples": [a["text"] for a in answers[:3]]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="mini")
    parser.add_argument("--passages", type=Path, required=True)
    parser.add_argument("--per-task", type=int, default=24)
    parser.add_argument("--lengths", default="0,48,32", help="canvas positions from which <pad> is certain (0: none)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    loaded = load_model(args.model, dtype="float32", device="cpu")
    examples = Mixture(args.passages).heldout("prose", args.per_task, 0)
    tokenizer = loaded.tokenizer
    references = [len(tokenizer(chat.answer_text(e.answer), add_special_tokens=False)["input_ids"]) for e in examples]
    with torch.no_grad():
        report = {"model": args.model, "per_task": args.per_task,
                  "reference_median_answer_tokens": statistics.median(references),
                  "pass_by_pass": pass_by_pass(loaded, examples),
                  "length_given": [with_length(loaded, examples, args.passages, int(k)) for k in args.lengths.split(",")]}
    report["environment"] = environment_fingerprint(loaded.model, loaded.device)
    summary = {k: v for k, v in report["pass_by_pass"].items() if k != "rows"}
    print(summary, [{k: v for k, v in r.items() if k != "samples"} for r in report["length_given"]], flush=True)
    write_json_atomic(args.out, report)


if __name__ == "__main__":
    main()
