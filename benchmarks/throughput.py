"""Denoising-step throughput and peak GPU memory of generate, per mode and batch size.

For each batch size, every mode (``stock``, ``rowwise``, ``invariant``) generates the same prompt in
alternation (one call of each in turn, ``--repeats`` rounds after a warm-up round), so drift in clocks or in
the host's load hits every mode alike; medians are reported. Two numbers per mode: whole generate calls at
``--steps`` passes (``ms_per_row_step``, ``vs_stock``), and one denoising pass (``pass_ms_per_row_step``,
``pass_vs_stock``): calls at ``--steps`` and ``2 x --steps`` passes differenced by the decoder passes they
ran, free of per-call costs (prompt encoding, set-up). Modes are compared within one run only. A third,
``steady_pass_ms_per_row_step``: the median interval between consecutive passes of the long calls from the fourth
pass on (replay to replay for the fused step; ``--steps`` of 3 or more), free of the graph capture's cost too.

``invariant:eager`` is invariant mode with the fused step's CUDA graphs off; ``invariant:compiled`` runs
transformers' compiled static-cache path with canvaslab's backend (its warm-up round compiles).

    python benchmarks/throughput.py --model real-shapes --layers 6 --device cuda \\
        --batch-sizes 1,8,32 --modes stock,invariant --out OUT/throughput_6l.json
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path

import torch

from canvaslab.environment import environment_fingerprint, record_result
from canvaslab.invariant import replaced_ops
from canvaslab.io import write_json_atomic
from canvaslab.models import load_model
from tracer_overhead import timed_generate  # benchmarks/ (the script's own folder is on sys.path)


@contextlib.contextmanager
def graphs_as_in(mode: str, model=None):
    """``invariant:eager`` is invariant mode with its CUDA graphs off (the fused step's passes all eager);
    ``invariant:compiled`` runs transformers' compiled static-cache path (canvaslab's backend, graphs on)."""
    from canvaslab.generation.fused_step import FusedStep

    variant = mode.partition(":")[2]
    previous = FusedStep.cuda_graphs
    config = model.generation_config if model is not None else None
    previous_cache = config.cache_implementation if config is not None else None
    FusedStep.cuda_graphs = variant != "eager"
    if variant == "compiled":
        config.cache_implementation = "static"
    try:
        yield mode.split(":")[0]
    finally:
        FusedStep.cuda_graphs = previous
        if config is not None:
            config.cache_implementation = previous_cache


@contextlib.contextmanager
def decoder_passes(model):
    """Counts, in the block, the denoising passes generate ran (``[0]``: the end of each step's random draws,
    ``RowRandomness.finish_step``, which every pass calls outside the model), the passes replayed from a CUDA
    graph (``[1]``: calls of a captured step) and the clock at each pass's end (``[2]``). Nothing is hooked into
    the model: compiled code traces a module's hooks once and would keep a stale one."""
    from canvaslab.generation.fused_step import CapturedStep
    from canvaslab.generation.row_randomness import RowRandomness

    counter = [0, 0, []]
    original, replay = RowRandomness.finish_step, CapturedStep.__call__

    def counted(self, *args, **kwargs):
        counter[0] += 1
        counter[2].append(time.perf_counter())  # generate reads a flag back every pass: stamps are a pass apart
        return original(self, *args, **kwargs)

    def replayed(self, *args, **kwargs):
        counter[1] += 1
        return replay(self, *args, **kwargs)

    RowRandomness.finish_step, CapturedStep.__call__ = counted, replayed
    try:
        yield counter
    finally:
        RowRandomness.finish_step, CapturedStep.__call__ = original, replay


# The first passes of a canvas are not its steady state: the fused step runs one or two eagerly and captures its
# CUDA graph at the second or third. Whole calls also vary by tens of milliseconds from call to call (as much as several passes at B=1,
# which is why the differenced figure is unstable there). Intervals between renoisings from the fourth on are
# replay to replay (the one from the third, after the graph's first replay, is left out too).
STEADY_FROM = 3


