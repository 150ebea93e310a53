"""Second H200 session piece: the op scan at real shapes (stock and invariant) and the commit tracer's
overhead with the sampler's own entropy handed over (no recomputation, no per-call sync). The committed
result was timed with the tracer's one read-back after generate included; this version times generate alone.

    python benchmarks/h200_op_scan_and_tracer.py --out DIR
"""

from __future__ import annotations

import argparse
from pathlib import Path

from canvaslab.environment import environment_fingerprint
from canvaslab.studies.op_scan import scan_ops
from canvaslab.io import write_json_atomic
from canvaslab.models import load_model
from canvaslab.studies.commit_order.tracer import CommitTracer
from tracer_overhead import timed_generate  # benchmarks/ (the script's own folder is on sys.path)


def tracer_overhead(loaded, batch: int, steps: int, repeats: int = 3) -> dict:
    prompt = loaded.tokenizer("tell a story about the sea")["input_ids"]
    timings: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(repeats + 1):  # the first pair warms up
        for traced in (False, True):
            observers = [CommitTracer(loaded.model)] if traced else []
            timings[traced].append(timed_generate(loaded, [prompt] * batch, {"max_denoising_steps": steps},
                                                  observers, seed=1))
    without, with_tracer = sorted(timings[False][1:])[repeats // 2], sorted(timings[True][1:])[repeats // 2]
    return {"batch": batch, "steps": steps, "median_s_without": without, "median_s_with": with_tracer,
            "overhead_pct": 100 * (with_tracer / without - 1), "all_without": timings[False], "all_with": timings[True]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    loaded = load_model("real-shapes", device="cuda", layers=6)
    environment = environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source)
    overhead = [tracer_overhead(loaded, batch, steps=8) for batch in (1, 8)]
    for row in overhead:
        print({k: v for k, v in row.items() if not k.startswith("all_")}, flush=True)
    write_json_atomic(args.out / "tracer_overhead.json", {"environment": environment, "runs": overhead})
    sizes = [1, 2, 3, 4, 5, 8, 16, 32]
    scans = []
    for mode in ("stock", "invariant"):
        scans.append(scan_ops(loaded, sizes, mode))
        print(mode, {name: op["classes"] for name, op in scans[-1]["ops"].items()}, flush=True)
        write_json_atomic(args.out / "op_scan.json", {"environment": environment, "scans": scans})


if __name__ == "__main__":
    main()
