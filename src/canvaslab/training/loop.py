"""The training loop shared by the diffusion model and its autoregressive sibling.

Seeded throughout (example order, noise, self-conditioning draws, initialisation); AdamW with linear
warm-up and cosine decay; bf16 autocast on CUDA with fp32 master weights; gradient clipping at 1.
Both models see the same examples in the same order for the same number of steps (the "same data and
budget" of the comparison).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from canvaslab.io import atomic_writer
from canvaslab.training.batches import Pool, causal_rows, diffusion_rows
from canvaslab.training.objective import DiffusionBatch, NoiseSchedule, causal_lm_loss, diffusion_loss
from canvaslab.training.portable import has_portable, restore_portable, save_portable


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 2000
    batch_size: int = 256
    learning_rate: float = 1e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    seed: int = 0
    log_every: int = 25
    checkpoint_every: int = 200  # steps between checkpoints, when train() is given a checkpoint file
    # > 0: the number of steps is set after a short measurement so that training takes about this long
    # (capped by ``steps``); the steps actually run are recorded, so ``--steps`` reproduces the run.
    time_budget_s: float = 0.0
    schedule: NoiseSchedule = field(default_factory=NoiseSchedule)

    def as_dict(self) -> dict:
        return asdict(self)


# Steps timed to set the step count under a time budget: past the first steps' allocator and kernel
# warm-up, which run several times slower than the rest.
_MEASURE_FROM, _MEASURE_TO = 40, 70


def _learning_rate(settings: TrainSettings, step: int, total: int | None = None) -> float:
    total = settings.steps if total is None else total
    if step < settings.warmup_steps:
        return settings.learning_rate * (step + 1) / settings.warmup_steps
    progress = min(1.0, (step - settings.warmup_steps) / max(1, total - settings.warmup_steps))
    return settings.learning_rate * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _optimizer(model, settings: TrainSettings) -> torch.optim.Optimizer:
    decay = [p for n, p in model.named_parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.requires_grad and p.ndim < 2]
    groups = [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # fused: one kernel per step on CUDA instead of a chain of foreach launches (the step is launch-bound)
    fused = True if next(model.parameters()).device.type == "cuda" else None
    return torch.optim.AdamW(groups, lr=settings.learning_rate, betas=(0.9, 0.98), fused=fused)


def compile_parts(model, parts: str = "layers") -> int:
    """Put parts of the model under ``torch.compile`` (same math); the number of modules compiled.

    At `mini`'s width (256) a training step is bound by unfused elementwise work, not by its matmuls (an
    H200 profile: multiplies, copies and index updates take ~70% of GPU time, matmuls ~8%;
    benchmarks/results/mini_step_gpu_s8/ at commit cfcbda3), which Inductor fuses. ``parts``:

    - ``layers``: each transformer layer (the encoder's cache and the decoder's self-conditioning input stay
      plain Python between them). Fastest step, but each layer compiles its own graphs (its index selects
      its cache entry): on an H200 ~0.12 s per step against 0.285 eager, after ~6 minutes of compiling;
    - ``leaves``: the RMSNorms, dense MLPs and routers, whose graphs every layer shares (no layer index):
      a few graphs: ~0.21 s per step on an H200 after ~1.5 minutes of compiling.
    """
    from transformers.modeling_layers import GradientCheckpointingLayer
    from transformers.models.gemma4 import modeling_gemma4 as gemma4

    from canvaslab.models import anatomy

    kinds = {
        # transformers' decoder layers (the sibling's, DiffusionGemma's decoder) and DiffusionGemma's
        # encoder layers, which are plain modules
        "layers": (GradientCheckpointingLayer, anatomy.ENCODER_LAYER_CLASS),
        # DiffusionGemma's and the autoregressive sibling's (Gemma 4's own classes)
        "leaves": (anatomy.RMS_NORM_CLASS, anatomy.DENSE_MLP_CLASS, anatomy.ROUTER_CLASS,
                   gemma4.Gemma4RMSNorm, gemma4.Gemma4TextMLP, gemma4.Gemma4TextRouter),
    }[parts]
    # the parts share one forward's code in several shapes (sliding and global attention, the prompt
    # width varies from step to step): more cached graphs than Dynamo allows by default
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    # a part Dynamo cannot compile runs eagerly (the same math) instead of ending a paid-for GPU run
    torch._dynamo.config.suppress_errors = True
    modules = [m for m in model.modules() if isinstance(m, kinds)]
    for module in modules:
        module.compile(dynamic=True)
    return len(modules)


def _batch_order(pool: Pool, settings: TrainSettings) -> Callable[[int], list[int]]:
    """Indices of step ``step``'s examples: passes over a seeded permutation of the pool."""
    order = list(range(len(pool)))
    random.Random(f"order/{settings.seed}").shuffle(order)

    def indices(step: int) -> list[int]:
        start = (step * settings.batch_size) % len(order)
        return [order[(start + i) % len(order)] for i in range(settings.batch_size)]

    return indices


