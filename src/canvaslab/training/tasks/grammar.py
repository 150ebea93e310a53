"""The grammar data version (``Mixture(..., data="grammar")``): every task built from many independent parts.

The shipped generators (``arithmetic``, ``knowledge``, ``structured``, ``code``, ``prose``) write each task in a
handful of fixed sentences; `mini` trained on them learns the sentences (``heldout_templates``: new wordings
mostly fail). Here each prompt is a composition: a wrapper (greeting x lead-in x request x thanks), a question
frame, synonyms for what is asked, names and items, JSON key names drawn from a word list of hundreds
(``words``), value types, function behaviours composed of primitives. Math answers are worked: the sum or the
difference written digit by digit with carries (borrows), then the result on a last line ``#### N``, which the
math scorer reads first (``scoring.probes.scorers.score_math``).

What stays held out: the held-out templates' wordings, wrappers, key names, names and items never occur in
training. Word lists leave them out (``words``), and ``reaches_heldout`` rejects any prompt that holds one of
their fixed word 5-grams, matches one of their templates or opens (ends) with one of their wrappers, so that a
composition that happens to rebuild one is drawn again. Code behaviours are compared by what they compute:
a composition equal, on every test input, to a held-out behaviour with any constant is drawn again. Sums of two
different widths are trained only where one operand has 4 digits (``WIDTHS``); the held-out ones (1-3 digits)
are reached through the same column-by-column answer. Split keys: sums and word problems by their operands
(``add:a+b`` as in the shipped data, so a held-out pair is held out in either version; a story that rebuilds a
shipped one word for word by its shipped key, ``SHIPPED_STORIES``), facts by phrasing, JSON by key set, code by
its expression (one behaviour written two ways, ``x * 18`` and ``x * 2 * 9``, may fall in both splits, as a shipped
behaviour does under two names), prose by passage (the shipped keys).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from canvaslab.training.tasks import arithmetic, base, heldout_templates, knowledge, prose, words
from canvaslab.training.tasks.base import TRAIN_ONLY, Example

# ---- the held-out guard ----------------------------------------------------------------------------------------

N_GRAM = 5
_PLACEHOLDER = re.compile(r"\{[a-z]+\}")
_TOKEN = re.compile(r"[a-z_']+|\d+|[+\-*/%<>=]+")


def _tokens(text: str) -> list[str]:
    """Lower-cased words and operators; a number or a placeholder is ``_``."""
    return ["_" if t.isdigit() else t for t in _TOKEN.findall(_PLACEHOLDER.sub(" _ ", text.lower()))]


def fixed_ngrams(text: str) -> set[tuple[str, ...]]:
    """The word 5-grams of ``text`` without a number or placeholder."""
    tokens = _tokens(text)
    return {g for g in (tuple(tokens[i:i + N_GRAM]) for i in range(len(tokens) - N_GRAM + 1)) if "_" not in g}


def heldout_template_texts() -> tuple[str, ...]:
    """Every held-out template's text, placeholders for what varies (JSON key names stay literal)."""
    ht = heldout_templates
    json_cores = [core({key: ["{v}"] if key == "skills" else "{v}" for key in words.HELD_OUT_KEYS})
                  for record in ht.RECORDS.values() for core in record.cores]
    stories = ht.GAIN_STORIES + ht.LOSS_STORIES
    return (*ht.ADDITION_CORES, *stories, *(q for qs in ht.QUESTIONS.values() for q in qs), *json_cores,
            *ht.CODE_CORES, *(d for f in ht.FAMILIES.values() for d in f.describe), *ht.PROSE_CORES)


@lru_cache(maxsize=1)
def _guard() -> tuple[frozenset, re.Pattern, tuple[str, ...], tuple[str, ...]]:
    texts = heldout_template_texts()
    grams = frozenset(g for t in texts for g in fixed_ngrams(t))
    patterns = ["(?:" + r".+?".join(re.escape(part) for part in _PLACEHOLDER.split(t)) + ")" for t in texts]
    prefixes = tuple(p.lower().strip() for p in heldout_templates.PREFIXES if p)
    suffixes = tuple(s.lower().strip() for s in heldout_templates.SUFFIXES if s)
    return grams, re.compile("|".join(patterns), re.IGNORECASE | re.DOTALL), prefixes, suffixes


def reaches_heldout(prompt: str) -> bool:
    """True if ``prompt`` holds a held-out template's fixed 5-gram, matches a held-out template, or opens or
    ends with a held-out wrapper (the grammar draws such a prompt again)."""
    grams, pattern, prefixes, suffixes = _guard()
    lowered = prompt.lower().strip()
    return (lowered.startswith(prefixes) or lowered.endswith(suffixes) or bool(fixed_ngrams(prompt) & grams)
            or pattern.search(prompt) is not None)


