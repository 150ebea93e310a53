"""Reading an answer out of generated text: the final number, the first JSON object, the code.

Generated text is messy (reasoning before the answer, Markdown fences, trailing remarks, a canvas cut
short), so each extractor is tolerant and never raises: ``None`` when there is nothing to read (the code
extractor falls back to the whole text).
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
from fractions import Fraction
from typing import Any

# A minus sign counts only where it cannot be a hyphen: "5-10" ends in 10, "COVID-19" in 19.
_NUMBER = re.compile(r"(?:(?<![\w.])-)?(?:\d[\d,]*(?:\.\d+)?|\.\d+)")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
_ARTICLES = {"a", "an", "the"}
_PUNCTUATION = set(string.punctuation) | {"\u2018", "\u2019", "\u201c", "\u201d", "\u2013", "\u2014"}


def final_number(text: str) -> Fraction | None:
    """The last number in the text, exact: '$1,234.50.' -> 1234.5. Commas, '$' and a final '.' are ignored."""
    matches = _NUMBER.findall(text.replace("\u2212", "-"))
    if not matches:
        return None
    return parse_number(matches[-1])


def first_number(text: str) -> Fraction | None:
    """The first number in the text (for the answer after a '####' marker), same rules as ``final_number``."""
    match = _NUMBER.search(text.replace("\u2212", "-"))
    return None if match is None else parse_number(match.group())


def parse_number(token: str) -> Fraction | None:
    """A number written with optional '$', thousands commas and a trailing '.', as an exact fraction."""
    cleaned = token.strip().replace(",", "").replace("$", "").rstrip(".")
    try:
        return Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None


def first_json_object(text: str) -> dict[str, Any] | None:
    """The first ``{...}`` in the text that parses as a JSON object (prose and fences around it skipped)."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    return None


def code_block(text: str, entry_point: str | None = None) -> str:
    """The code in an answer: the fenced block defining ``entry_point`` if any, else the first fenced
    block (an unclosed fence runs to the end: the canvas may cut it short), else the whole text."""
    blocks = [body for _lang, body in _FENCE.findall(text)]
    if not blocks:
        return text
    if entry_point is not None:
        for body in blocks:
            if defines_function(body, entry_point):
                return body
    return blocks[0]


def defines_function(code: str, name: str) -> bool:
    """Whether the code has a line ``def name(`` (at any indentation)."""
    return re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(name)}\s*\(", code, re.MULTILINE) is not None


def normalize_answer(text: str) -> str:
    """Lowercase, accents and punctuation removed ('1,000' -> '1000'), articles dropped, whitespace
    collapsed: the SQuAD answer normalisation, plus accents ('Brasília' = 'Brasilia')."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    no_accents = "".join(c for c in decomposed if not unicodedata.combining(c))
    no_punctuation = "".join(c for c in no_accents if c not in _PUNCTUATION)
    return " ".join(word for word in no_punctuation.split() if word not in _ARTICLES)
