"""Where a generate call spends its time: wall time per phase (prompt encoding, each decoder pass, the
work between passes), then per op (torch.profiler over one call after a warm-up).

    python benchmarks/profile_generate.py --model real-shapes --layers 6 --device cuda --mode invariant \\
        --batch-size 1 --steps 4 --out benchmarks/results/profile_invariant_b1.txt
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from canvaslab.generation import generate
from canvaslab.models import load_model


def phase_times(loaded, run) -> list[tuple[str, float]]:
    """(phase, ms) in call order: each encoder and decoder forward, and the gaps between them, timed with
    the device synchronised at every boundary (so each phase's own GPU work is inside it)."""
    sync = torch.cuda.synchronize if loaded.device.type == "cuda" else (lambda: None)
    marks: list[tuple[str, float]] = []

    def mark(label):
        def hook(*_):
            sync()
            marks.append((label, time.perf_counter()))
        return hook

    handles = []
    for name in ("encoder", "decoder"):
        module = getattr(loaded.model.model, name)
        handles += [module.register_forward_pre_hook(mark(f"{name} start")),
                    module.register_forward_hook(mark(f"{name} end"))]
    try:
        sync()
        marks.append(("call start", time.perf_counter()))
        run()
        sync()
        marks.append(("call end", time.perf_counter()))
    finally:
        for handle in handles:
            handle.remove()
    return [(f"{a} -> {b}", 1000 * (tb - ta)) for (a, ta), (b, tb) in zip(marks, marks[1:])]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--modes", default="stock,invariant")
    parser.add_argument("--batch-sizes", default="1")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rows", type=int, default=25, help="ops listed per table")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    loaded = load_model(args.model, device=args.device, layers=args.layers)
    prompt = loaded.tokenizer("the man said that the water in the river was cold")["input_ids"]
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if loaded.device.type == "cuda" else [])
    sort_by = "self_cuda_time_total" if loaded.device.type == "cuda" else "self_cpu_time_total"
    reports = []
    for batch in map(int, args.batch_sizes.split(",")):
        for mode in args.modes.split(","):
            run = lambda: generate(loaded, [prompt] * batch, generation={"max_denoising_steps": args.steps}, mode=mode)
            run()
            phases = "\n".join(f"  {label:28s} {ms:8.2f} ms" for label, ms in phase_times(loaded, run))
            with profile(activities=activities) as prof:
                run()
                if loaded.device.type == "cuda":
                    torch.cuda.synchronize()
            table = prof.key_averages().table(sort_by=sort_by, row_limit=args.rows)
            cpu_table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows)
            reports.append(f"## mode={mode} batch={batch}\n### phases\n{phases}\n{table}\n### by CPU time\n{cpu_table}\n")
            print(reports[-1][:4000], flush=True)
    args.out.write_text("\n".join(reports))


if __name__ == "__main__":
    main()