def _unreached(make: Callable[[random.Random], tuple[Example, str]]) -> Callable[[random.Random], Example]:
    """``make`` (an example and the text to check) drawn until the text reaches no held-out template."""
    def draw(rng: random.Random) -> Example:
        for _ in range(1000):
            example, checked = make(rng)
            if not reaches_heldout(checked):
                return example
        raise RuntimeError("the grammar keeps rebuilding held-out templates")
    return draw


# ---- wrappers --------------------------------------------------------------------------------------------------

GREETINGS = ("", "Hi! ", "Hey, ", "Hello! ", "Hi, ", "Good morning! ", "Good evening. ", "Hey there! ", "Yo, ",
             "Greetings. ", "Hi again. ")
LEADS = ("", "Quick question: ", "I need this: ", "Please help me. ", "OK so ", "Question: ", "Can you help me? ",
         "Here is a task: ", "Next one: ", "Help me out: ", "A question for you: ", "I was wondering: ", "Task: ")
ASKS = ("", " Please.", " Be brief.", " Answer quickly.", " Be concise.", " No rush.", " Please be precise.",
        " Show your work.")
THANKS = ("", " Thanks!", " Thank you.", " Thanks a lot.", " Many thanks.", " Thanks in advance.", " Ta!")
_BARE = 4


def _pick(rng: random.Random, options: tuple[str, ...]) -> str:
    return rng.choices(options, [_BARE] + [1] * (len(options) - 1))[0]


def wrap(rng: random.Random, core: str, lowercase: bool = True) -> tuple[str, str, str]:
    """``core`` inside a composed wrapper: the prompt, the prefix and the suffix (lower-cased 15% of the time where
    case is not part of the task)."""
    prefix, suffix = _pick(rng, GREETINGS) + _pick(rng, LEADS), _pick(rng, ASKS) + _pick(rng, THANKS)
    text = prefix + core + suffix
    if lowercase and rng.random() < 0.15:
        text = text.lower()
    return text, prefix, suffix


# ---- worked arithmetic -----------------------------------------------------------------------------------------

PLACES = ("units", "tens", "hundreds", "thousands", "ten thousands", "hundred thousands")
FINAL = "#### "  # the last line of a worked answer: the result, where the math scorer reads it


def _digit(n: int, place: int) -> int:
    return n // 10**place % 10


def worked_sum(a: int, b: int) -> str:
    """``a + b`` column by column, units first, each column's carry written out, then ``#### a+b``."""
    lines, carry = [], 0
    for place in range(max(len(str(a)), len(str(b)))):
        x, y = _digit(a, place), _digit(b, place)
        total = x + y + carry
        lines.append(f"{PLACES[place]}: {x} + {y} + {carry} = {total}, write {total % 10}, carry {total // 10}")
        carry = total // 10
    if carry:
        lines.append(f"{PLACES[len(lines)]}: write the carry {carry}")
    return "\n".join(lines + [f"{FINAL}{a + b}"])


def worked_difference(a: int, b: int) -> str:
    """``a - b`` (a >= b >= 0) column by column, units first, each borrow written out, then ``#### a-b``."""
    if not 0 <= b <= a:
        raise ValueError(f"worked_difference needs a >= b >= 0, not {a}, {b}")
    lines, borrow = [], 0
    for place in range(len(str(a))):
        x, y = _digit(a, place), _digit(b, place)
        if x - y - borrow >= 0:
            lines.append(f"{PLACES[place]}: {x} - {y} - {borrow} = {x - y - borrow}, borrow 0")
            borrow = 0
        else:
            lines.append(f"{PLACES[place]}: {x + 10} - {y} - {borrow} = {x + 10 - y - borrow}, borrow 1")
            borrow = 1
    return "\n".join(lines + [f"{FINAL}{a - b}"])


# ---- sums ------------------------------------------------------------------------------------------------------

EXPRESSIONS = ("{a} + {b}", "{a}+{b}", "{a} plus {b}", "the sum of {a} and {b}", "{a} and {b} added together",
               "{a} add {b}", "{a} + {b} in total")
EXPRESSION_FRAMES = ("What is {e}?", "What's {e}?", "Compute {e}.", "Calculate {e}.", "Evaluate {e}.", "Find {e}.",
                     "Solve {e}.", "Give me {e}.", "{e} = ?", "{e}?", "{e} equals what?", "How much is {e}?",
                     "Please compute {e}.", "I need {e}.", "Can you calculate {e}?", "Work {e} out.",
                     "Do you know {e}?", "Tell me what {e} is.", "what is {e}", "Figure out {e}.")
