"""Power of the paired equivalence test, checked against simulation; the sample size it asks for."""

import numpy as np
import pytest
from scipy import stats

from canvaslab.analysis.power import sd_upper_limit, t_test_power, tost_power, units_for_power


def _simulated_tost_power(n, sd, margin, alpha=0.05, reps=20_000, seed=0):
    d = np.random.default_rng(seed).normal(0.0, sd, size=(reps, n))
    mean, se = d.mean(axis=1), d.std(axis=1, ddof=1) / np.sqrt(n)
    critical = stats.t.ppf(1 - alpha, n - 1)
    return float(np.mean(((mean + margin) / se > critical) & ((mean - margin) / se < -critical)))


@pytest.mark.parametrize("n, sd", [(12, 0.3), (30, 0.4), (60, 0.5)])
def test_tost_power_agrees_with_simulation(n, sd):
    assert tost_power(n, sd, 0.25) == pytest.approx(_simulated_tost_power(n, sd, 0.25), abs=0.02)


def test_identical_differences_give_no_power_since_they_get_no_test():
    assert tost_power(10, 0.0, 0.25) == 0.0


def test_units_for_power_is_the_fewest_that_reach_the_power():
    for sd in (0.3, 1.0, 1.44):
        n = units_for_power(sd, 0.25, 0.9, at_least=5)
        assert tost_power(n, sd, 0.25) >= 0.9 > tost_power(n - 1, sd, 0.25)
    assert units_for_power(1e6, 0.25, 0.9) is None


def test_the_sds_upper_limit_covers_the_true_sd_at_its_confidence():
    rng = np.random.default_rng(1)
    samples = rng.normal(0.0, 1.0, size=(4000, 10))
    covered = np.mean([sd_upper_limit(float(s.std(ddof=1)), 10, 0.8) >= 1.0 for s in samples])
    assert covered == pytest.approx(0.8, abs=0.03)


def test_t_test_power_matches_its_size_and_grows_with_n():
    assert t_test_power(200, 1.0, 0.0) == pytest.approx(0.05, abs=0.005)
    assert t_test_power(10, 1.0, 0.5) < t_test_power(40, 1.0, 0.5)
