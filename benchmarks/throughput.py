"""Denoising-step throughput (canvas tokens per second) per mode and batch size, for issue 3's goal:
invariant >= 0.9 x stock at B >= 8 and >= 0.7 x stock at B = 1. ``vs_stock`` compares whole generate calls
at ``--steps`` passes; ``pass_vs_stock`` one denoising pass (calls at two step counts, differenced).

    python benchmarks/throughput.py --model real-shapes --layers 6 --device cuda \\
        --batch-sizes 1,4,8,16,32,64 --modes stock,rowwise,invariant --out benchmarks/results/h200_throughput.json
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from canvaslab.environment import environment_fingerprint
from canvaslab.invariant import replaced_ops
from canvaslab.io import write_json_atomic
from canvaslab.models import load_model
from tracer_overhead import timed_generate  # benchmarks/ (the script's own folder is on sys.path)


def step_throughput(loaded, mode: str, batch: int, steps: int = 4, repeats: int = 3) -> dict:
    """Denoising-step throughput: generate timed at ``steps`` and at ``2 * steps`` denoising passes.

    The difference of the two medians divided by the difference in decoder passes (counted, and required
    to be the same in every call: random weights never meet the confidence criterion, so none stops early)
    is the time of one pass, free of what a generate call costs once (prompt encoding, set-up). Whole-call throughput at ``steps`` is reported as well
    (``canvas_tokens_per_s``, ``ms_per_row_step``: the fields earlier result files carry).
    """
    prompt = loaded.tokenizer("the man said that the water in the river was cold")["input_ids"]

    def median_seconds(passes: int) -> tuple[float, list[float], list[int]]:
        times, passes_run = [], []
        for attempt in range(repeats + 1):  # the first is a warm-up
            with decoder_passes(loaded.model) as counter:
                times.append(timed_generate(loaded, [prompt] * batch, {"max_denoising_steps": passes}, [],
                                            seed=attempt, mode=mode))
            passes_run.append(counter[0])
        return sorted(times[1:])[repeats // 2], times, passes_run

    short, short_times, short_passes = median_seconds(steps)
    long, long_times, long_passes = median_seconds(2 * steps)
    if len(set(short_passes)) > 1 or len(set(long_passes)) > 1 or long_passes[0] <= short_passes[0]:
        raise RuntimeError(f"generate stopped early ({short_passes} and {long_passes} decoder passes): "
                           "the per-pass difference would not be one pass; time with fewer steps")
    per_pass = (long - short) / (long_passes[0] - short_passes[0])
    return {"mode": mode, "batch": batch, "steps": steps, "decoder_passes": short_passes[0], "seconds": short,
            "all_seconds": short_times, "canvas_tokens_per_s": batch * 256 * steps / short,
            "ms_per_row_step": 1000 * short / (batch * steps), "decoder_passes_at_double_steps": long_passes[0],
            "seconds_at_double_steps": long, "all_seconds_at_double_steps": long_times,
            "pass_canvas_tokens_per_s": batch * 256 / per_pass, "pass_ms_per_row_step": 1000 * per_pass / batch}


@contextlib.contextmanager
def decoder_passes(model):
    """Counts the decoder's forward calls in the block: the denoising passes generate actually ran."""
    counter = [0]
    handle = model.model.decoder.register_forward_hook(lambda *_: counter.__setitem__(0, counter[0] + 1))
    try:
        yield counter
    finally:
        handle.remove()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-sizes", default="1,4,8")
    parser.add_argument("--modes", default="stock,rowwise,invariant")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    loaded = load_model(args.model, device=args.device, layers=args.layers)
    environment = environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source,
                                          replaced_ops={m: replaced_ops(m) for m in args.modes.split(",")})
    rows = []
    for batch in map(int, args.batch_sizes.split(",")):
        for mode in args.modes.split(","):
            rows.append(step_throughput(loaded, mode, batch, args.steps))
            print({k: v for k, v in rows[-1].items() if k != "all_seconds"}, flush=True)
            write_json_atomic(args.out, {"environment": environment, "runs": with_ratios(rows)})  # survives a cut-off


def with_ratios(rows: list[dict]) -> list[dict]:
    """Each run with its throughput relative to stock at the same batch size."""
    def ratio(row, field):
        stock = next((r for r in rows if r["mode"] == "stock" and r["batch"] == row["batch"]), None)
        return row[field] / stock[field] if stock else None

    return [{**row, "vs_stock": ratio(row, "canvas_tokens_per_s"),
             "pass_vs_stock": ratio(row, "pass_canvas_tokens_per_s")} for row in rows]


if __name__ == "__main__":
    main()