VERB_FRAMES = ("Add {a} and {b}.", "Add {a} to {b}.", "Sum {a} and {b}.", "Sum up {a} and {b}.",
               "Add up {a} and {b}.", "Combine {a} and {b} by adding.", "Increase {a} by {b}.",
               "Take {a} and add {b}.", "Start at {a} and count up {b}.", "What do you get when you add {a} and {b}?",
               "If you add {a} and {b}, what do you get?", "What number is {b} more than {a}?",
               "{a} plus {b} makes how much?", "Add {b} onto {a}.", "What is the result of adding {a} and {b}?")
# Operand widths of the sums: the same width (1-4 digits), or two widths of which one is 4 (the held-out mixed
# widths, ``heldout_templates.MIXED_WIDTHS``, are pairs of 1-3 digits and are never trained)
WIDTHS = {"add2": ((2, 2),), "add3": ((3, 3),),
          "add_widths": ((1, 1), (4, 4), (1, 4), (4, 1), (2, 4), (4, 2), (3, 4), (4, 3))}


def _operand(rng: random.Random, digits: int) -> int:
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def sum_core(rng: random.Random, a: int, b: int) -> str:
    if rng.random() < 0.6:
        expression = rng.choice(EXPRESSIONS).format(a=a, b=b)
        return rng.choice(EXPRESSION_FRAMES).format(e=expression)
    return rng.choice(VERB_FRAMES).format(a=a, b=b)


def addition(task: str) -> Callable[[random.Random], Example]:
    def make(rng: random.Random) -> tuple[Example, str]:
        width_a, width_b = rng.choice(WIDTHS[task])
        a, b = _operand(rng, width_a), _operand(rng, width_b)
        prompt, _, _ = wrap(rng, sum_core(rng, a, b))
        answer = f"{a} + {b}, column by column:\n{worked_sum(a, b)}"
        return Example(task, "math", f"add:{a}+{b}", prompt, answer, {"answer": str(a + b)}), prompt
    return _unreached(make)


# ---- word problems ---------------------------------------------------------------------------------------------

CONTAINERS = ("box", "basket", "bag", "drawer", "crate", "bowl", "tin", "bucket", "cupboard", "chest", "sack")
PERSON_SETUPS = ("{n} has {a} {i}.", "{n} had {a} {i}.", "{n} owns {a} {i}.", "{n} keeps {a} {i} at home.",
                 "At first, {n} has {a} {i}.", "{n} started the day with {a} {i}.", "{n} is holding {a} {i}.",
                 "{n} counted {a} {i}.")
PLACE_SETUPS = ("There are {a} {i} in the {p}.", "The {p} has {a} {i} in it.", "{a} {i} are in a {p}.",
                "In the {p} there are {a} {i}.")
PERSON_GAINS = ("{n} gets {b} more.", "{n} finds {b} more.", "{n} buys {b} more {i}.",
                "{n} receives {b} {i} as a gift.", "A friend gives {n} {b} more {i}.", "Then {n} picks up {b} more.",
                "{n} wins {b} {i}.", "Later, {n} gets another {b} {i}.", "{n} is given {b} more {i}.")
PERSON_LOSSES = ("{n} gives away {b}.", "{n} loses {b} of them.", "{n} sells {b} {i}.",
                 "{n} gives {b} {i} to a friend.", "{n} drops {b} of them.", "{n} uses {b} {i}.",
                 "{n} hands out {b} {i}.", "Then {n} throws away {b} {i}.", "{n} lends {b} {i} to a neighbour.")
PLACE_GAINS = ("{n} puts in {b} more.", "{n} adds {b} {i} to the {p}.", "{n} drops {b} more {i} into the {p}.",
               "Then {b} more {i} go into the {p}.")
PLACE_LOSSES = ("{n} takes out {b}.", "{n} removes {b} {i} from the {p}.", "{b} {i} are taken out of the {p}.",
                "Then {n} empties {b} {i} out of the {p}.")
PERSON_QUESTIONS = {"gain": ("How many {i} does {n} have now?", "How many {i} does {n} have?",
                             "How many {i} does {n} end up with?", "What is the number of {i} {n} has now?",
                             "How many {i} are there now?", "Count {n}'s {i} now."),
                    "loss": ("How many {i} are left?", "How many {i} does {n} have now?", "How many {i} remain?",
                             "How many {i} does {n} still have?", "What number of {i} is left?",
                             "How many {i} does {n} keep?")}
