"""Factual recall over a fixed synthetic knowledge base of invented countries.

The base is built from its own fixed seed (``KB_SEED``), so it is the same in every training run. Each
country's facts are stated in training ("Tell me about X.") and asked about in many phrasings. The
held-out key is the phrasing alone (attribute, question template, prefix and suffix), not the country: a
held-out prompt asks a fact the model saw, in a combination of question template and wrapping it never saw
for any country. Each template and each wrapping occurs in training in other combinations, so held-out
prompts test the training templates, not new wordings.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from canvaslab.training.tasks.base import TRAIN_ONLY, Example, phrase

KB_SEED = 20260614
KB_SIZE = 120
_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "tr", "st", "kl")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou")
_CODAS = ("", "n", "r", "s", "l", "th", "m")


@dataclass(frozen=True)
class Country:
    name: str
    capital: str
    language: str
    founded: int


def _word(rng: random.Random, syllables: int) -> str:
    parts = [rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables)]
    return ("".join(parts) + rng.choice(_CODAS)).capitalize()


@lru_cache(maxsize=1)
def knowledge_base() -> tuple[Country, ...]:
    """The invented countries: unique names, capitals and languages, founding years 1000-1899."""
    rng, seen, countries = random.Random(KB_SEED), set(), []
    while len(countries) < KB_SIZE:
        name = _word(rng, rng.choice((2, 3))) + rng.choice(("ia", "land", "or", "ania", "stan", "ea"))
        capital, language = _word(rng, 2), _word(rng, 2) + rng.choice(("ic", "ish", "ese"))
        if {name, capital, language} & seen or len({name, capital, language}) < 3:
            continue
        seen |= {name, capital, language}
        countries.append(Country(name, capital, language, rng.randint(1000, 1899)))
    return tuple(countries)


QUESTIONS = {
    "capital": (
        "What is the capital of {c}?", "Which city is the capital of {c}?", "Name the capital of {c}.",
        "What's {c}'s capital city?", "Tell me the capital of {c}.", "capital of {c}?",
        "Where is the seat of government of {c}?", "In which city is {c}'s capital?",
    ),
    "language": (
        "What language do people speak in {c}?", "Which language is spoken in {c}?",
        "What is the language of {c}?", "What do they speak in {c}?", "Name the language of {c}.",
        "language spoken in {c}?", "What's the main language in {c}?", "Which tongue do people in {c} use?",
    ),
    "founded": (
        "When was {c} founded?", "In what year was {c} founded?", "What year was {c} established?",
        "Tell me when {c} was founded.", "founding year of {c}?", "How old is {c}? Give the founding year.",
        "When did {c} come into being?", "Which year was {c} founded in?",
    ),
}
ANSWERS = {
    "capital": "The capital of {c} is {v}.",
    "language": "People in {c} speak {v}.",
    "founded": "{c} was founded in {v}.",
}
STATEMENT_CORES = ("Tell me about {c}.", "What do you know about {c}?", "Describe {c}.", "Give me facts about {c}.")


def statement(rng: random.Random) -> Example:
    """All facts of one country (training only: the key is never held out for statements)."""
    country = rng.choice(knowledge_base())
    prompt, _ = phrase(rng, rng.choice(STATEMENT_CORES).format(c=country.name))
    answer = (f"{country.name} is a country. Its capital is {country.capital}. Its people speak "
              f"{country.language}. It was founded in {country.founded}.")
    return Example("fact_statement", "factual", f"{TRAIN_ONLY}statement", prompt, answer, {})


def question(rng: random.Random) -> Example:
    """One fact asked in one phrasing; the key is the phrasing, so held-out combinations are never trained."""
    country = rng.choice(knowledge_base())
    attribute = rng.choice(tuple(QUESTIONS))
    core_index = rng.randrange(len(QUESTIONS[attribute]))
    prompt, wrapping = phrase(rng, QUESTIONS[attribute][core_index].format(c=country.name))
    value = str(getattr(country, attribute))
    answer = ANSWERS[attribute].format(c=country.name, v=value)
    return Example("fact", "factual", f"fact:{attribute}:{core_index}:{wrapping}", prompt, answer, {"answers": [value]})
