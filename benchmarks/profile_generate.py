"""Where a generate call spends its time: wall time per phase (prompt encoding, each decoder pass, the
work between passes), then per op (torch.profiler tables, by device time and by CPU time, over one call after
a warm-up), for each mode and batch size. Writes a text report.

With ``--steady`` (invariant mode on CUDA, where passes are replayed from CUDA graphs), a third section per
batch size: the steady-state step as generate runs it (the device timeline from one step's start to the
next, host work between replays included) against the captured graph replayed alone back to back (its
device time with no host work between), the difference being the time outside the pass; the first passes
of a canvas (eager, then the capture) on the host's clock; and the kernels of one replay by class
(experts, dense matmuls, attention, norms, sorting, the vocabulary pass, memory and elementwise work).

    python benchmarks/profile_generate.py --model real-shapes --layers 6 --device cuda --modes stock,invariant \\
        --batch-sizes 1 --steps 4 --out OUT/profile_b1.txt
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from canvaslab.environment import environment_fingerprint, record_result
from canvaslab.generation import generate
from canvaslab.generation.fused_step import CapturedStep, FusedStep
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


# Kernel name -> class, first match wins (Triton kernels by their function names in canvaslab.invariant).
KERNEL_CLASSES = (
    ("experts", r"_grouped_kernel|_combine_kernel|expert_schedule|grouped_mm"),
    ("vocabulary pass", r"_vocab_sample"),
    ("dense matmul", r"nvjet|gemm|_matmul_kernel|_sum_splits|cutlass.*(?<!fmha)_tensorop|sm90_xmma"),
    ("attention", r"fmha|attention|flash"),
    ("norms and softmax", r"_rms_norm|_row_kernel|softmax|norm"),
    ("sort and top-k", r"[Ss]ort|topk|[Rr]adix|[Ss]can|_expert_histogram|_expert_slots|_router_kernel"),
    ("memory and elementwise", r"[Mm]emcpy|[Mm]emset|copy|[Cc]at|elementwise|fill|index|scatter|gather|reduce"),
)


def kernel_class(name: str) -> str:
    return next((label for label, pattern in KERNEL_CLASSES if re.search(pattern, name)), "other")


def kernels_by_class(prof, passes: int) -> str:
    """Device time per pass of the profiled kernels, by class, and the 15 costliest kernels."""
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    if not kernels:
        return "  (the profiler saw no kernels inside the replays)\n"
    classes: dict[str, list[float]] = {}
    names: dict[str, list[float]] = {}
    for event in kernels:
        classes.setdefault(kernel_class(event.name), []).append(event.device_time / 1000)
        names.setdefault(event.name, []).append(event.device_time / 1000)
    total = sum(map(sum, classes.values())) / passes
    lines = [f"  {'class':26s} {'ms/pass':>9s} {'kernels/pass':>13s} {'share':>7s}"]
    for label, times in sorted(classes.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"  {label:26s} {sum(times) / passes:9.3f} {len(times) / passes:13.1f} "
                     f"{sum(times) / passes / total:7.1%}")
    lines.append(f"  {'all kernels':26s} {total:9.3f} {len(kernels) / passes:13.1f}")
    lines.append("  costliest kernels (ms/pass, calls/pass, class):")
    for name, times in sorted(names.items(), key=lambda kv: -sum(kv[1]))[:15]:
        lines.append(f"    {sum(times) / passes:8.3f} {len(times) / passes:7.1f}  {kernel_class(name):22s} {name[:70]}")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def steady_state_probe(at_replay: int, repeats: int):
    """While generate runs: the device time of every step (CUDA events at each step's start) and, at the
    ``at_replay``-th replay, the captured graph replayed ``repeats`` times alone (timed), then 3 times under
    the profiler. The extra replays recompute the same pass from the same inputs."""
    found: dict = {"step_events": [], "host": []}
    step_call, replay = FusedStep.__call__, CapturedStep.replay

    def timed_step(self, *args, **kwargs):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        found["step_events"].append(event)
        start = time.perf_counter()
        out = step_call(self, *args, **kwargs)
        found["host"].append(time.perf_counter() - start)
        found["replays"] = self.replays
        return out

    def probed_replay(self):
        replay(self)
        found["count"] = found.get("count", 0) + 1
        if found["count"] != at_replay:
            return
        torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            replay(self)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        found["replay_alone_ms"] = times
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                replay(self)
            torch.cuda.synchronize()
        found["kernels"] = kernels_by_class(prof, 3)

    FusedStep.__call__, CapturedStep.replay = timed_step, probed_replay
    try:
        yield found
    finally:
        FusedStep.__call__, CapturedStep.replay = step_call, replay


def steady_state(loaded, prompt, batch: int, steps: int) -> str:
    """The steady-state section (see the module) for one batch size, invariant mode."""
    generation = {"max_denoising_steps": steps, "confidence_threshold": 1e-30}  # never stops early: every step runs
    run = lambda: generate(loaded, [prompt] * batch, generation=generation, mode="invariant")
    run()  # warm-up: compilation, autotuning
    with steady_state_probe(at_replay=3, repeats=10) as found:
        torch.cuda.synchronize()
        run()
        torch.cuda.synchronize()
    events = found["step_events"]
    # step i's device span: its start event to the next step's (the probe's extra replays sit in an early one)
    spans = [a.elapsed_time(b) for a, b in zip(events, events[1:])]
    steady = [span for i, span in enumerate(spans) if i >= 6]
    if not steady or "replay_alone_ms" not in found:
        return f"## steady state batch={batch}\n  too few replayed passes ({len(spans)} steps); raise --steps\n"
    step_ms, alone_ms = statistics.median(steady), statistics.median(found["replay_alone_ms"])
    host = [1000 * h for h in found["host"]]
    return (f"## steady state batch={batch} (invariant, {steps} passes, {found.get('replays', 0)} replayed)\n"
            f"  step in generate, device timeline     {step_ms:8.2f} ms  (median of {len(steady)} steps)\n"
            f"  captured pass replayed alone          {alone_ms:8.2f} ms  (median of {len(found['replay_alone_ms'])})\n"
            f"  outside the pass                      {step_ms - alone_ms:8.2f} ms  ({(step_ms - alone_ms) / step_ms:.1%})\n"
            f"  per row-pass: step {step_ms / batch:.2f} ms, pass alone {alone_ms / batch:.2f} ms\n"
            f"  host time of passes 1-3 (eager, then the capture at the 2nd or 3rd and replays): "
            f"{', '.join(f'{h:.1f}' for h in host[:3])} ms; a replayed step's host time {statistics.median(host[7:]):.2f} ms\n"
            f"### kernels of one replay, by class\n{found['kernels']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="preset, installed model, checkpoint directory or config.json")
    parser.add_argument("--layers", type=int, default=None, help="keep the first N layers (presets)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--modes", default="stock,invariant", help="comma-separated: stock, rowwise, invariant")
    parser.add_argument("--batch-sizes", default="1", help="comma-separated")
    parser.add_argument("--steps", type=int, default=4, help="denoising passes per call")
    parser.add_argument("--rows", type=int, default=25, help="ops listed per table")
    parser.add_argument("--steady", action="store_true",
                        help="also the steady-state step against its captured pass alone (invariant mode, CUDA)")
    parser.add_argument("--out", type=Path, required=True, help="text report to write")
    args = parser.parse_args()
    if args.steady and not args.device.startswith("cuda"):
        parser.error("--steady needs --device cuda (passes are replayed from CUDA graphs only there)")
    loaded = load_model(args.model, device=args.device, layers=args.layers)
    prompt = loaded.tokenizer("the man said that the water in the river was cold")["input_ids"]
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if loaded.device.type == "cuda" else [])
    sort_by = "self_cuda_time_total" if loaded.device.type == "cuda" else "self_cpu_time_total"
    reports = []
    for batch in map(int, args.batch_sizes.split(",")):
        for mode in [m for m in args.modes.split(",") if m]:  # --modes "": the steady-state section alone
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
        if args.steady and loaded.device.type == "cuda":
            reports.append(steady_state(loaded, prompt, batch, max(args.steps, 16)))
            print(reports[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(reports))
    record_result(args.out, shows="wall time per generate phase and torch.profiler tables per op, per mode and batch "
                  "size", environment=environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source))


if __name__ == "__main__":
    main()
