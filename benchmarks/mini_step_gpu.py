#!/usr/bin/env python
"""Where a `mini` training step's time goes on a GPU, and what a larger batch costs per step.

The real training loop (``canvaslab.training.loop.train``: batches built on the host, the self-conditioning
pass on a host-drawn half of the steps, AdamW, clipping, the finiteness check) on the full-size `mini`
config, for a few batch sizes; seconds per step from the loop's own history (steps ``--from`` to the end,
past the warm-up), then one profiled stretch at the first batch size: summed CUDA kernel time against wall
time (a GPU busy far less than the wall clock means the step is bound by the host), and the top kernels
and host ops.

    python benchmarks/mini_step_gpu.py --passages prose.txt --out DIR [--batch-sizes 512,1024,2048]
        [--steps 40] [--from 15] [--device cuda]

Writes DIR/mini_step_gpu.json and DIR/mini_step_profile.txt.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import DiffusionGemmaForBlockDiffusion

from canvaslab.environment import environment_fingerprint
from canvaslab.models.mini import load_mini_tokenizer, mini_config
from canvaslab.training.batches import Pool, generate_texts
from canvaslab.training.loop import TrainSettings, train
from canvaslab.training.objective import use_autocast_experts


def seconds_per_step(history: list[dict], first: int) -> float:
    start = next(e for e in history if e["step"] >= first)
    end = history[-1]
    return (end["seconds"] - start["seconds"]) / (end["step"] - start["step"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--passages", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batch-sizes", default="512,1024,2048")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--from", dest="first", type=int, default=15)
    parser.add_argument("--profile-steps", type=int, default=8)
    parser.add_argument("--examples", type=int, default=40000)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    pool = Pool.build(load_mini_tokenizer(), generate_texts(args.passages, args.examples, 0, workers=8), 256)
    torch.manual_seed(0)
    model = DiffusionGemmaForBlockDiffusion(mini_config()).to(args.device)
    if args.device.startswith("cuda"):
        use_autocast_experts(model)
    result = {"environment": environment_fingerprint(device=torch.device(args.device)), "steps": args.steps,
              "timed_from_step": args.first, "seconds_per_step": {}, "peak_gib": {}}
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    for batch in sizes:
        settings = TrainSettings(steps=args.steps, batch_size=batch, log_every=1, learning_rate=1e-4)
        if args.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        history = train(model, pool, settings, "diffusion", canvas_length=128)
        result["seconds_per_step"][batch] = round(seconds_per_step(history, args.first), 4)
        if args.device.startswith("cuda"):
            result["peak_gib"][batch] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        print(batch, result["seconds_per_step"][batch], flush=True)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if args.device.startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    settings = TrainSettings(steps=args.profile_steps, batch_size=sizes[0], log_every=1, learning_rate=1e-4)
    with torch.profiler.profile(activities=activities) as profile:
        started = time.perf_counter()
        train(model, pool, settings, "diffusion", canvas_length=128)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        wall = time.perf_counter() - started
    events = profile.key_averages()
    kernel_us = sum(e.self_device_time_total for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    result["profile"] = {"batch": sizes[0], "steps": args.profile_steps, "wall_s": round(wall, 3),
                         "cuda_kernel_s": round(kernel_us / 1e6, 3), "gpu_busy_fraction": round(kernel_us / 1e6 / wall, 3),
                         "aten_calls_per_step": sum(e.count for e in events if e.key.startswith("aten::")) // args.profile_steps,
                         "syncs_per_step": sum(e.count for e in events if e.key in ("aten::item", "aten::_local_scalar_dense",
                                                                                   "cudaStreamSynchronize", "cudaDeviceSynchronize"))
                         / args.profile_steps}
    text = [events.table(sort_by="self_cuda_time_total" if args.device.startswith("cuda") else "self_cpu_time_total", row_limit=30),
            events.table(sort_by="self_cpu_time_total", row_limit=30)]
    (args.out / "mini_step_profile.txt").write_text("\n\n".join(text))
    (args.out / "mini_step_gpu.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "environment"}, indent=1))


if __name__ == "__main__":
    main()
