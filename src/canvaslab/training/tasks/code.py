"""Code: small Python functions from a one-line description, judged by running tests in the sandbox.

Families are simple on purpose (a ~10M-parameter model must be able to learn them); each is
parameterised by a constant and a function name, and the held-out key is (family, name, constant).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from canvaslab.training.tasks.base import Example, phrase


@dataclass(frozen=True)
class Family:
    names: tuple[str, ...]
    describe: tuple[str, ...]  # {f} the name, {k} the constant
    body: str  # the function's return expression, in terms of x and k
    reference: Callable[[int, int], object]
    inputs: tuple[int, ...] = (0, 1, 7, -3, 12)
    arg: str = "x"


FAMILIES = {
    "add": Family(("add_k", "plus_k", "increment_by_k", "add_const"),
                  ("returns {arg} plus {k}", "adds {k} to {arg} and returns the result"), "{arg} + {k}",
                  lambda x, k: x + k),
    "sub": Family(("minus_k", "subtract_k", "take_away"),
                  ("returns {arg} minus {k}", "subtracts {k} from {arg}"), "{arg} - {k}", lambda x, k: x - k),
    "mul": Family(("times_k", "multiply_by", "scale"),
                  ("returns {arg} multiplied by {k}", "multiplies {arg} by {k}"), "{arg} * {k}", lambda x, k: x * k),
    "mod": Family(("is_multiple", "divisible_by_k", "is_divisible"),
                  ("returns True if {arg} is divisible by {k}, else False",
                   "checks whether {arg} is a multiple of {k}"), "{arg} % {k} == 0", lambda x, k: x % k == 0),
    "gt": Family(("is_big", "greater_than_k", "above"),
                 ("returns True if {arg} is greater than {k}", "checks whether {arg} > {k}"), "{arg} > {k}",
                 lambda x, k: x > k),
    "sq": Family(("square_plus", "sq_add", "square_then_add"),
                 ("returns the square of {arg} plus {k}", "squares {arg} and adds {k}"), "{arg} * {arg} + {k}",
                 lambda x, k: x * x + k),
}
CORES = (
    "Write a Python function `{f}({arg})` that {what}.",
    "Implement `{f}({arg})` in Python: it {what}.",
    "Can you write a python function {f}({arg}) which {what}?",
    "Python: define {f}({arg}) that {what}.",
    "I need a Python function named {f} taking {arg}; it {what}.",
)


def _name(base: str, k: int) -> str:
    return base.replace("_k", f"_{k}") if base.endswith("_k") or "_k_" in base else f"{base}_{k}"


def python_function(rng: random.Random) -> Example:
    family_name = rng.choice(tuple(FAMILIES))
    family = FAMILIES[family_name]
    k = rng.randint(2, 19)
    arg = rng.choice(("x", "n", "value"))
    name = _name(rng.choice(family.names), k)
    what = rng.choice(family.describe).format(arg=arg, k=k)
    prompt, _ = phrase(rng, rng.choice(CORES).format(f=name, arg=arg, what=what), lowercase=False)
    body = family.body.format(arg=arg, k=k)
    code = f"def {name}({arg}):\n    return {body}\n"
    answer = f"```python\n{code}```"
    tests = "".join(f"assert {name}({x}) == {family.reference(x, k)!r}\n" for x in family.inputs)
    reference = {"entry_point": name, "code_prefix": "", "tests": tests, "canonical_solution": code}
    return Example("code", "code_synthesis", f"code:{family_name}:{name}:{k}", prompt, answer, reference)
