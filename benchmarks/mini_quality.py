"""Held-out quality of trained `mini` checkpoints: per-task accuracy of the diffusion model (through
canvaslab's generate with the checkpoint's own sampler settings) and of the AR sibling (greedy), median accept
calls, prose readability (English-word and word-pair shares), written with the environment and every answer.

    python benchmarks/mini_quality.py --run DIR [--models diffusion,autoregressive] [--passages FILE]
        [--per-task 40] [--device cpu|cuda] [--tasks add2,add3,...] --out FILE.json

``DIR`` holds ``diffusion/`` and/or ``autoregressive/`` as written by ``canvaslab mini train`` (or
``benchmarks/mini_train_h200.py``). The held-out prompts are a function of ``--per-task`` and ``--seed`` only,
so runs of the two models on different machines score the same prompts. The prose task needs ``--passages``
(the file the run trained with); the code task needs the sandbox (bubblewrap).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from canvaslab.environment import record_result
from canvaslab.io import read_json
from canvaslab.training.run import evaluate_models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True, help="a training run's folder (diffusion/, autoregressive/)")
    parser.add_argument("--models", default="diffusion,autoregressive", help="comma-separated: diffusion, autoregressive")
    parser.add_argument("--passages", type=Path, help="the run's prose passages (for the prose task)")
    parser.add_argument("--per-task", type=int, default=40, help="held-out prompts per task")
    parser.add_argument("--seed", type=int, default=0, help="which held-out prompts, and generate's seed")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tasks", default="", help="comma-separated subset of the evaluation tasks (default all)")
    parser.add_argument("--out", type=Path, required=True, help="JSON result file")
    args = parser.parse_args()
    models = tuple(args.models.split(","))
    tasks = tuple(t for t in args.tasks.split(",") if t)
    evaluate_models(args.run, args.passages, args.per_task, args.device, seed=args.seed, models=models, tasks=tasks)
    written = args.run / f"quality_{'_'.join(models)}{'_' + '_'.join(tasks) if tasks else ''}.json"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=args.out.parent, delete=False) as handle:
        shutil.copyfile(written, handle.name)
    Path(handle.name).replace(args.out)
    record_result(args.out, shows=f"held-out per-task accuracy of {' and '.join(models)} ({args.per_task} prompts per "
                  "task), median accept calls, prose readability, every answer",
                  environment=read_json(args.out).get("environment"))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
