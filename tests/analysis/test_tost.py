"""The TOST equivalence test against a direct scipy computation, its decision rule and the zero-variance rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from canvaslab.analysis.tost import DEGENERATE, paired_equivalence


def test_tost_and_ci_match_a_direct_scipy_computation():
    rng = np.random.default_rng(7)
    d = rng.normal(0.01, 0.04, size=40)
    margin = 0.03
    result = paired_equivalence(d, margin, alpha=0.05, ci_level=0.95)
    n, mean, se = d.size, d.mean(), d.std(ddof=1) / math.sqrt(d.size)
    p_lower = stats.t.sf((mean + margin) / se, n - 1)  # H0: mean <= -margin
    p_upper = stats.t.cdf((mean - margin) / se, n - 1)  # H0: mean >= +margin
    half = stats.t.ppf(0.975, n - 1) * se
    assert result["mean_difference"] == pytest.approx(mean)
    assert result["ci"] == pytest.approx([mean - half, mean + half])
    assert result["p_lower"] == pytest.approx(p_lower) and result["p_upper"] == pytest.approx(p_upper)
    assert result["tost_p"] == pytest.approx(max(p_lower, p_upper))
    assert result["p_two_sided"] == pytest.approx(2 * stats.t.sf(abs(mean) / se, n - 1))
    assert result["verdict"] == ("equivalent" if max(p_lower, p_upper) < 0.05 else "inconclusive")


def test_verdicts_follow_the_decision_rule():
    rng = np.random.default_rng(1)
    assert paired_equivalence(rng.normal(0, 0.01, 200), 0.05)["verdict"] == "equivalent"
    assert paired_equivalence(rng.normal(0.5, 0.01, 200), 0.05)["verdict"] == "different"
    assert paired_equivalence([0.3, -0.3, 0.2], 0.05)["verdict"] == "inconclusive"
    assert paired_equivalence([0.1], 0.05)["verdict"] == "insufficient data"


@pytest.mark.parametrize("value", [0.0, 0.01, 0.2, -1.0])
@pytest.mark.parametrize("n", [2, 5, 400])
def test_zero_variance_is_reported_as_degenerate_never_as_equivalence(value, n):
    """All paired differences equal: the t statistics are undefined, so there is no test to pass."""
    flat = paired_equivalence([value] * n, 0.05)
    assert flat["verdict"] == DEGENERATE == "degenerate: zero variance"
    assert flat["tost_p"] is flat["p_lower"] is flat["p_upper"] is flat["p_two_sided"] is flat["ci"] is None
    assert flat["mean_difference"] == value and flat["sd"] == 0.0 and flat["n_pairs"] == n
