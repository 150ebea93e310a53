"""Scale evidence for the study engine's executors on this CPU machine (issue 12, point 6; not a test).

The same tiny batch-size study (``--prompts N --batch-sizes 1,2 --steps 2 --repeat-control same-process``)
run by the CLI in a fresh process per executor: ``local``, then ``ray`` with 1 and 2 workers (a local Ray
cluster the command starts itself). Wall time is the whole command (Python start, model load, Ray start),
units per second are prompts finished per second of it. Every run must give the same summary.

    python benchmarks/engine_ray_scaling.py --out benchmarks/results/cpu_engine_ray_scaling_tiny.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from canvaslab.environment import environment_fingerprint
from canvaslab.io import write_json_atomic

CONFIGS = [("local", []), ("ray, 1 worker", ["--executor", "ray", "--workers", "1"]),
           ("ray, 2 workers", ["--executor", "ray", "--workers", "2"])]


def run(prompts: int, extra: list[str], folder: Path) -> dict:
    command = [sys.executable, "-m", "canvaslab.cli.main", "batch-study", "--prompts", str(prompts),
               "--batch-sizes", "1,2", "--steps", "2", "--repeat-control", "same-process", "--out", str(folder),
               *extra]
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    summary = json.loads((folder / "batch_study.json").read_text())["summary"]
    return {"command": " ".join(["canvaslab", *command[3:]]), "wall_s": round(wall, 1),
            "units_per_s": round(prompts / wall, 4), "summary": summary,
            "final_line": done.stdout.strip().splitlines()[-1],
            "load_average_1min": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, extra in CONFIGS:
            results[name] = run(args.prompts, extra, Path(scratch) / name.replace(" ", "_").replace(",", ""))
            print(name, results[name]["wall_s"], "s", flush=True)
    summaries = {json.dumps(r["summary"], sort_keys=True) for r in results.values()}
    import ray

    write_json_atomic(args.out, {
        "what": "the same tiny batch-size study per executor; wall time of the whole command",
        "units": f"{args.prompts} prompts (one unit each: B=1 reference and B=2, compared on one worker)",
        "results": results, "same_summary_everywhere": len(summaries) == 1,
        "cpu_cores": os.cpu_count(), "ray": ray.__version__,
        "note": "a shared 2-core machine (other jobs ran beside it: see each run's load average); each Ray worker "
                "gets 1 CPU and 1 torch thread, the local run 2 threads",
        "environment": environment_fingerprint(),
    })


if __name__ == "__main__":
    main()
