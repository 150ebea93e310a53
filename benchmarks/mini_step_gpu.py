#!/usr/bin/env python
"""Where a `mini` training step's time goes on a GPU, and what a larger batch costs per step.

The real training loop (``canvaslab.training.loop.train``: batches built on the host, the self-conditioning
pass on a host-drawn half of the steps, AdamW, clipping, the finiteness check) on the full-size `mini`
config, for a few batch sizes; seconds per step from the loop's own history (steps ``--from`` to the end,
past the warm-up), then one profiled stretch at the first batch size: summed CUDA kernel time against wall
time (a GPU busy far less than the wall clock means the step is bound by the host), and the top kernels
and host ops; then the same steps with other implementations of the model's parts (``--variants``:
``eager_attention``, ``batched_mm`` experts, ``compiled_layers`` / ``compiled_leaves`` =
``canvaslab.training.loop.compile_parts``), each at the first batch size, while ``--seconds`` last.

    python benchmarks/mini_step_gpu.py --passages prose.txt --out DIR [--batch-sizes 512,1024,2048]
        [--steps 40] [--from 15] [--device cuda] [--variants compiled_leaves,...] [--seconds 400]

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
from canvaslab.training.loop import TrainSettings, compile_parts, train
from canvaslab.training.objective import use_autocast_experts


def seconds_per_step(history: list[dict], first: int) -> float:
    start = next(e for e in history if e["step"] >= first)
    end = history[-1]
    return (end["seconds"] - start["seconds"]) / (end["step"] - start["step"])


def apply_variant(model, variant: str) -> None:
    if variant == "eager_attention":
        model.set_attn_implementation("eager")
    elif variant == "batched_mm":
        model.set_experts_implementation("batched_mm")
    elif variant in ("compiled_layers", "compiled_leaves"):
        compile_parts(model, variant.split("_")[1])
    else:
        raise SystemExit(f"unknown variant {variant!r}")


def profile_steps(model, pool, batch: int, steps: int, cuda: bool) -> tuple[dict, str]:
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    settings = TrainSettings(steps=steps, batch_size=batch, log_every=1, learning_rate=1e-4)
    with torch.profiler.profile(activities=activities) as profile:
        started = time.perf_counter()
        train(model, pool, settings, "diffusion", canvas_length=128)
        if cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - started
    events = profile.key_averages()
    kernel_us = sum(e.self_device_time_total for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    summary = {"batch": batch, "steps": steps, "wall_s": round(wall, 3), "cuda_kernel_s": round(kernel_us / 1e6, 3),
               "gpu_busy_fraction": round(kernel_us / 1e6 / wall, 3),
               "aten_calls_per_step": sum(e.count for e in events if e.key.startswith("aten::")) // steps,
               "syncs_per_step": sum(e.count for e in events if e.key in (
                   "aten::item", "aten::_local_scalar_dense", "cudaStreamSynchronize", "cudaDeviceSynchronize")) / steps}
    tables = [events.table(sort_by="self_cuda_time_total" if cuda else "self_cpu_time_total", row_limit=35),
              events.table(sort_by="self_cpu_time_total", row_limit=25)]
    return summary, "\n\n".join(tables)


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
    parser.add_argument("--variants", default="")
    parser.add_argument("--seconds", type=float, default=400.0, help="no new stage starts after this")
    args = parser.parse_args()
    started = time.perf_counter()
    cuda = args.device.startswith("cuda")
    args.out.mkdir(parents=True, exist_ok=True)
    pool = Pool.build(load_mini_tokenizer(), generate_texts(args.passages, args.examples, 0, workers=8), 256)
    torch.manual_seed(0)
    model = DiffusionGemmaForBlockDiffusion(mini_config()).to(args.device)
    if cuda:
        use_autocast_experts(model)
    result = {"environment": environment_fingerprint(device=torch.device(args.device)), "steps": args.steps,
              "timed_from_step": args.first, "seconds_per_step": {}, "peak_gib": {}}
    sizes = [int(s) for s in args.batch_sizes.split(",")]

    def save() -> None:
        (args.out / "mini_step_gpu.json").write_text(json.dumps(result, indent=1))

    def timed(label: str, batch: int) -> None:
        if time.perf_counter() - started > args.seconds:
            result["seconds_per_step"][label] = "skipped: out of time"
            print(label, "skipped: out of time", flush=True)
            save()
            return
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        try:
            settings = TrainSettings(steps=args.steps, batch_size=batch, log_every=1, learning_rate=1e-4)
            history = train(model, pool, settings, "diffusion", canvas_length=128)
            result["seconds_per_step"][label] = round(seconds_per_step(history, args.first), 4)
            # with a compiled variant: compiling happens in the first steps
            result.setdefault("seconds_to_step", {})[label] = {e["step"]: e["seconds"] for e in history
                                                                if e["step"] in (0, 1, 2, args.first)}
            if cuda:
                result["peak_gib"][label] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        except torch.OutOfMemoryError:
            result["seconds_per_step"][label] = "out of memory"
            model.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
        print(label, result["seconds_per_step"][label], result["peak_gib"].get(label), flush=True)
        save()

    timed(f"sdpa_grouped_mm/B={sizes[0]}", sizes[0])
    result["profile"], tables = profile_steps(model, pool, sizes[0], args.profile_steps, cuda)
    (args.out / "mini_step_profile.txt").write_text(tables)
    save()
    print(json.dumps(result["profile"]), flush=True)
    for batch in sizes[1:]:
        timed(f"sdpa_grouped_mm/B={batch}", batch)
    for variant in filter(None, args.variants.split(",")):
        apply_variant(model, variant)
        timed(f"{variant}/B={sizes[0]}", sizes[0])
        if cuda and not variant.startswith("compiled"):
            use_autocast_experts(model)
            model.set_attn_implementation("sdpa")


if __name__ == "__main__":
    main()
