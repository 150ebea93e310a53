"""benchmarks/mini_sum_digits.py scores a sum's digits place by place, counted from the right."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "mini_sum_digits.py"


def _digit_accuracy():
    spec = importlib.util.spec_from_file_location("mini_sum_digits", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.digit_accuracy


def test_places_are_counted_from_the_right_and_only_where_the_true_sum_has_them():
    answers = [{"task": "add3", "text": "898 + 814 = 1718."},   # true 1712: units wrong
               {"task": "add3", "text": "321 + 217 = 538."},    # right
               {"task": "add3", "text": "100 + 200 = 30."},     # true 300: a digit short
               {"task": "add3", "text": "no sum here"},
               {"task": "add2", "text": "10 + 11 = 21."}]
    result = _digit_accuracy()(answers, "add3")
    assert result["n"] == 4 and result["parsed"] == 3 and result["exact"] == 0.25
    assert result["length_right"] == 2 / 3
    assert result["place_accuracy"] == {"units": 2 / 3, "tens": 2 / 3, "hundreds": 2 / 3, "thousands": 1.0}
