"""Train `mini` and its autoregressive sibling on one GPU, evaluate both on held-out prompts, pack the results.

Writes DIR/diffusion/ and DIR/autoregressive/ (checkpoints), training.json (settings, loss history, timing,
environment), the held-out quality file, MODEL_CARD.md and loss.png. ``--tiny`` trains a toy-sized model with
short generations (one canvas, 2 passes): a CPU dry run of the whole script.

    python benchmarks/mini_train_h200.py --out DIR --passages prose.txt --steps N [--batch-size B]
        [--eval-per-task N] [--pack DIR] [--kinds diffusion|causal] [--steps-file F | --steps-from F]
        [--compile layers|leaves] [--checkpoint-dir DIR --stop-after SECONDS [--portable-dir DIR]]

``--pack DIR`` also copies what a size-limited transfer can carry: each model's weight shards (under
16 MiB each, ``MAX_SHARD_SIZE``) and one tar of everything else. To train the two models at once on two
GPUs, run the diffusion model with ``--time-budget S --steps-file F`` (it writes the step count its time
budget fixed) and the sibling with ``--steps-from F`` (it waits for that count): same steps, same
examples (give both the same ``--examples``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

from canvaslab.environment import record_result
from canvaslab.errors import CanvaslabError
from canvaslab.io import read_json
from canvaslab.training.card import write_card
from canvaslab.training.loop import TrainSettings, TrainingPaused
from canvaslab.training.objective import SELF_CONDITIONING_CANVASES
from canvaslab.training.run import RunSpec, evaluate_models, train_models
from canvaslab.training.tasks import DATA_VERSIONS, AnswerStyle, parse_shares
from canvaslab.training.tasks.arithmetic import SUM_FORMATS
from canvaslab.training.tasks.prose import checked_answers_file


TINY = {"text_overrides": (("hidden_size", 32), ("intermediate_size", 64), ("num_hidden_layers", 2),
                           ("num_attention_heads", 2), ("head_dim", 16), ("global_head_dim", 16),
                           ("moe_intermediate_size", 16), ("num_experts", 4)), "canvas_length": 32}
TINY_GENERATION = {"max_new_tokens": 32, "max_denoising_steps": 2}  # the toy model's evaluation: one short canvas


def _short_generations(folder: Path) -> None:
    """The toy model's checkpoint answers in one canvas of 2 passes (a dry run's evaluation takes seconds)."""
    from transformers import GenerationConfig

    config = GenerationConfig.from_pretrained(folder)
    config.update(**TINY_GENERATION)
    config.save_pretrained(folder)


def _pack_weights(folder: Path, pack: Path | None) -> None:
    """Each model's weights leave as soon as they exist (a later failure cannot lose them)."""
    if pack is not None:
        pack.mkdir(parents=True, exist_ok=True)
        (pack / folder.name).mkdir(exist_ok=True)
        for shard in folder.glob("model*.safetensors"):
            shutil.copy(shard, pack / folder.name / shard.name)


def _steps_writer(path: Path | None):
    """Writes the diffusion model's step count once its time budget has fixed it."""
    def on_entry(kind: str, entry: dict) -> None:
        final = entry["step"] >= 70 or entry["step"] == entry["total_steps"] - 1  # a budget fixes it at step 70
        if path is not None and kind == "diffusion" and final and not path.exists():
            path.write_text(str(entry["total_steps"]))
    return on_entry


