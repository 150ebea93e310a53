"""What a resume from the portable state costs, against the exact checkpoint, on the CPU.

    python benchmarks/portable_resume_cpu.py [--steps 400] [--pause 200] [--batch 16] --out FILE.json

1. Sizes, on `mini` itself (random weights, AdamW state after one step): the exact checkpoint against the
   portable state, and the largest portable file (the transfer to and from a device machine takes files
   under 16 MiB, 64 MiB in all).
2. Training, on the tests' toy DiffusionGemma (the same loop and objective as `mini`): one uninterrupted
   run, one paused at ``--pause`` and resumed from the exact checkpoint, one resumed from the portable
   state only; their losses after the pause (means over windows of steps) and the weights at the end.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import DiffusionGemmaForBlockDiffusion

from canvaslab.environment import environment_fingerprint
from canvaslab.io import write_json_atomic
from canvaslab.models.mini import load_mini_tokenizer, mini_config
from canvaslab.training.batches import Pool, generate_texts
from canvaslab.training.loop import TrainingPaused, TrainSettings, _optimizer, _rng_state, _save_checkpoint, train
from canvaslab.training.portable import save_portable

TOY = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
       "head_dim": 16, "global_head_dim": 16, "moe_intermediate_size": 16, "num_experts": 4}


def sizes_on_mini(folder: Path) -> dict:
    folder.mkdir()
    torch.manual_seed(0)
    model = DiffusionGemmaForBlockDiffusion(mini_config(128))
    settings = TrainSettings()
    optimizer = _optimizer(model, settings)
    for parameter in model.parameters():
        parameter.grad = torch.randn_like(parameter) * 1e-3
    optimizer.step()
    rngs = {"generator": torch.Generator().manual_seed(0), "row": random.Random(0),
            "self_conditioning": random.Random(1)}
    loop_state = {"history": [], "tokens": 0, "total": 1, "step": 1, "skipped": 0, "elapsed": 0.0,
                  "budget_fixed": False, "portable_resumes": []}
    _save_checkpoint(folder / "exact.pt", model, optimizer, loop_state, rngs)
    save_portable(folder / "portable", model, optimizer, loop_state, _rng_state(rngs), settings.as_dict())
    files = {p.name: p.stat().st_size for p in (folder / "portable").iterdir()}
    return {"parameters": sum(p.numel() for p in model.parameters()),
            "exact_checkpoint_bytes": (folder / "exact.pt").stat().st_size,
            "portable_bytes": sum(files.values()), "portable_files": files,
            "largest_portable_file_mib": round(max(files.values()) / 2**20, 2)}


def _model() -> DiffusionGemmaForBlockDiffusion:
    torch.manual_seed(0)
    return DiffusionGemmaForBlockDiffusion(mini_config(32, **TOY))


def _windows(history: list[dict], start: int, width: int) -> list[float]:
    losses = [e["loss"] for e in history if e["step"] >= start]
    return [round(statistics.fmean(losses[i:i + width]), 4) for i in range(0, len(losses), width)]


def training_runs(folder: Path, steps: int, pause: int, batch: int) -> dict:
    folder.mkdir()
    pool = Pool.build(load_mini_tokenizer(), generate_texts(None, steps * batch, 0), max_answer_tokens=64)
    settings = TrainSettings(steps=steps, batch_size=batch, learning_rate=3e-3, warmup_steps=steps // 10,
                             log_every=1, seed=0, checkpoint_every=10**9)
    runs, weights = {}, {}
    for name in ("uninterrupted", "exact", "portable"):
        model, started = _model(), time.perf_counter()
        if name != "uninterrupted":
            try:
                train(model, pool, settings, "diffusion", canvas_length=32, checkpoint=folder / f"{name}.pt",
                      portable=folder / f"{name}-portable", stop=lambda step: step == pause)
            except TrainingPaused:
                pass
            model = _model()  # a new process: only the saved state carries over
        history = train(model, pool, settings, "diffusion", canvas_length=32,
                        checkpoint=folder / "exact.pt" if name == "exact" else None,
                        portable=folder / "portable-portable" if name == "portable" else None)
        runs[name] = {"loss_means_after_pause": _windows(history, pause, 25),
                      "final_loss_mean_last_50": round(statistics.fmean(e["loss"] for e in history[-50:]), 4),
                      "seconds": round(time.perf_counter() - started, 1),
                      "portable_resumes": history[-1].get("portable_resumes", [])}
        weights[name] = torch.cat([p.detach().flatten() for p in model.parameters()])
    reference = weights["uninterrupted"]
    for name in ("exact", "portable"):
        runs[name]["final_weights_relative_difference"] = float((weights[name] - reference).norm() / reference.norm())
    return runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--pause", type=int, default=200)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)  # the same reduction order in every run: only the resume differs
    with tempfile.TemporaryDirectory() as scratch:
        result = {"steps": args.steps, "pause": args.pause, "batch": args.batch,
                  "mini_sizes": sizes_on_mini(Path(scratch, "mini")),
                  "toy_training": training_runs(Path(scratch, "toy"), args.steps, args.pause, args.batch),
                  "environment": environment_fingerprint(device=torch.device("cpu"))}
    write_json_atomic(args.out, result)
    print(result["mini_sizes"])
    for name, run in result["toy_training"].items():
        print(name, run)


if __name__ == "__main__":
    main()
