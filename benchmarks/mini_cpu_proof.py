"""CPU evidence that the `mini` objective teaches answers, not just padding: a small DiffusionGemma
trained on one task (2-digit addition) for a few CPU minutes, scored on held-out prompts through
canvaslab's generate with the shipped sampler defaults (48-pass budget).

    python benchmarks/mini_cpu_proof.py --steps 600 --out FILE.json [--pad-weight 1 --kept-weight 1]

``--pad-weight 1 --kept-weight 1`` is the earlier objective (plain mean over all canvas positions).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from transformers import DiffusionGemmaForBlockDiffusion

from canvaslab.environment import environment_fingerprint
from canvaslab.io import write_json_atomic
from canvaslab.models import load_model
from canvaslab.models.mini import load_mini_tokenizer, mini_config
from canvaslab.training import chat
from canvaslab.training.batches import Pool
from canvaslab.training.evaluate import answer_diffusion, summarize
from canvaslab.training.loop import TrainSettings, train
from canvaslab.training.objective import NoiseSchedule
from canvaslab.training.run import _save, diffusion_generation_config
from canvaslab.training.tasks import RUN4_STYLE, Mixture
from canvaslab.training.tasks.base import draw

SMALL = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 2,
         "head_dim": 64, "global_head_dim": 64, "moe_intermediate_size": 64, "num_experts": 4}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="add2")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--pad-weight", type=float, default=None)
    parser.add_argument("--kept-weight", type=float, default=None)
    parser.add_argument("--per-task", type=int, default=40)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    settings = TrainSettings(steps=args.steps, batch_size=args.batch_size, learning_rate=args.lr, warmup_steps=30,
                             log_every=50)
    schedule = NoiseSchedule()  # the objective of runs 1-4, which this check's result was made with
    if args.pad_weight is not None:
        schedule = replace(schedule, pad_weight=args.pad_weight)
    if args.kept_weight is not None:
        schedule = replace(schedule, kept_weight=args.kept_weight)
    settings = replace(settings, schedule=schedule)
    mixture, rng, tokenizer = Mixture(None, RUN4_STYLE), random.Random("cpu-proof"), load_mini_tokenizer()
    rows = [(e.task, chat.prompt_text(e.prompt), chat.answer_text(e.answer))
            for e in (draw(mixture.makers[args.task], rng, "train") for _ in range(args.steps * args.batch_size))]
    pool = Pool.build(tokenizer, rows, max_answer_tokens=64)
    model = DiffusionGemmaForBlockDiffusion(mini_config(32, **SMALL))
    started = time.perf_counter()
    history = train(model, pool, settings, "diffusion", canvas_length=32, progress=lambda e: print(e, flush=True))
    seconds = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as folder:
        _save(model, tokenizer, diffusion_generation_config(), Path(folder))
        loaded = load_model(folder, device="cpu", dtype="float32")
        examples = mixture.heldout(args.task, args.per_task, 0)
        answers = answer_diffusion(loaded, examples, seed=0)
    quality = summarize(examples, answers, None)
    print(quality, flush=True)
    write_json_atomic(args.out, {
        "task": args.task, "settings": settings.as_dict(), "model": SMALL, "canvas_length": 32,
        "parameters": sum(p.numel() for p in model.parameters()), "train_seconds": round(seconds, 1),
        "history": history, "heldout": quality,
        "samples": [{"prompt": e.prompt, "expected": e.answer, **a} for e, a in zip(examples[:8], answers[:8])],
        "environment": environment_fingerprint(device=torch.device("cpu")),
    })


if __name__ == "__main__":
    main()
