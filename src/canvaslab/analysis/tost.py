"""Paired differences: mean, t confidence interval, and an equivalence test (TOST).

A study that hopes to show "no difference" cannot rest on a non-significant t-test: too few pairs
would "show" equivalence too. TOST (two one-sided tests) turns the claim around: the difference is
declared inside ``+-margin`` only if both "mean <= -margin" and "mean >= +margin" are rejected, so a
small or noisy sample ends "inconclusive" rather than "equivalent". The margin must be fixed before
the data are seen (the noise study's plan holds it).

When every difference is the same (zero variance, common when a measure is all 0 or all 1 in both
classes) the t statistics are undefined: there is no test, so nothing is concluded. The verdict is
``degenerate: zero variance`` with no p-values and no interval, whatever the mean and however many
pairs; it never counts as equivalence (a study of four identical zeros has not shown anything).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from scipy import stats

DEGENERATE = "degenerate: zero variance"
VERDICTS = ("equivalent", "different", "inconclusive", "insufficient data", DEGENERATE)


def _t_tests(d: np.ndarray, margin: float, ci_level: float) -> tuple[float, float, float, list[float]]:
    p_lower = stats.ttest_1samp(d, -margin, alternative="greater").pvalue
    p_upper = stats.ttest_1samp(d, margin, alternative="less").pvalue
    two_sided = stats.ttest_1samp(d, 0.0)
    ci = two_sided.confidence_interval(confidence_level=ci_level)
    return float(p_lower), float(p_upper), float(two_sided.pvalue), [float(ci.low), float(ci.high)]


def paired_equivalence(differences: Sequence[float], margin: float, *, alpha: float = 0.05,
                       ci_level: float = 0.95) -> dict[str, Any]:
    """Mean paired difference with a ``ci_level`` t CI, TOST p-value against ``+-margin`` and a verdict.

    Verdict: ``equivalent`` if the TOST p-value (the larger one-sided p) is below ``alpha``; otherwise
    ``different`` if the two-sided t-test p-value is below ``alpha``; otherwise ``inconclusive``; with
    fewer than 2 pairs, ``insufficient data``; with every difference equal, ``degenerate: zero variance``
    (p-values and CI null).
    """
    d = np.asarray(differences, dtype=np.float64)
    result: dict[str, Any] = {"n_pairs": int(d.size), "margin": margin, "mean_difference": None, "sd": None,
                              "ci": None, "ci_level": ci_level, "p_lower": None, "p_upper": None, "tost_p": None,
                              "p_two_sided": None, "verdict": "insufficient data"}
    if d.size < 2:
        if d.size == 1:
            result["mean_difference"] = float(d[0])
        return result
    if np.all(d == d[0]):  # compared exactly: a rounded mean can give equal values an sd of 1e-18
        result.update(mean_difference=float(d[0]), sd=0.0, verdict=DEGENERATE)
        return result
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    result.update(mean_difference=mean, sd=sd)
    p_lower, p_upper, p_two, ci = _t_tests(d, margin, ci_level)
    tost_p = max(p_lower, p_upper)
    verdict = "equivalent" if tost_p < alpha else "different" if p_two < alpha else "inconclusive"
    result.update(ci=ci, p_lower=p_lower, p_upper=p_upper, tost_p=tost_p,
                  p_two_sided=p_two, verdict=verdict)
    return result
