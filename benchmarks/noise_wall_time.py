"""The noise study's cost two ways: a registered plan's conditions as rows of batches in invariant mode (how
`canvaslab noise-study run --mode invariant` gets its analysed results, equal bit for bit to each condition
alone) against every condition alone in stock mode (the seeds' remedy for batch dependence: one sample at a
time). The arms alternate prompt by prompt; nothing is stored.

    python benchmarks/noise_wall_time.py --plan DIR --device cuda --batch-size 36 --out OUT/noise_wall_time.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

from canvaslab.environment import environment_fingerprint, record_result
from canvaslab.io import write_json_atomic
from canvaslab.studies.unused_tokens.noise_study import load_plan_model, time_arms
from canvaslab.studies.unused_tokens.plan import load_plan


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: give a number of 1 or more")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plan", type=Path, required=True, help="a folder holding a registered noise-study plan")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"))
    parser.add_argument("--batch-size", type=positive, default=36, help="rows of the batched arm's batches")
    parser.add_argument("--groups", type=positive, default=None, help="time only the first N prompt-and-seed groups")
    parser.add_argument("--out", type=Path, required=True, help="JSON result file")
    args = parser.parse_args()
    plan, digest = load_plan(args.plan)
    loaded = load_plan_model(plan, device=args.device, dtype=args.dtype)
    timing = time_arms(args.plan, loaded, batch_size=args.batch_size, groups=args.groups)
    environment = environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source)
    write_json_atomic(args.out, {"plan_sha256": digest, "design": plan.design, **timing, "environment": environment})
    record_result(args.out, shows="wall time of a noise-study plan's conditions batched in invariant mode against "
                  "each alone in stock mode", environment=environment)
    print(f"{timing['conditions']} conditions: batched invariant {timing['seconds']['batched_invariant']:.2f} s, "
          f"alone stock {timing['seconds']['alone_stock']:.2f} s")


if __name__ == "__main__":
    main()
