"""Power of the paired equivalence test (TOST), and the sample size a registered plan asks for.

A pre-registered equivalence study states, before its confirmatory data exist, how many independent units it
needs for a given power at its margin. The power of TOST at a true mean difference ``delta`` with ``n`` paired
units and standard deviation ``sd`` uses the noncentral t distribution for each one-sided test and the usual
lower bound ``P(both reject) >= P(lower rejects) + P(upper rejects) - 1`` (exact when the two tests' rejection
regions cover each other's complement; conservative otherwise). ``sd`` comes from a pilot, whose estimate is
itself uncertain: ``sd_upper_limit`` is the one-sided upper confidence limit of the pilot's sd, the planning
value that keeps the confirmatory study from being underpowered by a lucky pilot.
"""

from __future__ import annotations

import math

from scipy import stats


def tost_power(n: int, sd: float, margin: float, *, alpha: float = 0.05, delta: float = 0.0) -> float:
    """Probability that TOST with ``n`` paired units declares equivalence within ``+-margin``."""
    if n < 2 or sd < 0 or margin <= 0:
        return 0.0
    if sd == 0:
        return 0.0  # identical differences get no test (canvaslab.analysis.tost: 'degenerate'), never equivalence
    df, scale = n - 1, sd / math.sqrt(n)
    critical = stats.t.ppf(1 - alpha, df)
    lower = stats.nct.sf(critical, df, (delta + margin) / scale)  # (mean + margin) / se > t: above -margin
    upper = stats.nct.cdf(-critical, df, (delta - margin) / scale)  # (mean - margin) / se < -t: below +margin
    return float(max(0.0, lower + upper - 1.0))


def units_for_power(sd: float, margin: float, power: float, *, alpha: float = 0.05, at_least: int = 2,
                    at_most: int = 100_000) -> int | None:
    """The fewest paired units (``at_least`` or more) giving TOST ``power`` at a true difference of 0; None when
    even ``at_most`` do not."""
    def enough(n: int) -> bool:
        return tost_power(n, sd, margin, alpha=alpha) >= power

    low = max(2, at_least)
    if enough(low):
        return low
    high = low
    while not enough(high):  # power grows with n: double until enough, then bisect
        if high >= at_most:
            return None
        low, high = high, min(2 * high, at_most)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high


def sd_upper_limit(sd: float, n: int, confidence: float = 0.8) -> float:
    """One-sided upper ``confidence`` limit of a standard deviation estimated from ``n`` values (chi-square)."""
    if n < 2:
        raise ValueError("a standard deviation needs at least 2 values")
    return float(sd * math.sqrt((n - 1) / stats.chi2.ppf(1 - confidence, n - 1)))


def t_test_power(n: int, sd: float, delta: float, *, alpha: float = 0.05) -> float:
    """Probability that the two-sided one-sample t-test on ``n`` paired units rejects 0 at a true mean ``delta``."""
    if n < 2 or sd <= 0:
        return 0.0
    df, noncentrality = n - 1, delta / (sd / math.sqrt(n))
    critical = stats.t.ppf(1 - alpha / 2, df)
    return float(stats.nct.sf(critical, df, noncentrality) + stats.nct.cdf(-critical, df, noncentrality))