def _wait_for_steps(path: Path, timeout_s: float = 300.0) -> int:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"no step count in {path} after {timeout_s:.0f} s")
        time.sleep(1.0)
    time.sleep(0.2)
    return int(path.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="the run's folder")
    parser.add_argument("--passages", type=Path, required=True, help="prose passages (`canvaslab mini passages`)")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--time-budget", type=float, default=0.0, help="seconds for the diffusion model's training")
    parser.add_argument("--examples", type=int, default=0, help="pool size (0: steps x batch)")
    parser.add_argument("--eval-per-task", type=int, default=100, help="held-out prompts per task (0: no evaluation)")
    parser.add_argument("--pack", type=Path, help="also copy weight shards and a tar of the rest here")
    parser.add_argument("--kinds", default="diffusion,causal", help="which models to train")
    parser.add_argument("--eval-models", default="diffusion,autoregressive")
    parser.add_argument("--eval-tasks", default="", help="comma-separated subset (default all; code needs the sandbox)")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps-file", type=Path, help="write the step count the time budget fixed here")
    parser.add_argument("--steps-from", type=Path, help="train for the step count written there")
    parser.add_argument("--compile", default="", choices=("", "layers", "leaves"),
                        help="what to put under torch.compile (canvaslab.training.loop.compile_parts)")
    parser.add_argument("--checkpoint-dir", type=Path, help="resumable: rerunning the same command goes on from here")
    parser.add_argument("--stop-after", type=float, help="seconds: pause training (checkpointed) after this long")
    parser.add_argument("--portable-dir", type=Path, help="write each model's portable state here at a pause, and "
                        "resume from it where the checkpoint is missing (canvaslab.training.portable)")
    parser.add_argument("--sum-format", default=AnswerStyle.sum_format, choices=SUM_FORMATS,
                        help="how addition answers write sums (canvaslab.training.tasks.arithmetic)")
    parser.add_argument("--data", default="shipped", choices=DATA_VERSIONS,
                        help="the data version trained on and evaluated in-template (canvaslab.training.tasks)")
    parser.add_argument("--mixture", default="", help="overrides of the tasks' shares, e.g. add3=0.27,fact=0.10")
    parser.add_argument("--logit-adjustment", action="store_true",
                        help="NoiseSchedule.logit_adjustment: the loss weights no longer bias the predictions")
    parser.add_argument("--rate-power", type=float, default=1.0,
                        help="NoiseSchedule.rate_power: rates min + (max - min) u^power (< 1: more high rates)")
    parser.add_argument("--self-conditioning-canvas", default="nested", choices=SELF_CONDITIONING_CANVASES,
                        help="NoiseSchedule.self_conditioning_canvas: the first pass on a noisier copy or the same canvas")
    parser.add_argument("--tokenizer", type=Path, help="a tokenizer folder instead of the shipped one")
    parser.add_argument("--prose-answers", type=Path, help="a teacher's prose answers (`canvaslab mini distill`)")
    parser.add_argument("--tiny", action="store_true", help="a toy-sized model with short generations (a CPU dry run "
                        "of a GPU script)")
    args = parser.parse_args()
    started = time.perf_counter()
    if args.steps_from is not None:
        args.steps = _wait_for_steps(args.steps_from)
        print(f"steps from {args.steps_from}: {args.steps}", flush=True)
    settings = TrainSettings(steps=args.steps, batch_size=args.batch_size, learning_rate=args.lr,
                             warmup_steps=min(args.warmup, args.steps // 10 + 1), time_budget_s=args.time_budget)
    if args.logit_adjustment:
        settings = replace(settings, schedule=replace(settings.schedule, logit_adjustment=True))
    if not args.rate_power > 0:
        print(f"error: --rate-power must be positive, got {args.rate_power}", file=sys.stderr)
        raise SystemExit(2)
    if args.rate_power != 1.0:
        settings = replace(settings, schedule=replace(settings.schedule, rate_power=args.rate_power))
    if args.self_conditioning_canvas != "nested":
        settings = replace(settings, schedule=replace(settings.schedule,
                                                      self_conditioning_canvas=args.self_conditioning_canvas))
    try:
        prose_answers = checked_answers_file(args.prose_answers, args.passages)
    except CanvaslabError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2)
    spec = RunSpec(args.out, args.passages, settings, device=args.device, examples=args.examples,
                   kinds=tuple(args.kinds.split(",")), compile_parts=args.compile,
                   answers=AnswerStyle(args.sum_format, prose_answers), data=args.data,
                   shares=tuple(parse_shares(args.mixture, args.data).items()),
                   checkpoint_dir=args.checkpoint_dir, portable_dir=args.portable_dir, tokenizer=args.tokenizer,
                   stop_at=None if args.stop_after is None else time.monotonic() + args.stop_after, **(TINY if args.tiny else {}))
    try:
        train_models(spec, log=lambda m: print(m, flush=True), on_saved=lambda folder: _pack_weights(folder, args.pack),
                     on_entry=_steps_writer(args.steps_file))
    except TrainingPaused as paused:
        print(f"{paused} ({args.checkpoint_dir})", flush=True)
        return 0
    print(f"trained in {time.perf_counter() - started:.1f} s", flush=True)
    if args.tiny and (args.out / "diffusion" / "generation_config.json").is_file():
        _short_generations(args.out / "diffusion")
    if args.eval_per_task:
        try:
            evaluate_models(args.out, args.passages, args.eval_per_task, args.device, log=lambda m: print(m, flush=True),
                            models=tuple(args.eval_models.split(",")), data=args.data,
                            tasks=tuple(t for t in args.eval_tasks.split(",") if t))
        except Exception:  # the trained weights and training.json still come back
            traceback.print_exc()
    try:
        write_card(args.out)
    except Exception as error:  # e.g. matplotlib missing: the card can be written later from the JSON files
        print(f"no model card here: {error}", flush=True)
    print(f"total {time.perf_counter() - started:.1f} s", flush=True)
    training = args.out / "training.json"
    record_result(args.out, shows=f"{' and '.join(args.kinds.split(','))} trained: checkpoints, settings and loss "
                  "history (training.json), held-out quality, model card",
                  environment=read_json(training).get("environment") if training.is_file() else None)
    if args.pack:
        args.pack.mkdir(parents=True, exist_ok=True)
        subprocess.run(["tar", "-czf", str(args.pack / f"run-{args.out.name}.tgz"), "--exclude=model*.safetensors",
                        "-C", str(args.out), "."], check=True)


if __name__ == "__main__":
    sys.exit(main())