PLACE_QUESTIONS = {"gain": ("How many {i} are in the {p} now?", "How many {i} does the {p} hold now?",
                            "What is the number of {i} in the {p}?"),
                   "loss": ("How many {i} are left in the {p}?", "How many {i} remain in the {p}?",
                            "How many {i} does the {p} still hold?")}
# The shipped stories the parts above can rebuild word for word, by their shipped story id (``arithmetic``): such a
# story keeps its shipped key, so that the shipped held-out stories stay held out here too
SHIPPED_STORIES = {story: f"{kind}{index}" for kind, stories in (("gain", arithmetic.GAIN_STORIES),
                                                                  ("loss", arithmetic.LOSS_STORIES))
                   for index, story in enumerate(stories)}


def _word_make(rng: random.Random) -> tuple[Example, str]:
    digits = rng.choices((1, 2, 3), (1, 6, 3))
    a, b = rng.randint(2, 10 ** digits[0] - 1), rng.randint(2, 10 ** rng.choice((1, 2, digits[0])) - 1)
    kind = "gain" if rng.random() < 0.6 else "loss"
    if kind == "loss":
        a, b = max(a, b), min(a, b)
    name, item, place = rng.choice(words.PEOPLE), rng.choice(words.ITEMS), rng.choice(CONTAINERS)
    if rng.random() < 0.7:
        setup, event = rng.choice(PERSON_SETUPS), rng.choice(PERSON_GAINS if kind == "gain" else PERSON_LOSSES)
        question = rng.choice(PERSON_QUESTIONS[kind])
    else:
        setup, event = rng.choice(PLACE_SETUPS), rng.choice(PLACE_GAINS if kind == "gain" else PLACE_LOSSES)
        question = rng.choice(PLACE_QUESTIONS[kind])
    template = " ".join((setup, event, question))
    story = template.format(n=name, i=item, p=place, a=a, b=b)
    story = story[0].upper() + story[1:]
    prompt, _, _ = wrap(rng, story)
    if kind == "gain":
        total, answer = a + b, f"We add: {a} + {b}, column by column:\n{worked_sum(a, b)}"
    else:
        total, answer = a - b, f"We subtract: {a} - {b}, column by column:\n{worked_difference(a, b)}"
    key = (f"word:{SHIPPED_STORIES[template]}:{name}:{item}:{a}:{b}" if template in SHIPPED_STORIES
           else f"word:{kind}:{a}:{b}")
    return Example("word", "math", key, prompt, answer, {"answer": str(total)}), prompt


word_problem = _unreached(_word_make)


# ---- facts -----------------------------------------------------------------------------------------------------

ATTRIBUTE_NOUNS = {
    "capital": ("capital", "capital city", "seat of government", "chief city", "administrative capital",
                "governing city"),
    "language": ("language", "main language", "official language", "national language", "spoken language",
                 "everyday language", "native tongue", "mother tongue"),
    "founded": ("founding year", "year of founding", "year of establishment", "founding date", "year of origin",
                "starting year"),
}
NOUN_FRAMES = ("What is the {n} of {c}?", "What's the {n} of {c}?", "What is {c}'s {n}?", "Tell me the {n} of {c}.",
               "Name the {n} of {c}.", "State the {n} of {c}.", "Give me the {n} of {c}.", "Do you know the {n} of {c}?",
               "I want to know the {n} of {c}.", "{n} of {c}?", "{c}: {n}?", "{c} - what is its {n}?",
               "Which is the {n} of {c}?", "Say what the {n} of {c} is.", "Can you tell me {c}'s {n}?",
               "The {n} of {c} is what?", "Look up the {n} of {c}.", "Remind me of the {n} of {c}.")
PRONOUN_FRAMES = ("What is its {n}?", "Do you know its {n}?", "Tell me its {n}.", "Which is its {n}?",
                  "What's its {n}?")
CONTEXTS = ("I am reading about {c}.", "We are studying {c} in class.", "My friend lives in {c}.",
            "I plan a trip to {c}.", "This is about the country {c}.", "Consider {c}.", "Think of {c}.")
