"""Invariant mode's compiled path on one GPU, in one process (compilations are shared between the stages):
the byte-for-byte proof, throughput beside eager invariant and stock, the commit tracer's overhead.

    python benchmarks/h200_compiled_run.py --out OUT_DIR [--layers 6] [--seconds 400] [--quiet-after PATH]

Writes OUT_DIR/proof_compiled.json, throughput_compiled.json, tracer_overhead_fast.json (each as soon as its
stage ends); a stage that would start after its share of ``--seconds`` is skipped and says so. With
``--quiet-after PATH`` the timings wait (until their share of time runs out) for PATH to exist: another
process on the same GPU (the GPU tests) says it is done, so it does not slow the timed calls; the JSON says
whether it was. ``--model tiny --device cpu --backend traced`` dry-runs the whole script on a CPU.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from canvaslab.environment import environment_fingerprint
from canvaslab.invariant import replaced_ops
from canvaslab.io import write_json_atomic
from canvaslab.models import load_model
from canvaslab.prompts import BUILTIN_PROMPTS
from compiled_proof import prove, use_path
from throughput import batch_throughput, with_ratios
from tracer_overhead import measure_overhead


def _wait_for(path: Path | None, until: float, log) -> bool:
    """Wait for ``path`` to exist, at most until ``until``; whether it does."""
    if path is None:
        return True
    while not path.exists() and time.time() < until:
        time.sleep(1)
    log(f"{path} {'exists' if path.exists() else 'still missing: timing beside the other process'}")
    return path.exists()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="real-shapes")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--proof-sizes", default="1,2,3,8,32,64")
    parser.add_argument("--throughput-sizes", default="1,32,64")
    parser.add_argument("--stock-max-batch", type=int, default=32,
                        help="stock mode is left out above this batch (at 6 layers B=64 does not fit an H200)")
    parser.add_argument("--tracer-paths", default="compiled,graphs")
    parser.add_argument("--quiet-after", type=Path, default=None,
                        help="wait for this file before timing (another process on the GPU is done)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=400)
    parser.add_argument("--proof-share", type=float, default=0.55,
                        help="the proof's sizes start within this fraction of --seconds")
    parser.add_argument("--backend", choices=("inductor", "traced"), default="inductor",
                        help="traced: the aten graph run without Inductor's code generation (a quick CPU dry run)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.backend == "traced":
        import canvaslab.generation.compiled_path as compiled_path
        from canvaslab.invariant.compiled import traced_backend

        compiled_path.BACKEND = traced_backend
    start = time.time()
    deadline = start + args.seconds
    args.out.mkdir(parents=True, exist_ok=True)
    loaded = load_model(args.model, device=args.device, layers=args.layers)
    modes = ["stock", "invariant", "invariant:compiled"]
    environment = environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source,
                                          replaced_ops={m: replaced_ops(m.split(":")[0]) for m in modes})

    def log(*parts):
        print(f"[{time.time() - start:6.1f} s]", *parts, flush=True)

    use_path(loaded, "compiled")
    proof = prove(loaded, mode="invariant", fills=["copies", "mixed"], steps=args.steps,
                  sizes=[int(b) for b in args.proof_sizes.split(",")], deadline=start + args.proof_share * args.seconds)
    write_json_atomic(args.out / "proof_compiled.json",
                      {"environment": {**environment, "torch_compile": True}, "path": "compiled",
                       "steps": args.steps, **proof})
    log("proof", json.dumps(proof["summary"]))
    use_path(loaded, "graphs")

    quiet = _wait_for(args.quiet_after, deadline - 0.35 * args.seconds, log)
    rows, failed = [], []
    for batch in map(int, args.throughput_sizes.split(",")):
        if time.time() > deadline - 0.2 * args.seconds:
            log(f"throughput B={batch} skipped: out of time")
            continue
        timed_modes = [mode for mode in modes if mode != "stock" or batch <= args.stock_max_batch]
        try:
            rows += batch_throughput(loaded, timed_modes, batch, args.steps, repeats=1)
        except torch.OutOfMemoryError as error:
            failed.append({"batch": batch, "error": str(error).splitlines()[0]})
            log(f"throughput B={batch}: out of memory")
            torch.cuda.empty_cache()
            continue
        write_json_atomic(args.out / "throughput_compiled.json",
                          {"environment": environment, "gpu_shared_with_another_process": not quiet,
                           "runs": with_ratios(rows), "failed": failed})
        for row in with_ratios(rows)[-len(timed_modes):]:
            log({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()
                 if k in ("mode", "batch", "ms_per_row_step", "pass_ms_per_row_step", "peak_memory_gib", "graph_replays")})

    prompts = [loaded.tokenizer(BUILTIN_PROMPTS[i % len(BUILTIN_PROMPTS)])["input_ids"] for i in range(8)]
    overhead = {}
    for path in args.tracer_paths.split(","):
        if time.time() > deadline:
            log(f"tracer overhead on {path} skipped: out of time")
            continue
        use_path(loaded, path)
        overhead[path] = measure_overhead(loaded, prompts, {"max_denoising_steps": 8}, repeats=3, mode="invariant")
        log(f"tracer overhead on {path}: {overhead[path]['overhead_pct']:+.2f}% "
            f"(inside on_accept {overhead[path]['on_accept_pct_of_generate']:.2f}%)")
        write_json_atomic(args.out / "tracer_overhead_fast.json",
                          {"environment": environment, "batch_size": 8, "steps": 8, "mode": "invariant", **overhead})
    use_path(loaded, "graphs")
    if loaded.device.type == "cuda":
        log(f"peak memory {torch.cuda.max_memory_allocated() / 2 ** 30:.1f} GiB")
    log("done")


if __name__ == "__main__":
    main()
