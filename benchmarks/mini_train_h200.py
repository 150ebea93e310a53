"""Train `mini` and its autoregressive sibling on one GPU, evaluate both, pack the results.

    python benchmarks/mini_train_h200.py --out DIR --passages prose.txt --steps N [--batch-size B]
        [--eval-per-task N] [--pack DIR]

``--pack DIR`` also writes what a size-limited transfer can carry: the two weight files split into
15 MB parts and one tar of everything else.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import traceback
from pathlib import Path

from canvaslab.training.card import write_card
from canvaslab.training.loop import TrainSettings
from canvaslab.training.run import RunSpec, evaluate_models, train_models


def _pack_weights(folder: Path, pack: Path | None) -> None:
    """Each model's weights leave as soon as they exist (a later failure cannot lose them)."""
    if pack is not None:
        pack.mkdir(parents=True, exist_ok=True)
        subprocess.run(["split", "-b", "15000000", "-d", str(folder / "model.safetensors"),
                        str(pack / f"{folder.name}.safetensors.part")], check=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--passages", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--time-budget", type=float, default=0.0, help="seconds for the diffusion model's training")
    parser.add_argument("--examples", type=int, default=0, help="pool size (0: steps x batch)")
    parser.add_argument("--eval-per-task", type=int, default=100)
    parser.add_argument("--pack", type=Path)
    parser.add_argument("--kinds", default="diffusion,causal", help="which models to train")
    parser.add_argument("--eval-models", default="diffusion,autoregressive")
    parser.add_argument("--warmup", type=int, default=100)
    args = parser.parse_args()
    started = time.perf_counter()
    settings = TrainSettings(steps=args.steps, batch_size=args.batch_size, learning_rate=args.lr,
                             warmup_steps=min(args.warmup, args.steps // 10 + 1), time_budget_s=args.time_budget)
    spec = RunSpec(args.out, args.passages, settings, device="cuda", examples=args.examples,
                   kinds=tuple(args.kinds.split(",")))
    train_models(spec, log=lambda m: print(m, flush=True), on_saved=lambda folder: _pack_weights(folder, args.pack))
    print(f"trained in {time.perf_counter() - started:.1f} s", flush=True)
    if args.eval_per_task:
        try:
            evaluate_models(args.out, args.passages, args.eval_per_task, "cuda", log=lambda m: print(m, flush=True),
                            models=tuple(args.eval_models.split(",")))
        except Exception:  # the trained weights and training.json still come back
            traceback.print_exc()
    try:
        write_card(args.out)
    except Exception as error:  # e.g. matplotlib missing: the card can be written later from the JSON files
        print(f"no model card here: {error}", flush=True)
    print(f"total {time.perf_counter() - started:.1f} s", flush=True)
    if args.pack:
        args.pack.mkdir(parents=True, exist_ok=True)
        subprocess.run(["tar", "-czf", str(args.pack / "run.tgz"), "--exclude=model.safetensors", "-C",
                        str(args.out), "."], check=True)


if __name__ == "__main__":
    sys.exit(main())
