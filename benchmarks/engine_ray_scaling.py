"""How the study engine's executors scale on one machine: the same tiny batch-size study run by the CLI in a
fresh process per executor.

The study is ``canvaslab batch-study --prompts N --batch-sizes 1,2 --steps 2 --repeat-control same-process``
on the ``tiny`` preset, run ``local``, then by ``ray`` with 1 and 2 workers (a local Ray cluster the command
starts itself). Wall time is the whole command (Python start, model load, Ray start); units per second are
prompts finished per second of it. Every run must give the same summary (``same_summary_everywhere``). Needs
the ``ray`` extra.

    python benchmarks/engine_ray_scaling.py --out OUT/cpu_engine_ray_scaling_tiny.json
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

from canvaslab.environment import environment_fingerprint, record_result
from canvaslab.io import write_json_atomic

CONFIGS = {"local": ("local", []),
           "ray-1": ("ray, 1 worker", ["--executor", "ray", "--workers", "1"]),
           "ray-2": ("ray, 2 workers", ["--executor", "ray", "--workers", "2"])}


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


def config_names(text: str) -> list[str]:
    names = [name for name in text.split(",") if name]
    unknown = [name for name in names if name not in CONFIGS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: want a comma-separated list of {', '.join(CONFIGS)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=4, help="units of the study (one prompt each)")
    parser.add_argument("--configs", type=config_names, default=list(CONFIGS),
                        help=f"executors to run, comma-separated (default {','.join(CONFIGS)})")
    parser.add_argument("--out", type=Path, required=True, help="JSON result file")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for key in args.configs:
            name, extra = CONFIGS[key]
            results[name] = run(args.prompts, extra, Path(scratch) / key)
            print(name, results[name]["wall_s"], "s", flush=True)
    summaries = {json.dumps(r["summary"], sort_keys=True) for r in results.values()}
    try:
        import ray

        ray_version = ray.__version__
    except ImportError:  # only the local executor ran
        ray_version = None
    environment = environment_fingerprint(cpu_count=os.cpu_count(), ray=ray_version)
    write_json_atomic(args.out, {
        "what": "the same tiny batch-size study per executor; wall time of the whole command",
        "units": f"{args.prompts} prompts (one unit each: B=1 reference and B=2, compared on one worker)",
        "results": results, "same_summary_everywhere": len(summaries) == 1,
        "cpu_cores": os.cpu_count(), "ray": ray_version,
        "note": "each Ray worker gets 1 CPU and 1 torch thread; other work on the machine shows in each run's "
                "load average",
        "environment": environment,
    })
    record_result(args.out, shows="wall time and units per second of one tiny batch-size study per executor (local, "
                  "Ray with 1 and 2 workers) and whether all give the same summary", environment=environment)


if __name__ == "__main__":
    main()
