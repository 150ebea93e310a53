"""Scorers: was a generated answer correct? ``score(probe, text)`` -> True, False, or None (not scored).

Each regime has one rule, kept deliberately simple so correctness means the same thing for every model
and sampler setting (the commit-order study relates it to commit confidence, within regime):

- math: the answer's number equals the GSM8K number. The answer's number is the first number after
  the last '####' when the text has one (the format the prompt asks for), else the last number in the
  text. Exact comparison of rationals; '$', thousands commas and a trailing '.' are ignored.
- factual: after normalisation (lowercase, no accents, punctuation or articles, single spaces), some
  accepted answer occurs in the generated answer as a whole-word run. Lenient by design: an answer
  that names several candidates counts as correct if one of them is right.
- json: the first JSON object in the text parses, validates against the probe's schema (draft
  2020-12), and every required top-level value is equal, with JSON types respected (true != 1).
- code_completion, code_synthesis: the probe's tests pass against the answer's entry point, the
  answer's code in one jail and the tests in another (``canvaslab.scoring.sandbox``;
  never in this process). Where the sandbox cannot isolate, scoring raises ``SandboxUnavailable``.
  ``score_with_detail`` gives the same verdict and, for code, why (``sandbox_detail``: the sandbox's
  one-line failure, then the first lines of the tests' and the candidate's output, at most
  ``DETAIL_CHARS`` characters).
- open_ended: no scorer; None.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jsonschema

from canvaslab.errors import CanvaslabError
from canvaslab.scoring.probes import extraction
from canvaslab.scoring.probes.probe import CODE_REGIMES, Probe
from canvaslab.scoring.sandbox import SandboxLimits, SandboxResult, run_tests


DETAIL_CHARS = 2000  # the most characters of a code answer's sandbox detail


def score(probe: Probe, generated_text: str, limits: SandboxLimits | None = None) -> bool | None:
    """Judge ``generated_text`` as the answer to ``probe``; ``limits`` only matter for code regimes."""
    if probe.regime in CODE_REGIMES:
        return run_code_tests(probe, generated_text, limits).passed
    if probe.regime == "open_ended":
        return None
    try:
        scorer = _TEXT_SCORERS[probe.regime]
    except KeyError:
        raise CanvaslabError(f"no scorer for regime {probe.regime!r} (probe {probe.probe_id})") from None
    return scorer(probe, generated_text)


def score_with_detail(probe: Probe, generated_text: str,
                      limits: SandboxLimits | None = None) -> tuple[bool | None, str | None]:
    """``score``'s verdict and, for a code regime, the sandbox's detail (``sandbox_detail``); None for the rest."""
    if probe.regime in CODE_REGIMES:
        result = run_code_tests(probe, generated_text, limits)
        return result.passed, sandbox_detail(result)
    return score(probe, generated_text, limits), None


def sandbox_detail(result: SandboxResult, max_chars: int = DETAIL_CHARS) -> str:
    """Why a sandbox run passed or failed, in at most ``max_chars`` characters: the verdict line (the failure,
    with the time limit where it was reached), then the first lines of the tests' output (a failing test's
    traceback) and of the candidate's output (what the answer printed, its own traceback)."""
    if result.passed:
        head = f"passed ({result.calls} call{'' if result.calls == 1 else 's'} of the answer)"
    else:
        head = f"failed: {result.failure or 'no reason given'}" + (" (timed out)" if result.timed_out
                                                                    and "time limit" not in result.failure else "")
    parts = [head]
    for label, output in (("tests' output", result.tests_output), ("answer's output", result.candidate_output)):
        if output.strip():
            parts.append(f"{label}:\n{output.strip()}")
    text = "\n".join(parts)
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def score_math(probe: Probe, generated_text: str) -> bool:
    """The answer's final number equals the GSM8K answer."""
    expected = extraction.parse_number(probe.reference["answer"])
    _, marker, after = generated_text.rpartition("####")
    number = extraction.first_number(after) if marker else None
    if number is None:
        number = extraction.final_number(generated_text)
    return number is not None and number == expected


def score_factual(probe: Probe, generated_text: str) -> bool:
    """Some accepted answer, normalised, occurs in the normalised answer as whole words."""
    answer = f" {extraction.normalize_answer(generated_text)} "
    aliases = (extraction.normalize_answer(alias) for alias in probe.reference["answers"])
    return any(alias and f" {alias} " in answer for alias in aliases)


def score_json(probe: Probe, generated_text: str) -> bool:
    """The first JSON object parses, validates against the schema, and holds the required values."""
    value = extraction.first_json_object(generated_text)
    if value is None:
        return False
    if not jsonschema.Draft202012Validator(probe.reference["schema"]).is_valid(value):
        return False
    required = probe.reference["required_values"]
    return all(key in value and json_equal(value[key], expected) for key, expected in required.items())


def run_code_tests(probe: Probe, generated_text: str, limits: SandboxLimits | None = None) -> SandboxResult:
    """Run the probe's tests against the answer's code in the sandbox; the full result, for diagnosis.

    The tests' prelude is the probe's code prefix (HumanEval's prompt: trusted, and its helpers are
    used by the tests); the answer's code, prefix included, runs only in the candidate's jail.
    """
    reference = probe.reference
    return run_tests(program_code(probe, generated_text), reference["entry_point"], reference["tests"],
                     prelude=reference.get("code_prefix", ""), limits=limits)


def program_code(probe: Probe, generated_text: str) -> str:
    """The code to test: the answer's code block, after the probe's code prefix (HumanEval's prompt).

    An answer that restates the function (``def entry_point(``) is appended to the prefix, so the
    prefix's imports and helpers stay available and the answer's definition wins; an answer that only
    continues the body is concatenated directly, as in HumanEval's own harness.
    """
    entry_point = probe.reference["entry_point"]
    code = extraction.code_block(generated_text, entry_point)
    prefix = probe.reference.get("code_prefix", "")
    if not prefix:
        return code
    return f"{prefix}\n\n{code}" if extraction.defines_function(code, entry_point) else prefix + code


def json_equal(actual: Any, expected: Any) -> bool:
    """Equality of JSON values, JSON types respected: booleans are not numbers, 1 == 1.0, arrays ordered."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and actual == expected
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        return actual == expected
    if isinstance(expected, dict):
        return isinstance(actual, dict) and actual.keys() == expected.keys() and all(
            json_equal(actual[k], v) for k, v in expected.items()
        )
    if isinstance(expected, list):
        return isinstance(actual, list) and len(actual) == len(expected) and all(
            json_equal(a, e) for a, e in zip(actual, expected)
        )
    return type(actual) is type(expected) and actual == expected


_TEXT_SCORERS: dict[str, Callable[[Probe, str], bool]] = {
    "math": score_math,
    "factual": score_factual,
    "json": score_json,
}
