"""Math: 2- and 3-digit addition in many phrasings, and templated word problems.

The held-out key is the operand pair (and, for word problems, the story too), so a held-out sum was
never shown in training in any phrasing. Answers restate the sum (``23 + 45 = 68.``): the scorer reads
the last number.
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


def addition(rng: random.Random, digits: int) -> Example:
    a, b = _operands(rng, digits)
    core = rng.choice(ADDITION_CORES).format(a=a, b=b)
    prompt, _ = phrase(rng, core)
    return Example(f"add{digits}", "math", f"add:{a}+{b}", prompt, f"{a} + {b} = {a + b}.", {"answer": str(a + b)})


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
