"""How much the commit-order tracer slows generate down.

Times ``canvaslab.generation.generate`` on the same prompts with and without a ``CommitTracer`` observer,
alternating the two so drift (clocks, other load) hits both alike, after one warm-up of each; with CUDA
every timing is bracketed by ``torch.cuda.synchronize``. Per-row random streams make every repeat the
same generation, so both sides do the same work. Building the traces after generate (lists, scoring) is
timed apart: it is not part of generate.

The time spent inside the tracer's ``on_accept`` is also summed: on a shared or busy CPU, where
whole-generate timings scatter by more than the overhead itself, it is the steadier number. On CUDA it is
an upper bound (its one device-to-host copy also waits for the step's queued kernels).

    python benchmarks/tracer_overhead.py --model real-shapes --layers 6 --device cuda --batch-size 8 \\
        --out OUT/tracer_overhead.json
    # invariant mode's fast paths: the fused step's CUDA graphs, and the compiled static-cache path
    python benchmarks/tracer_overhead.py --model real-shapes --layers 6 --device cuda --batch-size 8 --steps 8 \\
        --mode invariant [--path compiled] --out OUT/tracer_overhead_fast.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from canvaslab.environment import environment_fingerprint, record_result
from canvaslab.generation import generate
from canvaslab.io import write_json_atomic
from canvaslab.models import load_model
from canvaslab.prompts import BUILTIN_PROMPTS
from canvaslab.scoring.probes.probe import make_probe
from canvaslab.studies.commit_order.tracer import CommitTracer


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="preset, installed model, checkpoint directory or config.json")
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=None, help="max denoising steps (default: the model's)")
    parser.add_argument("--mode", default="stock", choices=("stock", "rowwise", "invariant"))
    parser.add_argument("--path", default="dynamic", choices=("dynamic", "compiled"),
                        help="compiled: transformers' static-cache compiled path (needs --mode invariant)")
    parser.add_argument("--out", type=Path, required=True, help="JSON result file")
    return parser.parse_args()


class TimedTracer(CommitTracer):
    """A ``CommitTracer`` that sums the seconds spent in its own ``on_accept``."""

    def __init__(self):
        super().__init__()
        self.seconds = 0.0

    def on_accept(self, **kwargs) -> None:
        start = time.perf_counter()
        super().on_accept(**kwargs)
        self.seconds += time.perf_counter() - start


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_generate(loaded, prompts, generation, observers, seed: int = 0, mode: str = "stock") -> float:
    """Seconds of one generate call, device work included (shared by the other timing scripts)."""
    _sync(loaded.device)
    start = time.perf_counter()
    generate(loaded, prompts, seed=seed, observers=observers, generation=generation, mode=mode)
    _sync(loaded.device)
    return time.perf_counter() - start


def trace_build_seconds(loaded, prompts, generation, mode: str = "stock") -> tuple[float, int]:
    """Seconds to turn one traced batch into traces (no scoring: open-ended probes), and the calls seen."""
    tracer = CommitTracer(loaded.model, mode)
    output = generate(loaded, prompts, seed=0, observers=[tracer], generation=generation, mode=mode)
    probes = [make_probe("open_ended", f"bench-{i}", "", {}) for i in range(len(prompts))]
    start = time.perf_counter()
    tracer.traces(output.rows, probes, [0] * len(prompts), settings=output.settings)
    return time.perf_counter() - start, len(tracer.calls)


def measure_overhead(loaded, prompts, generation, repeats: int, mode: str = "stock") -> dict:
    """Generate timed with and without the tracer, alternating, after one warm-up of each."""
    CommitTracer(loaded.model, mode)  # refuses an untraceable model before any timing
    for observers in ([], [CommitTracer()]):  # warm-up
        timed_generate(loaded, prompts, generation, observers, mode=mode)
    without, with_tracer, inside = [], [], []
    for _ in range(repeats):
        without.append(timed_generate(loaded, prompts, generation, [], mode=mode))
        tracer = TimedTracer()
        with_tracer.append(timed_generate(loaded, prompts, generation, [tracer], mode=mode))
        inside.append(tracer.seconds)
    build_s, calls = trace_build_seconds(loaded, prompts, generation, mode)
    base, traced = statistics.median(without), statistics.median(with_tracer)
    return {
        "accept_calls_per_generate": calls,
        "generate_s": {"without_tracer": without, "with_tracer": with_tracer,
                       "median_without_tracer": base, "median_with_tracer": traced},
        "overhead_pct": 100.0 * (traced - base) / base,
        "on_accept_s": inside,
        "on_accept_pct_of_generate": 100.0 * statistics.median(
            seconds / total for seconds, total in zip(inside, with_tracer)),
        "trace_build_s": build_s,
    }


def main() -> None:
    args = parse_args()
    loaded = load_model(args.model, dtype=args.dtype, device=args.device, layers=args.layers)
    if args.path == "compiled":  # transformers' compiled static-cache path (invariant mode: canvaslab's backend)
        loaded.model.generation_config.cache_implementation = "static"
    texts = [BUILTIN_PROMPTS[i % len(BUILTIN_PROMPTS)] for i in range(args.batch_size)]
    prompts = [loaded.tokenizer(text)["input_ids"] for text in texts]
    generation = {"max_denoising_steps": args.steps}
    measured = measure_overhead(loaded, prompts, generation, args.repeats, args.mode)
    result = {
        "benchmark": "tracer_overhead",
        "environment": environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source, mode=args.mode),
        "config": {**{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                   "generation": generation, "accept_calls_per_generate": measured["accept_calls_per_generate"]},
        **{k: v for k, v in measured.items() if k != "accept_calls_per_generate"},
    }
    write_json_atomic(args.out, result)
    record_result(args.out, shows="generate's time with and without the commit-order tracer (overhead in %), and the "
                  "time inside its on_accept", environment=result["environment"])
    print(f"generate median {measured['generate_s']['median_without_tracer']:.4f} s without, "
          f"{measured['generate_s']['median_with_tracer']:.4f} s with the tracer: "
          f"overhead {result['overhead_pct']:+.2f}%; inside on_accept {result['on_accept_pct_of_generate']:.2f}% "
          f"of generate ({measured['accept_calls_per_generate']} accept calls; building traces "
          f"{result['trace_build_s']:.4f} s)")


if __name__ == "__main__":
    main()
