"""What every task generator shares: the example record, the held-out rule and user-like phrasings.

Held-out examples are decided by a hash of a task-specific key (operands, a paragraph, a phrasing),
never by a random state: the same key is held out in every run, whatever the seed, the mixture or
the order of generation, so no held-out item can reach training.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, Callable

HELD_OUT_PERCENT = 10
SPLITS = ("train", "heldout")
TRAIN_ONLY = "train-only:"
# Keys of the held-out templates (``heldout_templates``): a split of their own, never "train" or "heldout".
HELD_OUT_TEMPLATE = "heldout-template:"
HELD_OUT_TEMPLATE_SPLIT = "heldout_template"


@dataclass(frozen=True)
class Example:
    """One chat exchange: the user's prompt, the model's answer, and what a scorer needs to judge it."""

    task: str
    regime: str
    key: str
    prompt: str
    answer: str
    reference: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def split(self) -> str:
        return split_of(self.key)


def split_of(key: str) -> str:
    """``heldout`` for HELD_OUT_PERCENT % of keys (by SHA-256), ``train`` for the rest and for keys
    starting with ``train-only:`` (material such as fact statements that has no held-out half);
    ``heldout_template`` for keys starting with ``heldout-template:`` (``heldout_templates``: never drawn for
    training or for the in-template held-out split)."""
    if key.startswith(HELD_OUT_TEMPLATE):
        return HELD_OUT_TEMPLATE_SPLIT
    if key.startswith(TRAIN_ONLY):
        return "train"
    digest = hashlib.sha256(f"canvaslab-mini/{key}".encode("utf-8")).digest()
    return SPLITS[int(int.from_bytes(digest[:8], "big") % 100 < HELD_OUT_PERCENT)]


def draw(make: Callable[[random.Random], Example], rng: random.Random, split: str) -> Example:
    """Draw examples until one falls in ``split`` (10 % held out: a few draws at most)."""
    for _ in range(10_000):
        example = make(rng)
        if example.split == split:
            return example
    raise RuntimeError(f"no {split} example after 10,000 draws: the key space is too small")


# User-like wrapping around a task's core request: greetings, politeness, terse lowercase.
# Each entry is distinct (the phrasing key names its index); the bare form is drawn more often.
PREFIXES = ("", "Hi! ", "Quick question: ", "Hey, ", "Please help me. ", "I need this: ", "OK so ")
SUFFIXES = ("", " Thanks!", " Thank you.", " Please.", " Be brief.", " Answer quickly.")
_BARE_WEIGHT = 3


def phrase(rng: random.Random, core: str, lowercase: bool = True) -> tuple[str, str]:
    """A user-like prompt around ``core`` and a key naming the wrapping chosen (for phrasing splits);
    ``lowercase=False`` where case is part of the task (values to copy, names of functions)."""
    prefix_index = rng.choices(range(len(PREFIXES)), [_BARE_WEIGHT] + [1] * (len(PREFIXES) - 1))[0]
    suffix_index = rng.choices(range(len(SUFFIXES)), [_BARE_WEIGHT] + [1] * (len(SUFFIXES) - 1))[0]
    text = PREFIXES[prefix_index] + core + SUFFIXES[suffix_index]
    if lowercase and rng.random() < 0.15:
        text = text.lower()
    return text, f"p{prefix_index}s{suffix_index}"
