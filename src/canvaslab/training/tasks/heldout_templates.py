"""Held-out templates: every task asked in forms that the training generators never produce.

The ``heldout`` split of ``Mixture.heldout`` keeps the training templates and holds out operands, values or
combinations, so it measures in-template skill. This module writes the other kind of test: question forms,
user wrappers, story templates, JSON key names and value types, function behaviours, function and argument names,
instruction wordings and sum widths that occur nowhere in training. It is a code path of its own: ``Mixture``'s
training generators never call it, its keys start with ``heldout-template:`` (``base.split_of`` puts them in the
``heldout_template`` split, so ``draw`` can never hand one to training), and
``tests/training/test_heldout_templates.py`` checks that its templates share no template, wrapper, key name or
word 5-gram with the training generators'.

Per task, what is new (and what is kept, so that the score says what changed):

- ``add2``, ``add3``: new question forms and wrappers; the operand pairs are held-out ones too (never trained in
  any wording), so the only change from the in-template split is the wording.
- ``add_mixed``: two operands of different widths (1 and 2, 1 and 3, 2 and 3 digits, either order), in the new
  question forms. Every training sum has two operands of one width.
- ``word``: new story templates, names and items (additions and subtractions of 2-99, as in training).
- ``fact``: the trained facts of the trained countries, in new question forms and wrappers.
- ``json``: record kinds whose key names occur in no training record, with value types training never asks for
  (numbers with a decimal point, arrays of strings) beside strings, integers and booleans, in new request forms.
- ``code``: function behaviours outside the six trained families (maximum, floor division, less-than, equality,
  remainder, reversed subtraction, doubling), new function and argument names, new request forms.
- ``prose``: held-out passages (never trained) behind new instructions.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass

from canvaslab.training.tasks import code, prose, structured
from canvaslab.training.tasks.base import HELD_OUT_TEMPLATE, Example, split_of
from canvaslab.training.tasks.knowledge import ANSWERS, knowledge_base

# The held-out-template tasks: the evaluation tasks, and sums of two widths (no in-template counterpart).
TEMPLATE_TASKS: tuple[str, ...] = ("add2", "add3", "add_mixed", "word", "fact", "json", "code", "prose")

# User wrappers never used in training (base.PREFIXES and base.SUFFIXES hold the training ones).
PREFIXES = ("", "Hello there. ", "Could you help? ", "One more for you: ", "Sorry to bother you, ", "Right, ")
SUFFIXES = ("", " Cheers.", " Much appreciated.", " Keep it short.", " I'm in a hurry.")
_BARE_WEIGHT = 3


def wrapped(rng: random.Random, core: str, prefixes: tuple[str, ...], suffixes: tuple[str, ...],
            lower_share: float, lowercase: bool = True) -> str:
    """``core`` between a drawn prefix and suffix (the bare ones, first, ``_BARE_WEIGHT`` times as likely),
    lower-cased ``lower_share`` of the time where case is not part of the task."""
    prefix = rng.choices(prefixes, [_BARE_WEIGHT] + [1] * (len(prefixes) - 1))[0]
    suffix = rng.choices(suffixes, [_BARE_WEIGHT] + [1] * (len(suffixes) - 1))[0]
    text = prefix + core + suffix
    return text.lower() if lowercase and rng.random() < lower_share else text


def phrase(rng: random.Random, core: str, lowercase: bool = True) -> str:
    """``core`` inside a held-out wrapper (lower-cased 15% of the time where case is not part of the task)."""
    return wrapped(rng, core, PREFIXES, SUFFIXES, 0.15, lowercase)


def _key(task: str, *parts: object) -> str:
    return HELD_OUT_TEMPLATE + ":".join([task, *map(str, parts)])


# ---- arithmetic ----------------------------------------------------------------------------------------------

ADDITION_CORES = (
    "If you put {a} and {b} together, what total do you get?", "Tell me the total of {a} and {b}.",
    "I have {a} and then {b} more; what does that come to?", "Work out {a} + {b} for me, would you?",
    "{a} added to {b} makes what?", "Could you find {a} + {b}?", "Total up {a} and {b}.",
    "What do {a} and {b} add up to?",
)
# (digits of a, digits of b): every pair of two different widths, both orders
MIXED_WIDTHS = ((1, 2), (2, 1), (1, 3), (3, 1), (2, 3), (3, 2))


def _operand(rng: random.Random, digits: int) -> int:
    return rng.randint(10 ** (digits - 1), 10**digits - 1)


def _sum_example(task: str, a: int, b: int, core_index: int, rng: random.Random) -> Example:
    prompt = phrase(rng, ADDITION_CORES[core_index].format(a=a, b=b))
    return Example(task, "math", _key(task, core_index, f"{a}+{b}"), prompt, f"{a} + {b} = {a + b}.",
                   {"answer": str(a + b)})


def addition(rng: random.Random, digits: int) -> Example:
    """A sum of two ``digits``-long operands whose pair is held out in training (``add:a+b``), in a new wording."""
    for _ in range(10_000):
        a, b = _operand(rng, digits), _operand(rng, digits)
        if split_of(f"add:{a}+{b}") == "heldout":
            return _sum_example(f"add{digits}", a, b, rng.randrange(len(ADDITION_CORES)), rng)
    raise RuntimeError("no held-out operand pair after 10,000 draws")


def mixed_addition(rng: random.Random) -> Example:
    """A sum of operands of two different widths (e.g. 7 + 385), in a new wording."""
    width_a, width_b = rng.choice(MIXED_WIDTHS)
    a, b = _operand(rng, width_a), _operand(rng, width_b)
    return _sum_example("add_mixed", a, b, rng.randrange(len(ADDITION_CORES)), rng)


NAMES = ("Kofi", "Hana", "Pablo", "Ingrid", "Tunde", "Mei", "Lars", "Priya", "Diego", "Aiko")
ITEMS = ("buttons", "beads", "tickets", "bottles", "feathers", "candles", "puzzles", "crayons")
GAIN_STORIES = (
    "{n} bought {a} {i} on Monday and {b} on Tuesday. How many {i} did {n} buy in all?",
    "A shelf holds {a} {i}. {n} adds another {b}. What is the total number of {i} on the shelf?",
    "{n} collected {a} {i} last week and {b} this week. Altogether, how many {i} were collected?",
)
LOSS_STORIES = (
    "{n} started with {a} {i}. After handing {b} to a friend, how many {i} remain?",
    "A jar held {a} {i}, and {n} took {b} out. How many {i} are still in the jar?",
)


def word_problem(rng: random.Random) -> Example:
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    if rng.random() < 0.6:
        kind, index, total, working = "gain", rng.randrange(len(GAIN_STORIES)), a + b, f"{a} + {b} = {a + b}"
        story = GAIN_STORIES[index]
    else:
        a, b = max(a, b), min(a, b)
        kind, index, total, working = "loss", rng.randrange(len(LOSS_STORIES)), a - b, f"{a} - {b} = {a - b}"
        story = LOSS_STORIES[index]
    prompt = phrase(rng, story.format(n=name, i=item, a=a, b=b))
    return Example("word", "math", _key("word", f"{kind}{index}", name, item, a, b), prompt,
                   f"{working}. The answer is {total}.", {"answer": str(total)})


# ---- facts ---------------------------------------------------------------------------------------------------

QUESTIONS = {
    "capital": (
        "Which city serves as the capital for {c}?", "{c} is governed from which city?",
        "I forgot where {c} has its capital. Which city is it?", "If I fly to the capital city that {c} has, where do I land?",
    ),
    "language": (
        "What would I hear people speaking on the streets of {c}?", "People from {c} talk in which language?",
        "If I move to {c}, which language should I learn?", "{c} uses which language day to day?",
    ),
    "founded": (
        "{c} dates back to which year?", "In which year did {c} begin?",
        "Since what year has {c} existed?", "Give the year {c} got started.",
    ),
}


def fact_question(rng: random.Random) -> Example:
    country = rng.choice(knowledge_base())
    attribute = rng.choice(tuple(QUESTIONS))
    index = rng.randrange(len(QUESTIONS[attribute]))
    prompt = phrase(rng, QUESTIONS[attribute][index].format(c=country.name))
    value = str(getattr(country, attribute))
    return Example("fact", "factual", _key("fact", attribute, index, country.name), prompt,
                   ANSWERS[attribute].format(c=country.name, v=value), {"answers": [value]})


# ---- JSON ----------------------------------------------------------------------------------------------------

TYPE_NAMES = {**structured.TYPE_NAMES, float: "number", list: "array"}
TITLES = ("Emma", "Dune", "Ulysses", "Beloved", "Matilda", "Walden", "Ivanhoe", "Rebecca")
TEAMS = ("sales", "design", "support", "research", "finance", "legal")
SKILLS = ("sql", "rust", "excel", "drawing", "welding", "spanish", "accounting")
DESTINATIONS = ("Lisbon", "Nairobi", "Hanoi", "Reykjavik", "Havana", "Krakow", "Dakar", "Montreal")
STATIONS = ("north", "harbour", "airport", "valley", "summit", "riverside")


@dataclass(frozen=True)
class Record:
    make: Callable[[random.Random], dict]
    cores: tuple[Callable[[dict], str], ...]


def spoken_list(value: list[str]) -> str:
    """A list as written in a sentence: "a, b and c"."""
    return ", ".join(value[:-1]) + " and " + value[-1] if len(value) > 1 else value[0]


def _js(value) -> str:
    return json.dumps(value)


RECORDS = {
    "book": Record(
        lambda rng: {"title": rng.choice(TITLES), "pages": rng.randint(80, 900),
                     "rating": rng.randint(10, 50) / 10, "hardcover": rng.random() < 0.5},
        (lambda v: f"Produce JSON where title is \"{v['title']}\", pages is {v['pages']}, rating is {v['rating']} "
                   f"(a decimal number) and hardcover is {_js(v['hardcover'])}.",
         lambda v: f"Encode this book as a JSON object: the title {v['title']}, {v['pages']} pages, a rating of "
                   f"{v['rating']}, hardcover {_js(v['hardcover'])}. Use the keys title, pages, rating, hardcover.",
         lambda v: f"book -> json. title: {v['title']}; pages: {v['pages']}; rating: {v['rating']}; "
                   f"hardcover: {_js(v['hardcover'])}")),
    "employee": Record(
        lambda rng: {"team": rng.choice(TEAMS), "salary": rng.randint(20, 200) * 1000,
                     "remote": rng.random() < 0.5, "skills": rng.sample(SKILLS, rng.randint(1, 3))},
        (lambda v: f"Serialize an employee to JSON with team \"{v['team']}\", salary {v['salary']}, remote "
                   f"{_js(v['remote'])} and skills {_js(v['skills'])} (a list of strings).",
         lambda v: f"Someone on the {v['team']} team earns {v['salary']}, works remotely: {_js(v['remote'])}, "
                   f"and knows {spoken_list(v['skills'])}. Write that out as JSON using the keys team, salary, remote, skills.",
         lambda v: f"employee record in json form -- team: {v['team']}; salary: {v['salary']}; remote: "
                   f"{_js(v['remote'])}; skills: {_js(v['skills'])}")),
    "trip": Record(
        lambda rng: {"destination": rng.choice(DESTINATIONS), "nights": rng.randint(1, 21),
                     "cost": rng.randint(1000, 99999) / 100, "booked": rng.random() < 0.5},
        (lambda v: f"Produce JSON where destination is \"{v['destination']}\", nights is {v['nights']}, cost is "
                   f"{v['cost']} (a decimal number) and booked is {_js(v['booked'])}.",
         lambda v: f"Encode my trip as a JSON object: going to {v['destination']} for {v['nights']} nights, costing "
                   f"{v['cost']}, booked {_js(v['booked'])}. Use the keys destination, nights, cost, booked.",
         lambda v: f"trip -> json. destination: {v['destination']}; nights: {v['nights']}; cost: {v['cost']}; "
                   f"booked: {_js(v['booked'])}")),
    "reading": Record(
        lambda rng: {"station": rng.choice(STATIONS), "temperature": rng.randint(-150, 350) / 10,
                     "humidity": rng.randint(5, 100), "sunny": rng.random() < 0.5},
        (lambda v: f"Produce JSON where station is \"{v['station']}\", temperature is {v['temperature']} (a decimal "
                   f"number), humidity is {v['humidity']} and sunny is {_js(v['sunny'])}.",
         lambda v: f"The {v['station']} weather station reads {v['temperature']} degrees and {v['humidity']} percent "
                   f"humidity, sunny: {_js(v['sunny'])}. Encode it as a JSON object keyed station, temperature, "
                   "humidity, sunny.",
         lambda v: f"weather reading -> json. station: {v['station']}; temperature: {v['temperature']}; "
                   f"humidity: {v['humidity']}; sunny: {_js(v['sunny'])}")),
}


def schema(values: dict) -> dict:
    properties = {}
    for key, value in values.items():
        properties[key] = {"type": TYPE_NAMES[type(value)]}
        if isinstance(value, list):
            properties[key]["items"] = {"type": "string"}
    return {"type": "object", "properties": properties, "required": list(values), "additionalProperties": False}


def json_object(rng: random.Random) -> Example:
    kind = rng.choice(tuple(RECORDS))
    values = RECORDS[kind].make(rng)
    index = rng.randrange(len(RECORDS[kind].cores))
    prompt = phrase(rng, RECORDS[kind].cores[index](values), lowercase=False)
    answer = json.dumps(values)
    return Example("json", "json", _key("json", kind, index, answer), prompt, answer,
                   {"schema": schema(values), "required_values": values})


# ---- code ----------------------------------------------------------------------------------------------------

FAMILIES = {
    "max": code.Family(("larger_of", "at_least", "floor_at"),
                       ("gives back whichever is bigger, {arg} or {k}",), "max({arg}, {k})", lambda x, k: max(x, k)),
    "floordiv": code.Family(("div_by", "whole_parts", "how_many_fit"),
                            ("gives back {arg} divided by {k}, rounded down to a whole number",), "{arg} // {k}",
                            lambda x, k: x // k),
    "lt": code.Family(("is_below", "smaller_than", "under_limit"),
                      ("gives back True exactly when {arg} is smaller than {k}",), "{arg} < {k}", lambda x, k: x < k),
    "eq": code.Family(("equals", "is_exactly", "matches"),
                      ("gives back True exactly when {arg} equals {k}",), "{arg} == {k}", lambda x, k: x == k),
    "rem": code.Family(("remainder", "leftover", "mod_by"),
                       ("gives back the remainder left when {arg} is divided by {k}",), "{arg} % {k}",
                       lambda x, k: x % k),
    "rsub": code.Family(("from_limit", "gap_to", "count_down_from"),
                        ("gives back {k} with {arg} taken off it",), "{k} - {arg}", lambda x, k: k - x),
    "double": code.Family(("double_then_add", "twice_plus", "dbl_offset"),
                          ("gives back two times {arg}, then adds {k}",), "2 * {arg} + {k}", lambda x, k: 2 * x + k),
}
ARGUMENTS = ("num", "y", "amount")
CODE_CORES = (
    "Please code up `{f}({arg})` for me; given {arg}, it {what}.",
    "Using Python, define a function called {f} with one parameter {arg}. It {what}.",
    "In Python I'd like {f}({arg}), which {what}.",
    "Create {f}({arg}) -- a Python def that {what}.",
)


def python_function(rng: random.Random) -> Example:
    family_name = rng.choice(tuple(FAMILIES))
    family = FAMILIES[family_name]
    k, arg = rng.randint(2, 19), rng.choice(ARGUMENTS)
    name = f"{rng.choice(family.names)}_{k}"
    what = rng.choice(family.describe).format(arg=arg, k=k)
    prompt = phrase(rng, rng.choice(CODE_CORES).format(f=name, arg=arg, what=what), lowercase=False)
    body = family.body.format(arg=arg, k=k)
    source = f"def {name}({arg}):\n    return {body}\n"
    tests = "".join(f"assert {name}({x}) == {family.reference(x, k)!r}\n" for x in family.inputs)
    reference = {"entry_point": name, "code_prefix": "", "tests": tests, "canonical_solution": source}
    return Example("code", "code_synthesis", _key("code", family_name, name, k), prompt,
                   f"```python\n{source}```", reference)


# ---- prose ---------------------------------------------------------------------------------------------------

PROSE_CORES = ("Here is how a text opens. Add the sentences that follow it: {s}",
               "Carry on from this line, in the same voice.\n{s}",
               "Pick up where this leaves off: {s}",
               "Extend the following with a few more sentences: {s}")


def heldout_passages(passages: tuple[str, ...]) -> tuple[str, ...]:
    """The passages held out of training (``prose.passage_key``'s split)."""
    return tuple(p for p in passages if split_of(prose.passage_key(p)) == "heldout")


def prose_continuation(rng: random.Random, heldout: tuple[str, ...]) -> Example:
    """A held-out passage (never trained; ``heldout_passages``) behind a new instruction."""
    passage = rng.choice(heldout)
    opening, rest = prose.opening_and_rest(passage)
    prompt = phrase(rng, rng.choice(PROSE_CORES).format(s=opening), lowercase=False)
    return Example("prose", "open_ended", _key("prose", prose.passage_key(passage)), prompt, rest,
                   {"reference_continuation": rest})


# ---- the split -----------------------------------------------------------------------------------------------

def makers(passages: tuple[str, ...] | None = None) -> dict[str, Callable[[random.Random], Example]]:
    """One generator per held-out-template task (prose only with the passages)."""
    found: dict[str, Callable[[random.Random], Example]] = {
        "add2": lambda rng: addition(rng, 2), "add3": lambda rng: addition(rng, 3), "add_mixed": mixed_addition,
        "word": word_problem, "fact": fact_question, "json": json_object, "code": python_function,
    }
    if passages is not None:
        cache: list[tuple[str, ...]] = []  # the held-out passages, found on first use

        def continuation(rng: random.Random) -> Example:
            if not cache:
                cache.append(heldout_passages(passages))
            return prose_continuation(rng, cache[0])

        found["prose"] = continuation
    return found


def examples(task: str, n: int, seed: int = 0,
             found_makers: dict[str, Callable[[random.Random], Example]] | None = None) -> list[Example]:
    """``n`` distinct held-out-template examples of ``task`` (distinct prompts), reproducible from ``seed``
    (``found_makers``: ``makers(passages)``, for prose)."""
    make = (found_makers or makers())[task]
    rng, seen, found = random.Random(f"heldout-template/{task}/{seed}"), set(), []
    for _ in range(200 * n):
        example = make(rng)
        if example.prompt not in seen:
            seen.add(example.prompt)
            found.append(example)
        if len(found) == n:
            break
    return found
