"""One GPU session's evidence, in one process (one model build): run on the H200 with

    python benchmarks/h200_evidence.py --out DIR [--steps 4] [--budget-s 330]

1. The batch-size study at real shapes (6 layers, bf16): 8 built-in prompts x B = 1..4, stock mode,
   copied B=1 prompt cache, ops recorded (issue 2). Saved after every run (resumable).
2. If time is left: the invariant mode's proof at small scale (1 prompt, copies and mixed, B = 1, 2, 3, 8)
   and denoising-step throughput for stock / rowwise / invariant at B = 1 and 8 (issue 3, smoke scale).
3. If time is left: the commit tracer's overhead (issue 4).
Each part writes its own JSON under DIR as soon as it finishes; a part that would overrun is skipped.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from canvaslab.environment import environment_fingerprint
from canvaslab.generation import generate
from canvaslab.io import write_json_atomic
from canvaslab.models import load_model
from canvaslab.prompts import builtin_prompts
from canvaslab.studies.batch_size import BatchStudySettings, run_batch_study
from throughput import batch_throughput  # benchmarks/throughput.py (the script's own folder is on sys.path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--budget-s", type=float, default=330)
    args = parser.parse_args()
    start = time.time()
    left = lambda: args.budget_s - (time.time() - start)  # noqa: E731
    loaded = load_model("real-shapes", device="cuda", layers=args.layers)
    print(f"model built in {time.time() - start:.0f}s", flush=True)

    study = BatchStudySettings(batch_sizes=[1, 2, 3, 4], generation={"max_denoising_steps": args.steps})
    result = run_batch_study(loaded, builtin_prompts(8), study, out_dir=args.out / "batch_study",
                             progress=lambda done, total, doing: print(f"[{time.time() - start:5.0f}s] "
                                                                       f"{done}/{total} {doing}", flush=True))
    print(json.dumps(result["summary"]), flush=True)

    if left() > 90:
        proof = {}
        for fill in ("copies", "mixed"):
            settings = BatchStudySettings(batch_sizes=[1, 2, 3, 8], fill=fill, mode="invariant", record_ops=False,
                                          generation={"max_denoising_steps": 2})
            proof[fill] = run_batch_study(loaded, builtin_prompts(2)[:1] if fill == "copies" else builtin_prompts(1),
                                          settings)["summary"]
            print(fill, json.dumps(proof[fill]), flush=True)
        speed = [row for batch in (1, 8) if left() > 60
                 for row in batch_throughput(loaded, ["stock", "rowwise", "invariant"], batch, steps=4, repeats=3)]
        for row in speed:
            print(json.dumps(row), flush=True)
        write_json_atomic(args.out / "invariant_smoke.json", {
            "environment": environment_fingerprint(loaded.model, loaded.device), "proof": proof, "speed": speed})

    if left() > 40:
        from canvaslab.studies.commit_order.tracer import CommitTracer

        prompt = loaded.tokenizer("tell a story")["input_ids"]
        timings = {}
        for traced in (False, True, False, True):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            generate(loaded, [prompt] * 8, seed=1, observers=[CommitTracer(loaded.model)] if traced else [],
                     generation={"max_denoising_steps": 6})
            torch.cuda.synchronize()
            timings.setdefault(traced, []).append(time.perf_counter() - t0)
        overhead = 100 * (min(timings[True]) / min(timings[False]) - 1)
        print(f"tracer overhead {overhead:.2f}%", flush=True)
        write_json_atomic(args.out / "tracer_overhead.json", {
            "environment": environment_fingerprint(loaded.model, loaded.device), "batch": 8, "steps": 6,
            "seconds_without": timings[False], "seconds_with": timings[True], "overhead_pct": overhead})


if __name__ == "__main__":
    main()