class TrainingPaused(Exception):
    """Training stopped at a checkpoint before its last step; the same call with the same checkpoint
    resumes it."""

    def __init__(self, step: int, total: int) -> None:
        super().__init__(f"training paused after step {step} of {total}: rerun to resume from the checkpoint")
        self.step, self.total = step, total


def _rng_state(rngs: dict) -> dict:
    return {"generator": rngs["generator"].get_state(), "row": rngs["row"].getstate(),
            "self_conditioning": rngs["self_conditioning"].getstate()}


def _set_rng_state(rngs: dict, rng: dict) -> None:
    rngs["generator"].set_state(rng["generator"].cpu())
    rngs["row"].setstate(rng["row"])
    rngs["self_conditioning"].setstate(rng["self_conditioning"])


def _save_checkpoint(path: Path, model, optimizer, state: dict, rngs: dict) -> None:
    """Model, optimizer, loop counters and every random stream, written atomically (a kill -9 leaves the
    previous checkpoint whole)."""
    payload = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), **state, "rng": _rng_state(rngs)}
    with atomic_writer(path, binary=True) as handle:
        torch.save(payload, handle)


def _restore_checkpoint(path: Path, model, optimizer, rngs: dict) -> dict:
    payload = torch.load(path, map_location=next(model.parameters()).device, weights_only=False)
    model.load_state_dict(payload.pop("model"))
    optimizer.load_state_dict(payload.pop("optimizer"))
    _set_rng_state(rngs, payload.pop("rng"))
    return payload


def _restore(checkpoint: Path | None, portable: Path | None, model, optimizer, rngs: dict,
             settings: TrainSettings) -> dict | None:
    """The loop state to go on from: the exact checkpoint if there is one, else the portable state (whose
    resume is recorded), else None (a new run)."""
    if checkpoint is not None and checkpoint.exists():
        return _restore_checkpoint(checkpoint, model, optimizer, rngs)
    if not has_portable(portable):
        return None
    state, rng = restore_portable(portable, model, optimizer, settings.as_dict())
    _set_rng_state(rngs, rng)
    return {**state, "portable_resumes": [*state.get("portable_resumes", []), state["step"]]}


