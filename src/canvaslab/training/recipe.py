"""The recipe of the shipped `mini` (docs/mini-model.md): ``canvaslab mini train``'s defaults, so that
the command with no training options trains by that model's recipe: the same examples in the same order, given the
same passage file (`canvaslab mini passages` of the default corpus). The weights will not be bit for bit the same:
a GPU's sums differ from machine to machine.

A light module (no torch): the CLI reads it when it builds its options.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Recipe:
    steps: int
    batch_size: int
    learning_rate: float
    examples: int  # the pool's size; 0 = steps x batch_size
    mixture: str  # overrides of tasks.MIXTURE's shares, as `--mixture` takes them


# the shipped `mini` (benchmarks/results/mini/): 3,500 steps, 27% 3-digit sums, 26% prose, on the 16,384-id
# tokenizer (the shipped one, which `canvaslab mini tokenizer` rebuilds)
SHIPPED = Recipe(steps=3500, batch_size=512, learning_rate=7e-4, examples=600_000,
                 mixture="add2=0.10,add3=0.27,fact=0.08,json=0.10,code=0.05,prose=0.26")
