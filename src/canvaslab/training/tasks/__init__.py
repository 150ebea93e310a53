"""The `mini` training mixture: seeded task generators with hash-decided held-out splits.

``Mixture.sample(rng, "train")`` draws one training example; ``Mixture.heldout(task, n, seed)`` a list
of held-out ones (never produced for training, by construction of ``split_of``): the training templates with
held-out operands, values or combinations (in-template). ``Mixture.heldout_templates(task, n, seed)`` asks the
tasks in templates the training generators never use (``heldout_templates``: new wordings, JSON keys and value
types, function behaviours, sum widths). Everything is a pure function of the seed and, for prose, of the passage
file.

Two data versions (``DATA_VERSIONS``): ``shipped``, the generators the shipped `mini` was trained on (its examples
stay byte for byte the same), and ``grammar`` (``tasks.grammar``: every task composed of many independent parts, worked
math answers, and one more training task, ``add_widths``: sums of other operand widths).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from canvaslab.choices import DATA_VERSIONS, one_of
from canvaslab.errors import CanvaslabError
from canvaslab.training.tasks import arithmetic, code, grammar, heldout_templates, knowledge, prose, structured
from canvaslab.training.tasks.base import Example, draw, split_of

# Share of training examples per task. Math and code get the most: their answers are exact.
MIXTURE: dict[str, float] = {
    "add2": 0.12, "add3": 0.18, "word": 0.10, "fact": 0.14, "fact_statement": 0.04,
    "json": 0.12, "code": 0.12, "prose": 0.18,
}

# The grammar version's shares: MIXTURE's, and sums of the operand widths add2 and add3 leave out
GRAMMAR_MIXTURE: dict[str, float] = {**MIXTURE, "add_widths": 0.06}
BASE_SHARES = {"shipped": MIXTURE, "grammar": GRAMMAR_MIXTURE}


def check_data(data: str) -> str:
    """``data`` if it is a data version (``DATA_VERSIONS``)."""
    return one_of("data version", data, DATA_VERSIONS)


def mixture_shares(overrides: Mapping[str, float] | None = None, data: str = "shipped") -> dict[str, float]:
    """The data version's shares (``MIXTURE`` or ``GRAMMAR_MIXTURE``) with some tasks' shares replaced
    (``overrides``), normalised to sum to 1."""
    base_shares = BASE_SHARES[check_data(data)]
    shares = {**base_shares, **(overrides or {})}
    unknown = sorted(set(shares) - set(base_shares))
    if unknown:
        raise CanvaslabError(f"mixture: no task {unknown[0]!r} (tasks: {', '.join(base_shares)})")
    bad = [task for task, share in shares.items() if not (math.isfinite(share) and share >= 0)]
    if bad:
        raise CanvaslabError(f"mixture: the share of {bad[0]} must be a finite number >= 0, not {shares[bad[0]]}")
    total = sum(shares.values())
    if total <= 0:
        raise CanvaslabError("mixture: every share is 0")
    return {task: share / total for task, share in shares.items()}


def parse_shares(text: str, data: str = "shipped") -> dict[str, float]:
    """``"add3=0.27,fact=0.1"`` as ``{"add3": 0.27, "fact": 0.1}`` (checked by ``mixture_shares``)."""
    overrides = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        task, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            overrides[task.strip()] = float(value)
        except ValueError:
            raise CanvaslabError(f"mixture: {item!r} is not TASK=SHARE") from None
    mixture_shares(overrides, data)
    return overrides


# The tasks the quality benchmark scores (fact statements are training material only).
EVAL_TASKS: tuple[str, ...] = ("add2", "add3", "word", "fact", "json", "code", "prose")


@dataclass(frozen=True)
class AnswerStyle:
    """How the training answers are written. Prompts, held-out keys and scoring do not depend on it, so models
    trained in different styles are scored on the same held-out prompts."""

    # arithmetic.SUM_FORMATS. The default is the shipped `mini`'s: "padded" (every digit of a sum at a fixed
    # place) did not add better at full size (docs/mini-model.md, "What was tried")
    sum_format: str = "plain"
    # a prose answers file (`canvaslab mini distill`): training prose answers as a teacher model wrote them
    # (sequence-level distillation); None: the passages' own continuations
    prose_answers: str | None = None

    def __post_init__(self) -> None:
        if self.sum_format not in arithmetic.SUM_FORMATS:
            raise CanvaslabError(f"sum format {self.sum_format!r} is not one of: {', '.join(arithmetic.SUM_FORMATS)}")


# The style of the shipped `mini` and of the texts its tokenizer was trained on (pinned: the default may change).
TOKENIZER_STYLE = AnswerStyle(sum_format="plain")


class Mixture:
    """Generators for every task; prose needs the passage file written by ``prepare_passages``. ``shares``
    (``mixture_shares``'s overrides) changes how often training draws each task, never the held-out examples.
    ``data``: the data version (``DATA_VERSIONS``); under ``grammar`` the training generators and the in-template
    held-out split (``heldout``) are the grammar's, the held-out templates the same as ever. (The grammar writes
    its own sums, so ``style.sum_format`` does not apply to it.)"""

    def __init__(self, passages: Path | str | None, style: AnswerStyle = AnswerStyle(),
                 shares: Mapping[str, float] | None = None, data: str = "shipped") -> None:
        self.data = check_data(data)
        self.makers: dict[str, Callable[[random.Random], Example]] = {
            "add2": lambda rng: arithmetic.addition(rng, 2, style.sum_format),
            "add3": lambda rng: arithmetic.addition(rng, 3, style.sum_format),
            "word": arithmetic.word_problem,
            "fact": knowledge.question,
            "fact_statement": knowledge.statement,
            "json": structured.json_object,
            "code": code.python_function,
        }
        texts, answers = None, None
        if passages is not None:
            texts = prose.load_passages(str(passages))
            answers = None if style.prose_answers is None else prose.load_answers(
                style.prose_answers, hashlib.sha256(Path(passages).read_bytes()).hexdigest())
            self.makers["prose"] = lambda rng: prose.continuation(rng, texts, answers)
        elif style.prose_answers is not None:
            raise CanvaslabError("prose answers need the passages they were written for")
        if data == "grammar":
            self.makers = grammar.makers(texts, answers)
        # without overrides the shares are MIXTURE's own numbers, so earlier runs' pools are drawn bit for bit
        every_share = mixture_shares(shares, data) if shares else BASE_SHARES[data]
        self.tasks = [task for task in BASE_SHARES[data] if task in self.makers and every_share[task] > 0]
        self.weights = [every_share[task] for task in self.tasks]
        # the held-out templates' generators: never in ``makers``, so ``sample`` cannot reach them
        self._template_makers = heldout_templates.makers(texts)

    def sample(self, rng: random.Random, split: str = "train") -> Example:
        task = rng.choices(self.tasks, self.weights)[0]
        return draw(self.makers[task], rng, split)

    def heldout(self, task: str, n: int, seed: int = 0) -> list[Example]:
        """``n`` distinct held-out examples of ``task`` (distinct prompts), reproducible from ``seed``."""
        rng, seen, examples = random.Random(f"heldout/{task}/{seed}"), set(), []
        for _ in range(200 * n):
            example = draw(self.makers[task], rng, "heldout")
            if example.prompt not in seen:
                seen.add(example.prompt)
                examples.append(example)
            if len(examples) == n:
                break
        return examples

    def template_tasks(self) -> tuple[str, ...]:
        """The tasks with held-out templates (prose only with passages)."""
        return tuple(task for task in heldout_templates.TEMPLATE_TASKS if task in self._template_makers)

    def heldout_templates(self, task: str, n: int, seed: int = 0) -> list[Example]:
        """``n`` distinct examples of ``task`` in held-out templates (``heldout_templates``), reproducible from
        ``seed``; their split is ``heldout_template``."""
        if task not in self._template_makers:
            raise CanvaslabError(f"no held-out templates for task {task!r} (tasks: {', '.join(self.template_tasks())})")
        return heldout_templates.examples(task, n, seed, self._template_makers)


__all__ = ["DATA_VERSIONS", "EVAL_TASKS", "GRAMMAR_MIXTURE", "MIXTURE", "TOKENIZER_STYLE", "AnswerStyle", "Example", "Mixture", "split_of"]