def train(model, pool: Pool, settings: TrainSettings, kind: str, *, canvas_length: int = 0,
          progress: Callable[[dict], None] | None = None, checkpoint: Path | None = None,
          stop: Callable[[int], bool] | None = None, portable: Path | None = None) -> list[dict]:
    """Train ``model`` in place (``kind`` ``diffusion`` or ``causal``); the loss history.

    ``checkpoint``: a file the state is saved to every ``settings.checkpoint_every`` steps and restored from
    when it exists, so a killed or paused run goes on where it stopped (same examples, same random draws,
    same weights as an uninterrupted run). ``stop(step)``, checked after each step: True saves the
    checkpoint and raises ``TrainingPaused`` (e.g. before a device call's time runs out). ``portable``: a
    folder that also receives, at a pause, the small state of ``canvaslab.training.portable``, which a run
    without its checkpoint (on another machine) goes on from; the steps it did so at are in
    ``history[-1]["portable_resumes"]``."""
    device = next(model.parameters()).device
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else None
    optimizer, indices = _optimizer(model, settings), _batch_order(pool, settings)
    rngs = {"generator": torch.Generator(device=device).manual_seed(settings.seed),
            "row": random.Random(f"canvas/{settings.seed}"),
            # Host-side draws: reading a device draw back each step would stall the GPU queue.
            "self_conditioning": random.Random(f"self-conditioning/{settings.seed}")}
    state = {"history": [], "tokens": 0, "total": settings.steps, "step": 0, "skipped": 0, "elapsed": 0.0,
             "budget_fixed": False, "portable_resumes": []}
    state = _restore(checkpoint, portable, model, optimizer, rngs, settings) or state
    portable_resumes = state.get("portable_resumes", [])
    history, tokens, total, step, skipped, budget_fixed = (
        state["history"], state["tokens"], state["total"], state["step"], state["skipped"], state["budget_fixed"])
    started, measured_from = time.perf_counter() - state["elapsed"], None
    generator, row_rng, self_conditioning_rng = rngs["generator"], rngs["row"], rngs["self_conditioning"]

    def loop_state() -> dict:
        return {"history": history, "tokens": tokens, "total": total, "step": step, "skipped": skipped,
                "elapsed": time.perf_counter() - started, "budget_fixed": budget_fixed,
                "portable_resumes": portable_resumes}

    model.train()
    while step < total:
        if settings.time_budget_s and not budget_fixed:
            if measured_from is None and step >= _MEASURE_FROM:
                measured_from = (time.perf_counter(), step)
            elif measured_from is not None and step - measured_from[1] >= _MEASURE_TO - _MEASURE_FROM:
                per_step = (time.perf_counter() - measured_from[0]) / (step - measured_from[1])
                remaining = settings.time_budget_s - (time.perf_counter() - started)
                total = min(settings.steps, max(step + 1, step + int(remaining / per_step)))
                budget_fixed = True
        for group in optimizer.param_groups:
            group["lr"] = _learning_rate(settings, step, total)
        metrics: dict = {}
        with autocast if autocast is not None else torch.enable_grad():
            if kind == "diffusion":
                ids, mask, canvas = diffusion_rows(pool, indices(step), canvas_length, row_rng)
                batch = DiffusionBatch(ids.to(device), mask.to(device), canvas.to(device))
                self_condition = self_conditioning_rng.random() < settings.schedule.self_conditioning_probability
                loss = diffusion_loss(model, batch, settings.schedule, generator, metrics, self_condition)
                tokens += ids.numel() + canvas.numel()
            else:
                ids, mask, labels = causal_rows(pool, indices(step))
                loss = causal_lm_loss(model, ids.to(device), mask.to(device), labels.to(device))
                tokens += ids.numel()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        # A non-finite loss or gradient (a bf16 overflow) would turn every weight into NaN for good:
        # such a step is skipped and counted instead.
        if torch.isfinite(grad_norm) and torch.isfinite(loss.detach()):
            optimizer.step()
        else:
            skipped += 1
        if step % settings.log_every == 0 or step == total - 1:
            entry = {"step": step, "loss": float(loss.detach()), "tokens": tokens,
                     "seconds": round(time.perf_counter() - started, 2), "lr": _learning_rate(settings, step, total),
                     "skipped_steps": skipped, "total_steps": total,
                     # before clipping at 1: above 1, the step was scaled down by this factor
                     "grad_norm": round(float(grad_norm), 4), **{k: round(float(v), 4) for k, v in metrics.items()},
                     **({"portable_resumes": list(portable_resumes)} if portable_resumes else {})}
            history.append(entry)
            if progress is not None:
                progress(entry)
        step += 1
        pause = stop is not None and step < total and stop(step)
        if checkpoint is not None and (pause or step % settings.checkpoint_every == 0):
            _save_checkpoint(checkpoint, model, optimizer, loop_state(), rngs)
        if pause and portable is not None:
            save_portable(portable, model, optimizer, loop_state(), _rng_state(rngs), settings.as_dict())
        if pause:
            raise TrainingPaused(step, total)
    if checkpoint is not None:  # a rerun of a finished run restores its end instead of training again
        _save_checkpoint(checkpoint, model, optimizer, loop_state(), rngs)
    model.eval()
    return history