def batch_throughput(loaded, modes: list[str], batch: int, steps: int, repeats: int) -> list[dict]:
    """Every mode at one batch size: generate timed at ``steps`` and ``2 * steps`` denoising passes.

    The difference of the two medians divided by the difference in decoder passes (counted, and required
    to be the same in every call: random weights never meet the confidence criterion, so none stops early)
    is the time of one pass, free of what a generate call costs once (prompt encoding, set-up).
    """
    prompt = loaded.tokenizer("the man said that the water in the river was cold")["input_ids"]
    seconds = {(mode, passes): [] for mode in modes for passes in (steps, 2 * steps)}
    passes_run = {key: set() for key in seconds}
    replayed = {key: set() for key in seconds}
    steady = {mode: [] for mode in modes}  # pass-to-pass intervals of the long calls, from the fourth pass on
    peak_bytes = dict.fromkeys(modes, 0)
    cuda = loaded.device.type == "cuda"
    for attempt in range(repeats + 1):  # round 0 is a warm-up (Triton compiles, caches fill)
        for mode, passes in seconds:
            if cuda:
                torch.cuda.reset_peak_memory_stats(loaded.device)
            with decoder_passes(loaded.model) as counter, graphs_as_in(mode, loaded.model) as generate_mode:
                elapsed = timed_generate(loaded, [prompt] * batch, {"max_denoising_steps": passes}, [],
                                         seed=attempt, mode=generate_mode)
            if cuda:
                peak_bytes[mode] = max(peak_bytes[mode], torch.cuda.max_memory_allocated(loaded.device))
            passes_run[mode, passes].add(counter[0])
            replayed[mode, passes].add(counter[1])
            if attempt:
                seconds[mode, passes].append(elapsed)
                if passes == 2 * steps:
                    steady[mode] += [b - a for a, b in zip(counter[2][STEADY_FROM:], counter[2][STEADY_FROM + 1:])]
    rows = []
    for mode in modes:
        counts = passes_run[mode, steps], passes_run[mode, 2 * steps]
        if any(len(seen) != 1 for seen in counts) or max(counts[1]) <= min(counts[0]):
            raise RuntimeError(f"{mode}, B={batch}: calls ran {sorted(counts[0])} and {sorted(counts[1])} decoder passes; "
                               "one pass cannot be differenced out (did generate stop early?)")
        (short_passes,), (long_passes,) = counts
        short, long = statistics.median(seconds[mode, steps]), statistics.median(seconds[mode, 2 * steps])
        per_pass = (long - short) / (long_passes - short_passes)
        rows.append({"mode": mode, "batch": batch, "steps": steps, "decoder_passes": short_passes,
                     "seconds": short, "all_seconds": seconds[mode, steps],
                     "canvas_tokens_per_s": batch * 256 * steps / short,
                     "ms_per_row_step": 1000 * short / (batch * steps),
                     "graph_replays": sorted(replayed[mode, steps]),
                     "graph_replays_at_double_steps": sorted(replayed[mode, 2 * steps]),
                     "decoder_passes_at_double_steps": long_passes, "seconds_at_double_steps": long,
                     "all_seconds_at_double_steps": seconds[mode, 2 * steps],
                     "pass_canvas_tokens_per_s": batch * 256 / per_pass, "pass_ms_per_row_step": 1000 * per_pass / batch,
                     "steady_pass_ms_per_row_step": 1000 * statistics.median(steady[mode]) / batch
                     if steady[mode] else None, "steady_intervals": len(steady[mode]),
                     "peak_memory_gib": peak_bytes[mode] / 2 ** 30 if cuda else None})
    return rows


def with_ratios(rows: list[dict]) -> list[dict]:
    """Each run with its throughput relative to stock at the same batch size."""
    def ratio(row, field):
        stock = next((r for r in rows if r["mode"] == "stock" and r["batch"] == row["batch"]), None)
        return row[field] / stock[field] if stock else None

    return [{**row, "vs_stock": ratio(row, "canvas_tokens_per_s"),
             "pass_vs_stock": ratio(row, "pass_canvas_tokens_per_s")} for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="preset, installed model, checkpoint directory or config.json")
    parser.add_argument("--layers", type=int, default=None, help="keep the first N layers (presets)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-sizes", default="1,4,8", help="comma-separated")
    parser.add_argument("--modes", default="stock,rowwise,invariant",
                        help="comma-separated: stock, rowwise, invariant, invariant:eager, invariant:compiled")
    parser.add_argument("--steps", type=int, default=4, help="denoising passes of the short calls (the long: twice)")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds after the warm-up round")
    parser.add_argument("--out", type=Path, required=True, help="JSON result file (rewritten after every batch size)")
    args = parser.parse_args()
    loaded = load_model(args.model, device=args.device, layers=args.layers)
    modes = args.modes.split(",")
    environment = environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source,
                                          replaced_ops={m: replaced_ops(m.split(":")[0]) for m in modes})
    rows = []
    for batch in map(int, args.batch_sizes.split(",")):
        rows += batch_throughput(loaded, modes, batch, args.steps, args.repeats)
        for row in with_ratios(rows)[-len(modes):]:
            print({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items() if not k.startswith("all_")},
                  flush=True)
        write_json_atomic(args.out, {"environment": environment, "runs": with_ratios(rows)})  # survives a cut-off
    record_result(args.out, shows="denoising-step throughput and peak GPU memory per mode and batch size "
                  "(whole calls and one pass, relative to stock)", environment=environment)


if __name__ == "__main__":
    main()
