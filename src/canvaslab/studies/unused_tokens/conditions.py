"""Enumerate the plan's conditions and build each one's initial canvas.

A condition is one cell of the factor grid: (prompt, seed, budget, count, position, token class). Its
``condition_id`` spells those levels out (``builtin-3/s0/b16/n6/early/unused``), so ids are stable,
readable and unique. The three token classes of one *matched cell* share everything but the planted
ids: the same base noise (the canvas the model would have drawn itself for that prompt and seed, from
the per-row stream ``(seed, prompt_id, canvas 0, step 0, "init")``), the same planted positions and the
same random streams for sampling and renoising. Their difference is the effect of the planted ids alone.

Planted positions and ids are drawn from generators seeded by ``(plan seed, cell or condition id)``:
positions per cell (shared by its classes), ids per condition, uniformly with replacement from the
class's pool (the tiny vocabulary has 16 unused ids; a condition may plant 24).
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass

import numpy as np
import torch

from canvaslab.errors import CanvaslabError
from canvaslab.generation.row_randomness import RowRandomness
from canvaslab.studies.unused_tokens.plan import NoisePlan, PlannedPrompt

POSITIONS = ("early", "middle", "late", "spread", "content", "later")


@dataclass(frozen=True)
class Condition:
    condition_id: str
    cell_id: str
    base_id: str
    prompt: PlannedPrompt
    seed: int
    budget: int
    count: int
    position: str
    token_class: str
    positions: tuple[int, ...]
    tokens: tuple[int, ...]

    @property
    def stream(self) -> str:
        """The per-row random-stream key: the prompt, so a cell's classes and its baseline share draws."""
        return self.prompt.prompt_id

    def plant(self, base_noise: torch.Tensor) -> torch.Tensor:
        """The base noise with this condition's tokens written at its positions."""
        canvas = base_noise.clone()
        canvas[list(self.positions)] = torch.tensor(self.tokens, dtype=canvas.dtype, device=canvas.device)
        return canvas


def design_rng(seed: int, key: str) -> np.random.Generator:
    """A generator for one design draw, independent of every other key."""
    material = hashlib.blake2b(f"{seed}|{key}".encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(material, "little"))


def region(position: str, canvas_length: int) -> range:
    """The canvas positions a level may use: a third of the canvas, or all of it for ``spread``."""
    third = canvas_length // 3
    bounds = {"early": (0, third), "middle": (third, 2 * third), "late": (2 * third, canvas_length),
              "spread": (0, canvas_length)}
    return range(*bounds[position])


def planted_positions(position: str, count: int, canvas_length: int, rng: np.random.Generator) -> tuple[int, ...]:
    """``count`` distinct positions: drawn inside the level's third, or evenly spaced for ``spread``."""
    if count > len(region(position, canvas_length)):
        raise CanvaslabError(f"the plan plants {count} tokens {position}, but that region has only "
                             f"{len(region(position, canvas_length))} positions")
    if position == "spread":
        return tuple(int((i + 0.5) * canvas_length / count) for i in range(count))
    return tuple(sorted(int(p) for p in rng.choice(region(position, canvas_length), size=count, replace=False)))


def base_noise(seed: int, stream: str, canvas_length: int, vocab_size: int, device: torch.device) -> torch.Tensor:
    """The first canvas's noise exactly as ``generate(rng="row")`` would draw it for this stream."""
    randomness = RowRandomness(seed=seed, requests=[stream])
    randomness.start_canvas()
    return randomness.uniform_tokens("init", canvas_length, vocab_size, device)[0]


def _grid(plan: NoisePlan):
    """(prompt, seed, budget, count, position) in run order. In /4 plans the arm (position) varies before the count:
    each arm starts from its own canvas, so its conditions form their own group with their own baseline."""
    factors = plan.factors
    if plan.graded is None:
        yield from itertools.product(factors.prompts, factors.seeds, factors.budgets, factors.counts, factors.positions)
        return
    for prompt, seed, budget, position, count in itertools.product(factors.prompts, factors.seeds, factors.budgets,
                                                                   factors.positions, factors.counts):
        yield prompt, seed, budget, count, position


def later_canvas_tokens(plan: NoisePlan, prompt_id: str, seed: int) -> list[int] | None:
    """The later arm's registered starting canvas for a prompt and seed (/4 plans), else None."""
    if plan.graded is None:
        return None
    return plan.graded.later["canvases"][f"{prompt_id}/s{seed}"]


def enumerate_conditions(plan: NoisePlan) -> list[Condition]:
    """Every condition, in run order: prompt, seed, budget, count, position, token class (/4: position before
    count, and the base id names the arm)."""
    factors, canvas = plan.factors, plan.model.canvas_length
    pools = {c: plan.token_pools.ids(c, plan.model.vocab_size) for c in factors.token_classes}
    conditions = []
    for prompt, seed, budget, count, position in _grid(plan):
        base_id = f"{prompt.prompt_id}/s{seed}/b{budget}"
        cell_id = f"{base_id}/n{count}/{position}"
        if plan.graded is not None:  # the prompt stays the id's head: prompt/s/b/arm/n (analysis.prompt_of)
            base_id = f"{base_id}/{position}"
            cell_id = f"{base_id}/n{count}"
        rng = design_rng(plan.seed, cell_id)
        if position in ("content", "later"):  # /3 and /4 plans: drawn among the positions the plan lists
            listed = plan.first_pass.content_positions if position == "content" else plan.graded.later["content_positions"]
            where = listed[f"{prompt.prompt_id}/s{seed}"]
            positions = tuple(sorted(int(p) for p in rng.choice(where, size=count, replace=False)))
        else:
            positions = planted_positions(position, count, canvas, rng)
        for token_class in factors.token_classes:
            condition_id = f"{cell_id}/{token_class}"
            drawn = design_rng(plan.seed, condition_id).choice(pools[token_class], size=count, replace=True)
            conditions.append(Condition(condition_id, cell_id, base_id, prompt, seed, budget, count, position,
                                        token_class, positions, tuple(int(t) for t in drawn)))
    return conditions