VERB_QUESTIONS = {
    "capital": ("Which city is the capital of {c}?", "Where is the capital of {c}?",
                "In which city is the government of {c}?", "Which city is {c} governed from?",
                "From which city is {c} run?", "What city is {c} ruled from?", "Where does the government of {c} sit?",
                "Which city hosts the government of {c}?", "If I visit the capital of {c}, which city am I in?",
                "Which town is the capital of {c}?"),
    "language": ("What language do people speak in {c}?", "Which language is spoken in {c}?",
                 "What do people in {c} speak?", "What language do they use in {c}?",
                 "Which language do the people of {c} use?", "In {c}, what language is spoken?",
                 "What language would I need in {c}?", "Which language should a visitor to {c} know?",
                 "What tongue is spoken in {c}?", "What language is heard in {c}?"),
    "founded": ("When was {c} founded?", "In what year was {c} founded?", "When was {c} established?",
                "What year was {c} created?", "When did {c} start?", "When did {c} begin?",
                "In which year was {c} set up?", "Which year did {c} start in?", "When did {c} come into existence?",
                "Since which year has {c} been a country?", "In which year did {c} get started?"),
}


def _fact_make(rng: random.Random) -> tuple[Example, str]:
    country = rng.choice(knowledge.knowledge_base())
    attribute = rng.choice(tuple(ATTRIBUTE_NOUNS))
    noun = rng.choice(ATTRIBUTE_NOUNS[attribute])
    form = rng.random()
    if form < 0.45:
        template = rng.choice(NOUN_FRAMES).replace("{n}", noun)
    elif form < 0.85:
        template = rng.choice(VERB_QUESTIONS[attribute])
    else:
        template = rng.choice(CONTEXTS) + " " + rng.choice(PRONOUN_FRAMES).replace("{n}", noun)
    core = template.format(c=country.name)
    core = core[0].upper() + core[1:]
    prompt, prefix, suffix = wrap(rng, core)
    shipped = knowledge.QUESTIONS[attribute]
    if template in shipped and prefix in base.PREFIXES and suffix in base.SUFFIXES:
        # a shipped phrasing: its shipped key, so that the shipped held-out phrasings stay held out here too
        key = (f"fact:{attribute}:{shipped.index(template)}:"
               f"p{base.PREFIXES.index(prefix)}s{base.SUFFIXES.index(suffix)}")
    else:
        key = f"gfact:{attribute}:{template}:{prefix}|{suffix}"
    value = str(getattr(country, attribute))
    answer = knowledge.ANSWERS[attribute].format(c=country.name, v=value)
    return Example("fact", "factual", key, prompt, answer, {"answers": [value]}), prompt


fact_question = _unreached(_fact_make)

STATEMENT_CORES = (*knowledge.STATEMENT_CORES, "Tell me everything about {c}.", "What can you tell me about {c}?",
                   "Give me an overview of {c}.", "Facts about {c}, please.", "Summarize what you know about {c}.",
                   "Write a short profile of {c}.", "Who are the people of {c}, and where do they live?")
STATEMENT_FACTS = {
    "capital": ("Its capital is {v}.", "The capital city is {v}.", "Its government sits in {v}.",
                "{v} is its capital.", "It is governed from {v}."),
    "language": ("Its people speak {v}.", "The main language is {v}.", "People there speak {v}.",
                 "{v} is spoken there.", "Its language is {v}."),
    "founded": ("It was founded in {v}.", "It was established in {v}.", "It dates back to {v}.",
                "It began in {v}.", "It has existed since {v}."),
}


def _statement_make(rng: random.Random) -> tuple[Example, str]:
    country = rng.choice(knowledge.knowledge_base())
    prompt, _, _ = wrap(rng, rng.choice(STATEMENT_CORES).format(c=country.name))
    facts = [rng.choice(STATEMENT_FACTS[a]).format(v=getattr(country, a)) for a in STATEMENT_FACTS]
    rng.shuffle(facts)
    answer = " ".join([f"{country.name} is a country.", *facts])
    return Example("fact_statement", "factual", f"{TRAIN_ONLY}statement", prompt, answer, {}), prompt


statement = _unreached(_statement_make)


# ---- JSON ------------------------------------------------------------------------------------------------------

TYPE_WORDS = {"string": ("string", "text", "a string"), "integer": ("integer", "int", "whole number", "an integer"),
              "boolean": ("boolean", "bool", "true/false"), "number": ("number", "decimal", "float", "a decimal number"),
              "array": ("list of strings", "array of strings", "string list", "a list")}
RECORD_NOUNS = ("user", "order", "item", "event", "device", "song", "movie", "recipe", "plant", "vehicle", "game",
                "course", "task", "ticket", "account", "city", "shop", "room", "player", "sensor", "pet", "person",
                "product", "meeting", "parcel", "robot", "garden", "album", "lesson", "house")
JSON_INTROS = ("Return a JSON object with", "Give me JSON with", "Write a JSON object with",
               "Create a JSON object containing", "Output JSON with", "I need a JSON object with",
               "Make a JSON record with", "Build a JSON object that has", "Produce a JSON object with",
               "Generate JSON having", "Please write JSON with", "Format as JSON:", "JSON with", "json please:",
               "Encode as JSON:", "Serialize to JSON:", "Turn this into a JSON object:", "Convert to JSON:")
