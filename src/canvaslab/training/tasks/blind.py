"""The blind test set: `mini`'s tasks asked in a grammar of its own, generated once from its own seed.

The held-out templates (``heldout_templates``) were read while later training data was written, so they act as a
development set. This module is the test set that nothing was tuned on: new request wordings, user wrappers,
stories, names, items, JSON key names and phrasings, function names and behaviour descriptions, written for this
set alone. What it asks stays inside what the tasks teach, so a model that learned a task can answer:

- ``add2``, ``add3``: sums of two 2-digit (3-digit) numbers whose operand pair is held out of training
  (``add:a+b`` in the ``heldout`` split: never trained in any wording).
- ``word``: additions and subtractions of 2-99 in new stories; the operand pairs are held out of the grammar
  data's word problems (``word:gain:a:b``, ``word:loss:a:b``).
- ``fact``: the capital, language and founding year of the training world's countries (``knowledge``).
- ``json``: objects of 2-4 string, integer and boolean fields, the values given in the request.
- ``code``: one-line Python functions whose behaviour is one of the trained primitives (a sum, a difference, a
  product, a remainder, a comparison), tested on the training tests' inputs in the sandbox.

Prose is left out: it has no right answer to check.

The set is a pure function of ``BLIND_SEED``, ``PER_TASK`` and this module (``GENERATOR_VERSION``): ``set_bytes``
writes it as JSONL and ``set_sha256`` hashes it. Each item holds its task, prompt, reference and the checker that
scores it (the commit-order scorers, ``scoring.probes``). The guard (``reaches_known``) finds a prompt that matches
a training or held-out template (its placeholders standing for one word or number each) or shares a fixed word
5-gram with one; no blind item reaches one (``tests/training/test_blind_set.py``, which also compares the set with
sampled training and held-out prompts), and the evaluation refuses a set where one does (a training template added
later that rebuilds a blind prompt). The guard does not steer generation, so the set's bytes depend on this module
alone.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from canvaslab.errors import CanvaslabError
from canvaslab.io import read_json
from canvaslab.training.tasks import arithmetic, base, code, grammar, heldout_templates, knowledge, structured
from canvaslab.training.tasks.base import Example, split_of

GENERATOR_VERSION = "blind-1"
BLIND_SEED = 62_4417
PER_TASK = 50
BLIND_TASKS: tuple[str, ...] = ("add2", "add3", "word", "fact", "json", "code")
BLIND_KEY = "blind:"
# The scorer of each regime (``scoring.probes.scorers``): what an item's ``checker`` names.
# The set's sha256 and how it was made, committed before any model was evaluated on it.
REGISTRATION = Path(__file__).with_name("blind_set.json")
CHECKERS = {"math": "math: the number after '####', else the last number, equals the answer",
            "factual": "factual: the value occurs as whole words",
            "json": "json: the first object validates against the schema and holds the requested values",
            "code_synthesis": "code: the function passes its tests in the sandbox"}

# ---- wrappers (none is a training or held-out wrapper) ----------------------------------------------------------

OPENERS = ("", "Morning! ", "Here goes: ", "Help needed: ", "Next up. ", "Another quick one. ", "Hiya. ")
CLOSERS = ("", " Ta very much.", " A short answer is fine.", " Appreciate it.", " Thanks so much.", " Cheers!")


def wrap(rng: random.Random, core: str, lowercase: bool = True) -> str:
    """``core`` in a blind wrapper, lower-cased 10% of the time where case is not part of the task."""
    return heldout_templates.wrapped(rng, core, OPENERS, CLOSERS, 0.10, lowercase)


def _key(task: str, *parts: object) -> str:
    return BLIND_KEY + ":".join([task, *map(str, parts)])


# ---- sums --------------------------------------------------------------------------------------------------------

SUM_CORES = (
    "Kindly tell me what {a} and {b} come to when summed.", "My calculator is broken: {a} + {b} makes?",
    "Please total {a} with {b}.", "Adding {b} onto {a} gives which number?", "{a} together with {b} is how much?",
    "Find out how much {a} plus {b} comes to.", "Could you sum {a} with {b} for me?",
    "I owe {a} and then another {b}; what do I owe overall?", "Show me the sum you get from {a} and {b}.",
    "Quick arithmetic check: {a} + {b}, what's the result?",
)


def _pair(rng: random.Random, digits: int) -> tuple[int, int]:
    """Two ``digits``-long operands whose pair is held out of training in every wording."""
    low, high = 10 ** (digits - 1), 10**digits - 1
    for _ in range(10_000):
        a, b = rng.randint(low, high), rng.randint(low, high)
        if split_of(f"add:{a}+{b}") == "heldout":
            return a, b
    raise RuntimeError("no held-out operand pair after 10,000 draws")


def addition(digits: int) -> Callable[[random.Random], tuple[Example, str]]:
    task = f"add{digits}"

    def make(rng: random.Random) -> tuple[Example, str]:
        a, b = _pair(rng, digits)
        index = rng.randrange(len(SUM_CORES))
        core = SUM_CORES[index].format(a=a, b=b)
        return Example(task, "math", _key(task, index, f"{a}+{b}"), wrap(rng, core), grammar.worked_sum(a, b),
                       {"answer": str(a + b)}), core
    return make


# ---- word problems -----------------------------------------------------------------------------------------------

PEOPLE = ("Amelie", "Bruno", "Chiara", "Dmitri", "Esther", "Farid", "Greta", "Hamid", "Isla", "Jonas", "Katya",
          "Lorenzo", "Malia", "Nikos", "Odette", "Rafael")
THINGS = ("muffins", "posters", "kites", "lanterns", "badges", "scarves", "postcards", "jars", "paintings",
          "blankets", "baskets", "vases")
GAIN_TALES = (
    "On Saturday {n} made {a} {i}, and on Sunday {n} made {b} more. Over the two days, how many {i} did {n} make?",
    "A school fair got {a} {i} in the morning and {b} in the afternoon. How many {i} arrived that day?",
    "{n}'s club knitted {a} {i}; a second club knitted {b}. Counting both clubs, how many {i} were knitted?",
    "{n} packed {a} {i} into one van and {b} into another. How many {i} went into the vans?",
)
LOSS_TALES = (
    "A market stall began the day with {a} {i} and sold {b} before noon. Counting what is left, how many {i} did "
    "the stall keep?",
    "{n} printed {a} {i}, but {b} came out smudged and went in the bin. How many clean {i} does {n} have?",
    "Out of {a} {i} on display, {b} were carried off by visitors. How many {i} can visitors still see?",
)


def _word_make(rng: random.Random) -> tuple[Example, str]:
    for _ in range(10_000):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        kind = "gain" if rng.random() < 0.6 else "loss"
        if kind == "loss":
            a, b = max(a, b), min(a, b)
        if split_of(f"word:{kind}:{a}:{b}") == "heldout":
            break
    else:
        raise RuntimeError("no held-out word-problem operands after 10,000 draws")
    tales = GAIN_TALES if kind == "gain" else LOSS_TALES
    index = rng.randrange(len(tales))
    name, thing = rng.choice(PEOPLE), rng.choice(THINGS)
    core = tales[index].format(n=name, i=thing, a=a, b=b)
    total = a + b if kind == "gain" else a - b
    working = (f"We add: {a} + {b}, column by column:\n{grammar.worked_sum(a, b)}" if kind == "gain"
               else f"We subtract: {a} - {b}, column by column:\n{grammar.worked_difference(a, b)}")
    return Example("word", "math", _key("word", f"{kind}{index}", name, thing, a, b), wrap(rng, core), working,
                   {"answer": str(total)}), core


# ---- facts -------------------------------------------------------------------------------------------------------

FACT_CORES = {
    "capital": ("Suppose I want to see the parliament building of {c}; to which city should I travel?",
                "The capital of {c}: what is that city called?", "Which city do the rulers of {c} govern from?",
                "Name {c}'s capital for me."),
    "language": ("Which language would a newspaper in {c} be printed in?",
                 "What language do children in {c} learn at home?",
                 "Residents of {c} mostly converse in what language?",
                 "The language of {c}: what is it called?"),
    "founded": ("What year marks the founding of {c}?", "{c} first appeared in which year?",
                "In what year did the history of {c} as a country open?", "Founding of {c}: which year was it?"),
}


def _fact_make(rng: random.Random) -> tuple[Example, str]:
    country = rng.choice(knowledge.knowledge_base())
    attribute = rng.choice(tuple(FACT_CORES))
    index = rng.randrange(len(FACT_CORES[attribute]))
    core = FACT_CORES[attribute][index].format(c=country.name)
    value = str(getattr(country, attribute))
    return Example("fact", "factual", _key("fact", attribute, index, country.name), wrap(rng, core),
                   knowledge.ANSWERS[attribute].format(c=country.name, v=value), {"answers": [value]}), core


# ---- JSON --------------------------------------------------------------------------------------------------------

FIELDS = {  # key -> the type of its value
    "nickname": "string", "owner": "string", "region": "string", "brand": "string", "genre": "string",
    "author": "string", "mood": "string", "colour": "string", "material": "string", "flavor": "string",
    "score": "integer", "level": "integer", "floor": "integer", "seats": "integer", "year": "integer",
    "width": "integer", "rank": "integer", "count": "integer",
    "active": "boolean", "visible": "boolean", "verified": "boolean", "paid": "boolean", "open": "boolean",
    "done": "boolean",
}
WORDS = ("amber", "falcon", "harbor", "meadow", "quartz", "saffron", "tundra", "velvet", "willow", "zephyr",
         "cobalt", "juniper", "lagoon", "marble", "orchid", "pebble")
JSON_CORES = ("Please answer with a JSON object only. It needs {spec}.", "Fill out a JSON object: {spec}.",
              "Could I get this in JSON form? {spec}.", "Encode the following fields in JSON -> {spec}.",
              "Respond in JSON. Fields: {spec}.")
FIELD_STYLES = ("{k} should be {j}", "{k} -> {j}", "the field {k} holds {j}", "{k} equal to {j}")


def _field_value(rng: random.Random, kind: str):
    if kind == "string":
        return rng.choice(WORDS)
    if kind == "integer":
        return rng.randint(0, rng.choice((9, 99, 999)))
    return rng.random() < 0.5


def _json_make(rng: random.Random) -> tuple[Example, str]:
    keys = rng.sample(tuple(FIELDS), rng.randint(2, 4))
    values = {key: _field_value(rng, FIELDS[key]) for key in keys}
    style = rng.choice(FIELD_STYLES)
    parts = [style.format(k=key, j=json.dumps(value)) for key, value in values.items()]
    spec = ", ".join(parts[:-1]) + " and " + parts[-1]
    index = rng.randrange(len(JSON_CORES))
    core = JSON_CORES[index].format(spec=spec)
    answer = json.dumps(values)
    return Example("json", "json", _key("json", index, answer), wrap(rng, core, lowercase=False), answer,
                   {"schema": heldout_templates.schema(values), "required_values": values}), core


# ---- code --------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Behaviour:
    body: str  # the return expression: {arg} the argument, {k} the constant
    says: tuple[str, ...]  # what it returns, in words
    apply: Callable[[int, int], object]


BEHAVIOURS = {
    "add": Behaviour("{arg} + {k}", ("{arg} increased by {k}", "the sum {arg} + {k}"), lambda x, k: x + k),
    "sub": Behaviour("{arg} - {k}", ("{arg} reduced by {k}", "what is left of {arg} once {k} is taken off"),
                     lambda x, k: x - k),
    "mul": Behaviour("{arg} * {k}", ("{k} times {arg}", "the product of {arg} and {k}"), lambda x, k: x * k),
    "mod": Behaviour("{arg} % {k}", ("what remains when {arg} is split into groups of {k}",), lambda x, k: x % k),
    "gt": Behaviour("{arg} > {k}", ("whether {arg} exceeds {k} (True or False)",), lambda x, k: x > k),
    "lt": Behaviour("{arg} < {k}", ("whether {arg} falls short of {k} (True or False)",), lambda x, k: x < k),
}
CODE_CORES = ("Write me a small Python def named {f}, with parameter {arg}, whose return value is {what}.",
              "Python please: a function {f}({arg}) whose result is {what}.",
              "Produce Python source for {f}({arg}); the function must return {what}.",
              "Define {f} in Python so that calling it on {arg} hands back {what}.")
FUNCTION_VERBS = ("tweak", "nudge", "gauge", "tally", "probe", "reckon")
FUNCTION_NOUNS = ("figure", "quantity", "measure", "sample", "input")
ARGUMENTS = ("k_in", "qty", "el", "xval")


def _code_make(rng: random.Random) -> tuple[Example, str]:
    behaviour = rng.choice(tuple(BEHAVIOURS))
    body, says = BEHAVIOURS[behaviour].body, BEHAVIOURS[behaviour].says
    k, arg = rng.randint(2, 19), rng.choice(ARGUMENTS)
    name = f"{rng.choice(FUNCTION_VERBS)}_{rng.choice(FUNCTION_NOUNS)}_{k}"
    index = rng.randrange(len(CODE_CORES))
    core = CODE_CORES[index].format(f=name, arg=arg, what=rng.choice(says).format(arg=arg, k=k))
    expression = body.format(arg=arg, k=k)
    source = f"def {name}({arg}):\n    return {expression}\n"
    tests = "".join(f"assert {name}({x}) == {BEHAVIOURS[behaviour].apply(x, k)!r}\n" for x in grammar.TEST_INPUTS)
    reference = {"entry_point": name, "code_prefix": "", "tests": tests, "canonical_solution": source}
    return Example("code", "code_synthesis", _key("code", behaviour, index, name), wrap(rng, core, lowercase=False),
                   f"```python\n{source}```", reference), core


MAKERS: dict[str, Callable[[random.Random], tuple[Example, str]]] = {
    "add2": addition(2), "add3": addition(3), "word": _word_make, "fact": _fact_make, "json": _json_make,
    "code": _code_make,
}

# ---- the guard ---------------------------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\{[a-z]+\}")


def _expanded(frames: tuple[str, ...], slot: str, fillers: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(frame.replace(slot, filler) for frame in frames for filler in fillers)


def known_template_texts() -> tuple[str, ...]:
    """Every template text of the training generators (both data versions) and of the held-out templates;
    slots filled from a closed list (the grammar's attribute nouns and sum expressions) are filled in."""
    g = grammar
    nouns = tuple(n for ns in g.ATTRIBUTE_NOUNS.values() for n in ns)
    shipped = (*arithmetic.ADDITION_CORES, *arithmetic.GAIN_STORIES, *arithmetic.LOSS_STORIES,
               *(q for qs in knowledge.QUESTIONS.values() for q in qs), *knowledge.STATEMENT_CORES,
               *code.CORES, *(d for family in code.FAMILIES.values() for d in family.describe))
    composed = (*g.EXPRESSIONS, *_expanded(g.EXPRESSION_FRAMES, "{e}", g.EXPRESSIONS), *g.VERB_FRAMES,
                *g.PERSON_SETUPS, *g.PLACE_SETUPS, *g.PERSON_GAINS, *g.PERSON_LOSSES, *g.PLACE_GAINS,
                *g.PLACE_LOSSES, *(q for qs in (*g.PERSON_QUESTIONS.values(), *g.PLACE_QUESTIONS.values()) for q in qs),
                *_expanded(g.NOUN_FRAMES, "{n}", nouns), *_expanded(g.PRONOUN_FRAMES, "{n}", nouns), *g.CONTEXTS,
                *(q for qs in g.VERB_QUESTIONS.values() for q in qs), *g.STATEMENT_CORES,
                *(f for fs in g.STATEMENT_FACTS.values() for f in fs), *g.JSON_INTROS, *g.JSON_SENTENCE_INTROS,
                *g.JSON_CLOSINGS, *g.CODE_REQUESTS, *(s for p in (*g.TRANSFORMS.values(), *g.PREDICATES.values())
                                                      for s in p.says))
    return (*shipped, *composed, *g.heldout_template_texts())


def known_wrappers() -> frozenset[str]:
    """The training and held-out user wrappers (prefixes and suffixes), stripped and lower-cased."""
    every = (*base.PREFIXES, *base.SUFFIXES, *heldout_templates.PREFIXES, *heldout_templates.SUFFIXES,
             *grammar.GREETINGS, *grammar.LEADS, *grammar.ASKS, *grammar.THANKS)
    return frozenset(w.strip().lower() for w in every if w.strip())


def _instance_pattern(template: str) -> str:
    """A template as a pattern its instances match: each placeholder one word, name or number."""
    parts = re.split(r"(\{[a-z]+\})", template)
    return "".join(r"\S+?" if _PLACEHOLDER.fullmatch(part) else re.escape(part) for part in parts)


@lru_cache(maxsize=1)
def _guard() -> tuple[frozenset, re.Pattern]:
    texts = known_template_texts()
    # the shipped JSON requests are written inside their record functions: their fixed 5-grams from instances
    shipped_json = [structured.json_object(random.Random(i)).prompt for i in range(300)]
    grams = frozenset(g for t in (*texts, *shipped_json) for g in grammar.fixed_ngrams(t))
    pattern = re.compile("|".join(f"(?:{_instance_pattern(t)})" for t in texts), re.IGNORECASE | re.DOTALL)
    return grams, pattern


def reaches_known(core: str, prompt: str) -> bool:
    """True if the request ``core`` is an instance of a training or held-out template, or the prompt shares a fixed
    word 5-gram with one."""
    grams, pattern = _guard()
    return bool(grammar.fixed_ngrams(prompt) & grams) or pattern.fullmatch(core.strip()) is not None


# ---- the set -----------------------------------------------------------------------------------------------------

def _drawn(task: str, n: int, seed: int) -> list[tuple[Example, str]]:
    """``n`` distinct examples of ``task`` (distinct prompts), each with its request core."""
    make, rng = MAKERS[task], random.Random(f"blind/{GENERATOR_VERSION}/{seed}/{task}")
    found: dict[str, tuple[Example, str]] = {}
    for _ in range(200 * n):
        example, core = make(rng)
        found.setdefault(example.prompt, (example, core))
        if len(found) == n:
            return list(found.values())
    raise RuntimeError(f"blind set: only {len(found)} of {n} {task} items after {200 * n} draws")


def task_items(task: str, n: int = PER_TASK, seed: int = BLIND_SEED) -> list[Example]:
    """``n`` distinct blind examples of ``task`` (distinct prompts), reproducible from ``seed``."""
    return [example for example, _ in _drawn(task, n, seed)]


def blind_examples(per_task: int = PER_TASK, seed: int = BLIND_SEED) -> list[Example]:
    """The blind set, task by task in ``BLIND_TASKS`` order."""
    return [example for task in BLIND_TASKS for example in task_items(task, per_task, seed)]


def reaching_items(per_task: int = PER_TASK, seed: int = BLIND_SEED) -> list[str]:
    """The prompts of the set that reach a training or held-out template (``reaches_known``): none, while the set
    is blind."""
    return [example.prompt for task in BLIND_TASKS for example, core in _drawn(task, per_task, seed)
            if reaches_known(core, example.prompt)]


def item_record(index: int, example: Example) -> dict:
    """One JSONL line: id, task, prompt, reference (what the checker reads), checker, a canonical answer."""
    return {"id": f"{example.task}-{index:03d}", "task": example.task, "regime": example.regime, "key": example.key,
            "prompt": example.prompt, "reference": example.reference, "checker": CHECKERS[example.regime],
            "canonical_answer": example.answer}


def set_bytes(per_task: int = PER_TASK, seed: int = BLIND_SEED) -> bytes:
    """The blind set as JSONL (keys sorted, ASCII): the bytes ``set_sha256`` hashes."""
    counters: dict[str, int] = {}
    lines = []
    for example in blind_examples(per_task, seed):
        index = counters[example.task] = counters.get(example.task, -1) + 1
        lines.append(json.dumps(item_record(index, example), sort_keys=True, ensure_ascii=True))
    return ("\n".join(lines) + "\n").encode("ascii")


def set_sha256(per_task: int = PER_TASK, seed: int = BLIND_SEED) -> str:
    return hashlib.sha256(set_bytes(per_task, seed)).hexdigest()


def registered(path: Path = REGISTRATION) -> dict:
    """The registration (``blind_set.json``): generator version, seed, items per task, tasks, sha256."""
    if not path.is_file():
        raise CanvaslabError(f"blind set: no registration at {path}")
    return read_json(path)


def example_of(record: dict) -> Example:
    """The ``Example`` of a JSONL line (what the scorers judge)."""
    return Example(record["task"], record["regime"], record["key"], record["prompt"], record["canonical_answer"],
                   record["reference"])
