"""Math: 2- and 3-digit addition in many phrasings, and templated word problems.

The held-out key is the operand pair (and, for word problems, the story too), so a held-out sum was
never shown in training in any phrasing. Answers restate the sum and end with it: the scorer reads the
last number. How the sum is written is ``sum_format`` (``SUM_FORMATS``):

- ``plain``: ``23 + 45 = 68.`` (the shipped `mini`'s). A sum of two d-digit numbers has d or d + 1 digits, so
  where its units digit sits in the canvas depends on its length, which a denoiser must settle in the same
  parallel pass as the digits (at toy size, units right 13% of the time, tens 90%:
  ``benchmarks/results/mini_memorise_cpu/`` at commit cfcbda3).
- ``padded``: ``23 + 45 = 068.``: always d + 1 digits, every digit at one place of the canvas.
- ``columns``: the school method, units first, each column's sum written with two digits so that its carry
  is the first one, then the padded sum: ``23 + 45: 3 + 5 = 08, 2 + 4 + 0 = 06, so 068.`` Every
  token is then a copy or a one-column sum of tokens at fixed places, and a later column waits for its
  carry: the kind of order an entropy-bound sampler can follow over several passes.
"""

from __future__ import annotations

import random

from canvaslab.training.tasks.base import Example, phrase

ADDITION_CORES = (
    "What is {a} + {b}?", "What is {a} plus {b}?", "Add {a} and {b}.", "Compute {a} + {b}.",
    "Calculate {a}+{b}", "{a} + {b} = ?", "What's the sum of {a} and {b}?", "Please add {a} to {b}.",
    "how much is {a} plus {b}", "Find the sum: {a} + {b}", "{a}+{b}?", "Sum {a} and {b} for me.",
)

NAMES = ("Tom", "Ana", "Li", "Sara", "Omar", "Mia", "Ben", "Zoe", "Ivan", "Nora", "Raj", "Eva")
ITEMS = ("apples", "books", "coins", "stamps", "marbles", "pencils", "cards", "shells", "cookies", "stickers")
GAIN_STORIES = (
    "{n} has {a} {i}. {n} gets {b} more. How many {i} does {n} have now?",
    "{n} had {a} {i} and found {b} more. How many {i} does {n} have?",
    "There are {a} {i} in a box. {n} puts in {b} more. How many {i} are in the box?",
)
LOSS_STORIES = (
    "{n} has {a} {i} and gives away {b}. How many {i} are left?",
    "{n} had {a} {i}. {n} lost {b} of them. How many {i} does {n} have now?",
)


def _operands(rng: random.Random, digits: int) -> tuple[int, int]:
    low, high = 10 ** (digits - 1), 10**digits - 1
    return rng.randint(low, high), rng.randint(low, high)


SUM_FORMATS = ("plain", "padded", "columns")


def written_sum(a: int, b: int, digits: int, sum_format: str = "plain") -> str:
    """The answer to ``a + b`` (both ``digits`` long) in ``sum_format``; its last number is the sum."""
    fixed_width = f"{a + b:0{digits + 1}d}"
    if sum_format == "plain":
        return f"{a} + {b} = {a + b}."
    if sum_format == "padded":
        return f"{a} + {b} = {fixed_width}."
    if sum_format != "columns":
        raise ValueError(f"sum format {sum_format!r} is not one of {SUM_FORMATS}")
    steps, carry = [], None
    for place in range(digits):  # units first
        x, y = a // 10**place % 10, b // 10**place % 10
        column = x + y + (carry or 0)
        steps.append(f"{x} + {y}" + ("" if carry is None else f" + {carry}") + f" = {column:02d}")
        carry = column // 10
    return f"{a} + {b}: {', '.join(steps)}, so {fixed_width}."


def addition(rng: random.Random, digits: int, sum_format: str = "plain") -> Example:
    a, b = _operands(rng, digits)
    core = rng.choice(ADDITION_CORES).format(a=a, b=b)
    prompt, _ = phrase(rng, core)
    answer = written_sum(a, b, digits, sum_format)
    return Example(f"add{digits}", "math", f"add:{a}+{b}", prompt, answer, {"answer": str(a + b)})


def word_problem(rng: random.Random) -> Example:
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    if rng.random() < 0.6:
        story_index = rng.randrange(len(GAIN_STORIES))
        story, total, working = GAIN_STORIES[story_index], a + b, f"{a} + {b} = {a + b}"
        kind = "gain"
    else:
        a, b = max(a, b), min(a, b)
        story_index = rng.randrange(len(LOSS_STORIES))
        story, total, working = LOSS_STORIES[story_index], a - b, f"{a} - {b} = {a - b}"
        kind = "loss"
    prompt, _ = phrase(rng, story.format(n=name, i=item, a=a, b=b))
    answer = f"{working}. The answer is {total}."
    key = f"word:{kind}{story_index}:{name}:{item}:{a}:{b}"
    return Example("word", "math", key, prompt, answer, {"answer": str(total)})
