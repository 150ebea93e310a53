"""Where a generate call spends its time: wall time per phase (prompt encoding, each decoder pass, the
work between passes), then per op (torch.profiler tables, by device time and by CPU time, over one call after
a warm-up), for each mode and batch size. Writes a text report.

    python benchmarks/profile_generate.py --model real-shapes --layers 6 --device cuda --modes stock,invariant \\
        --batch-sizes 1 --steps 4 --out OUT/profile_b1.txt
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from canvaslab.environment import environment_fingerprint, record_result
from canvaslab.generation import generate
from canvaslab.models import anatomy, load_model


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
    for name, module in (("encoder", anatomy.encoder(loaded.model)), ("decoder", anatomy.decoder(loaded.model))):
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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="preset, installed model, checkpoint directory or config.json")
    parser.add_argument("--layers", type=int, default=None, help="keep the first N layers (presets)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--modes", default="stock,invariant", help="comma-separated: stock, rowwise, invariant")
    parser.add_argument("--batch-sizes", default="1", help="comma-separated")
    parser.add_argument("--steps", type=int, default=4, help="denoising passes per call")
    parser.add_argument("--rows", type=int, default=25, help="ops listed per table")
    parser.add_argument("--out", type=Path, required=True, help="text report to write")
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
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(reports))
    record_result(args.out, shows="wall time per generate phase and torch.profiler tables per op, per mode and batch "
                  "size", environment=environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source))


if __name__ == "__main__":
    main()