JSON_SENTENCE_INTROS = ("Make a JSON object from this.", "Write this as JSON.", "I need JSON for the following.",
                        "Put this in a JSON object.", "Give it to me as JSON.")
JSON_CLOSINGS = ("", " Keys: {keys}.", " Use exactly these keys: {keys}.", " No other keys.", " Only those keys.",
                 " Output only the JSON.")
SPEC_STYLES = ("{k} ({t}) = {j}", "{k} = {j}", "{k}={b}", "{k}: {j}", "\"{k}\": {j}", "{k} set to {j}", "{k} {b}",
               "{k} is {b}")


def _json_value(rng: random.Random, kind: str):
    if kind == "string":
        return rng.choice(words.STRING_VALUES)
    if kind == "integer":
        return rng.randint(0, rng.choice((9, 99, 999, 9999, 99999)))
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "number":
        return rng.randint(-999, 99999) / rng.choice((10, 100))
    return rng.sample(words.STRING_VALUES, rng.randint(1, 3))


def _bare(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return heldout_templates.spoken_list(value)
    return json.dumps(value)


def _json_make(rng: random.Random) -> tuple[Example, str]:
    count = rng.choices((1, 2, 3, 4, 5), (1, 3, 4, 3, 2))[0]
    values: dict = {}
    kinds: dict[str, str] = {}
    while len(values) < count:
        if rng.random() < 0.12:
            key, kind = rng.choice(words.LIST_KEYS), "array"
        else:
            key, kind = rng.choice(words.SCALAR_KEYS), rng.choices(("string", "integer", "boolean", "number"),
                                                                   (4, 3, 2, 2))[0]
        if key not in values:
            values[key], kinds[key] = _json_value(rng, kind), kind
    typed = rng.random() < 0.3
    if rng.random() < 0.2:  # sentences
        parts = [f"The {k} {'are' if kinds[k] == 'array' else 'is'} {_bare(v)}" + (f" ({rng.choice(TYPE_WORDS[kinds[k]])})" if typed else "") + "."
                 for k, v in values.items()]
        core = rng.choice(JSON_SENTENCE_INTROS) + " " + " ".join(parts)
    else:
        style = rng.choice(SPEC_STYLES)
        parts = [style.format(k=k, j=json.dumps(v), b=_bare(v), t=rng.choice(TYPE_WORDS[kinds[k]]))
                 + (f" ({rng.choice(TYPE_WORDS[kinds[k]])})" if typed and "{t}" not in style else "")
                 for k, v in values.items()]
        joiner = rng.choice((", ", "; ", " | ", "\n- "))
        listed = (parts[0] if len(parts) == 1 else joiner.join(parts[:-1]) + (" and " if joiner == ", " else joiner)
                  + parts[-1])
        intro = rng.choice(JSON_INTROS)
        if rng.random() < 0.3 and intro.endswith(" with"):
            intro = intro.removesuffix(" with") + f" for a {rng.choice(RECORD_NOUNS)} with"
        if joiner == "\n- ":  # a bulleted list
            core = intro.rstrip(":") + ":\n- " + listed
        else:
            core = f"{intro} {listed}" + ("" if listed.endswith((".", "]", "}", '"')) else ".")
    core += rng.choice(JSON_CLOSINGS).format(keys=", ".join(values))
    prompt, _, _ = wrap(rng, core, lowercase=False)
    answer = json.dumps(values)
    key = "gjson:" + ",".join(sorted(f"{k}:{kinds[k]}" for k in values))
    reference = {"schema": heldout_templates.schema(values), "required_values": values}
    return Example("json", "json", key, prompt, answer, reference), prompt


json_object = _unreached(_json_make)


# ---- code ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Primitive:
    """One step of a behaviour: its expression (``{e}`` the value so far, ``{k}`` its constant), the precedence
    of that expression (Python's: 10 for + and -, 20 for *, // and %, 100 for a call or a name), a function, and
    how a description says it (``{e}`` what it acts on)."""
    body: str
    precedence: int
    apply: Callable[[int, int], object]
    says: tuple[str, ...]


TRANSFORMS = {
    "add": Primitive("{e} + {k}", 10, lambda v, k: v + k, ("adds {k} to {e}", "increases {e} by {k}")),
    "sub": Primitive("{e} - {k}", 10, lambda v, k: v - k, ("subtracts {k} from {e}", "decreases {e} by {k}")),
    "rsub": Primitive("{k} - {e}", 10, lambda v, k: k - v, ("subtracts {e} from {k}", "takes {e} away from {k}")),
    "mul": Primitive("{e} * {k}", 20, lambda v, k: v * k, ("multiplies {e} by {k}", "scales {e} by {k}")),
    "double": Primitive("2 * {e}", 20, lambda v, k: 2 * v, ("doubles {e}", "multiplies {e} by two")),
    "floordiv": Primitive("{e} // {k}", 20, lambda v, k: v // k,
                          ("divides {e} by {k}, rounding down", "floor-divides {e} by {k}")),
    "mod": Primitive("{e} % {k}", 20, lambda v, k: v % k,
                     ("takes the remainder of {e} divided by {k}", "reduces {e} modulo {k}")),
    "max": Primitive("max({e}, {k})", 100, lambda v, k: max(v, k),
                     ("takes the larger of {e} and {k}", "raises {e} to at least {k}")),
    "min": Primitive("min({e}, {k})", 100, lambda v, k: min(v, k),
                     ("takes the smaller of {e} and {k}", "caps {e} at {k}")),
    "abs": Primitive("abs({e})", 100, lambda v, k: abs(v), ("takes the absolute value of {e}",)),
    "square": Primitive("{e} * {e}", 20, lambda v, k: v * v, ("squares {e}", "multiplies {e} by itself")),
}
PREDICATES = {
    "gt": Primitive("{e} > {k}", 5, lambda v, k: v > k, ("{e} is greater than {k}", "{e} is above {k}")),
    "lt": Primitive("{e} < {k}", 5, lambda v, k: v < k, ("{e} is less than {k}", "{e} is below {k}")),
    "ge": Primitive("{e} >= {k}", 5, lambda v, k: v >= k, ("{e} is at least {k}", "{e} is {k} or more")),
    "le": Primitive("{e} <= {k}", 5, lambda v, k: v <= k, ("{e} is at most {k}", "{e} is {k} or less")),
    "eq": Primitive("{e} == {k}", 5, lambda v, k: v == k, ("{e} is equal to {k}", "{e} is exactly {k}")),
    "ne": Primitive("{e} != {k}", 5, lambda v, k: v != k, ("{e} is not {k}", "{e} differs from {k}")),
    "div": Primitive("{e} % {k} == 0", 5, lambda v, k: v % k == 0,
                     ("{e} is divisible by {k}", "{e} is a multiple of {k}")),
}
RETURNS = ("returns", "gives back", "outputs", "yields")
THEN = (", then ", " and then ", "; after that it ", ", and next ")
RESULT = ("the result", "that", "it")
CODE_REQUESTS = ("Write a Python function `{f}({arg})` that {what}.", "Implement `{f}({arg})` in Python: it {what}.",
                 "Can you write a python function {f}({arg}) which {what}?", "Python: define {f}({arg}) that {what}.",
                 "I need a Python function named {f} taking {arg}; it {what}.",
                 "Write {f}({arg}) in Python. It {what}.", "Define a Python function {f} with argument {arg} that {what}.",
                 "Code a function `{f}({arg})` which {what}.", "Give me Python code for {f}({arg}): it {what}.",
                 "Make a python def {f}({arg}) that {what}.")
TEST_INPUTS = (0, 1, 7, -3, 12)
_SIGNATURE_INPUTS = tuple(range(-40, 41))


def _signature(apply: Callable[[int], object]) -> tuple:
    return tuple(apply(v) for v in _SIGNATURE_INPUTS)


@lru_cache(maxsize=1)
def heldout_behaviours() -> frozenset[tuple]:
    """What the held-out functions compute on -40..40, for every constant in -60..120."""
    return frozenset(_signature(lambda v, f=family, k=k: f.reference(v, k))
                     for family in heldout_templates.FAMILIES.values() for k in range(-60, 121) if k)


def _wrap_operand(text: str, precedence: int, needed: int) -> str:
    return text if precedence >= needed else f"({text})"


def _compose(step: Primitive, text: str, precedence: int, k: int) -> str:
    if step.precedence == 100:
        return step.body.format(e=text, k=k)
    if step.body.startswith("{k}") or step.body.startswith("2 *"):  # the operand on the right
        return step.body.format(e=_wrap_operand(text, precedence, step.precedence + 1), k=k)
    if step.body == "{e} * {e}":
        return f"{_wrap_operand(text, precedence, 20)} * {_wrap_operand(text, precedence, 21)}"
    left = 20 if step.body.endswith("== 0") else step.precedence
    return step.body.format(e=_wrap_operand(text, precedence, left), k=k)


def _code_make(rng: random.Random) -> tuple[Example, str]:
    arg = rng.choice(words.ARGUMENTS)
    steps = [rng.choice(tuple(TRANSFORMS)) for _ in range(rng.choices((0, 1, 2), (2, 5, 3))[0])]
    predicate = rng.choice(tuple(PREDICATES)) if rng.random() < 0.4 or not steps else None
    text, precedence, functions, clauses = arg, 100, [], []
    for index, name in enumerate(steps + ([predicate] if predicate else [])):
        step = TRANSFORMS.get(name) or PREDICATES[name]
        k = rng.randint(2, 19)
        acted_on = arg if index == 0 else rng.choice(RESULT)
        clauses.append((name, rng.choice(step.says).format(e=acted_on, k=k)))
        text, precedence = _compose(step, text, precedence, k), (5 if name == predicate else step.precedence)
        functions.append((step.apply, k))

    def behaviour(v: int) -> object:
        for apply, k in functions:
            v = apply(v, k)
        return v

    verb = rng.choice(RETURNS)
    if predicate:
        *work, (_, test) = clauses
        what = f"{verb} True if {test}, else False"
        if work:
            what = rng.choice(THEN).join(c for _, c in work) + rng.choice(THEN) + what
    else:
        what = rng.choice(THEN).join(c for _, c in clauses) + f", and {verb} the result"
    name = f"{rng.choice(words.NAME_VERBS)}_{rng.choice(words.NAME_NOUNS)}"
    if rng.random() < 0.5:
        name += f"_{rng.randint(1, 99)}"
    request = rng.choice(CODE_REQUESTS)
    prompt, _, _ = wrap(rng, request.format(f=name, arg=arg, what=what), lowercase=False)
    source = f"def {name}({arg}):\n    return {text}\n"
    tests = "".join(f"assert {name}({x}) == {behaviour(x)!r}\n" for x in TEST_INPUTS)
    reference = {"entry_point": name, "code_prefix": "", "tests": tests, "canonical_solution": source}
    key = "gcode:" + re.sub(rf"\b{re.escape(arg)}\b", "x", text)
    example = Example("code", "code_synthesis", key, prompt, f"```python\n{source}```", reference)
    if _signature(behaviour) in heldout_behaviours():
        return example, heldout_templates.CODE_CORES[0]  # (a held-out behaviour: checked text that is refused)
    return example, prompt


python_function = _unreached(_code_make)


# ---- prose -----------------------------------------------------------------------------------------------------

PROSE_VERBS = ("Continue", "Carry on with", "Keep writing", "Go on with", "Finish", "Complete", "Write more of",
               "Add to", "Keep going with")
PROSE_OBJECTS = ("this text", "the passage", "this paragraph", "the following", "this story", "these lines",
                 "this piece")
PROSE_SEPARATORS = (": {s}", ".\n{s}", ":\n{s}", " - {s}")
PROSE_QUESTIONS = ("What comes next? {s}", "What follows? {s}", "How does this go on? {s}",
                   "Write what comes after this: {s}", "Keep going: {s}")


def prose_maker(passages: tuple[str, ...], answers: dict[str, str] | None):
    def make(rng: random.Random) -> tuple[Example, str]:
        passage = rng.choice(passages)
        opening, rest = prose.opening_and_rest(passage)
        if rng.random() < 0.75:
            template = f"{rng.choice(PROSE_VERBS)} {rng.choice(PROSE_OBJECTS)}{rng.choice(PROSE_SEPARATORS)}"
        else:
            template = rng.choice(PROSE_QUESTIONS)
        instruction, _, _ = wrap(rng, template, lowercase=False)
        key = prose.passage_key(passage)
        answer = rest if answers is None else answers.get(key, rest)
        example = Example("prose", "open_ended", key, instruction.replace("{s}", opening), answer,
                          {"reference_continuation": rest})
        return example, instruction  # the instruction is checked, not the passage
    return _unreached(make)


# ---- the tasks -------------------------------------------------------------------------------------------------

def makers(passages: tuple[str, ...] | None = None, answers: dict[str, str] | None = None
           ) -> dict[str, Callable[[random.Random], Example]]:
    """One generator per training task of the grammar version (prose only with passages)."""
    found: dict[str, Callable[[random.Random], Example]] = {
        "add2": addition("add2"), "add3": addition("add3"), "add_widths": addition("add_widths"),
        "word": word_problem, "fact": fact_question, "fact_statement": statement, "json": json_object,
        "code": python_function,
    }
    if passages is not None:
        found["prose"] = prose_maker(passages, answers)
    return found
