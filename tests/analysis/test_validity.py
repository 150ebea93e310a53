"""The validity rules: what a statistic's counts allow to be printed, on small synthetic data."""

from __future__ import annotations

import numpy as np
import pytest

from canvaslab.analysis import validity
from canvaslab.analysis.order_metrics import aggregate_order_metrics, measure_generation
from canvaslab.analysis.tost import paired_equivalence
from canvaslab.analysis.validity import Ruling, Support, format_value, rule
from canvaslab.capture.commit_trace import AcceptCall, GenerationTrace


def two_wave_trace(canvas: int, index: int, correct: bool) -> GenerationTrace:
    """Math's shape on a small canvas: the first half commits on call 0, the second on call 1."""
    half = canvas // 2
    entropy = [0.01 * (index + 1)] * canvas
    calls = [AcceptCall(step=2, accepted=list(range(half)), entropy=entropy),
             AcceptCall(step=1, accepted=list(range(canvas)), entropy=entropy)]
    return GenerationTrace(f"g{index}", "math", f"p{index}", 0, 48, [True] * canvas, calls, correct)


def test_no_interval_below_the_minimum_clusters():
    assert not rule(Support(generations=20, clusters=4)).interval
    assert rule(Support(generations=20, clusters=5)).interval


def test_auroc_from_one_wrong_answer_prints_no_interval_and_says_why():
    ruling = rule(Support(generations=20, clusters=20, minority=1, minority_name="wrong answer",
                          resamples=1000, resamples_used=629))
    assert not ruling.interval
    assert "rests on 1 wrong answer (< 5): no interval" in ruling.flags
    assert "bootstrap skipped 371 of 1,000 resamples: no interval" in ruling.flags
    assert format_value(1.0, [1.0, 1.0], ruling, 2) == "1.00"


def test_three_right_answers_print_no_interval():
    ruling = rule(Support(generations=20, clusters=20, minority=3, minority_name="right answer",
                          resamples=1000, resamples_used=1000))
    assert not ruling.interval
    assert ruling.flags == ("rests on 3 right answers (< 5): no interval",)
    assert format_value(0.9608, [0.83, 1.0], ruling, 2) == "0.96"


def test_a_minority_class_from_fewer_than_five_prompts_prints_no_interval():
    """7 wrong answers pass the minority-size rule, but from 3 prompts the bootstrap resamples 3 clusters."""
    support = dict(generations=100, clusters=20, minority=7, minority_name="wrong answer", resamples=1000,
                   resamples_used=964)
    assert rule(Support(**support, minority_clusters=5)).interval
    ruling = rule(Support(**support, minority_clusters=3))
    assert not ruling.interval
    assert ruling.flags == ("the wrong answers come from 3 prompts (< 5): no interval",)


def test_the_auroc_support_counts_the_prompts_of_the_minority_class():
    traces = [two_wave_trace(8, index, correct=index not in (0, 1)) for index in range(12)]
    traces += [GenerationTrace(f"g{index}b", "math", trace.prompt_id, 1, 48, trace.content, trace.calls,
                               trace.correct) for index, trace in enumerate(traces[:2])]
    support = aggregate_order_metrics([measure_generation(t) for t in traces], 200, 0)["regimes"]["math"]["support"]
    assert support["auroc"]["minority"] == 4 and support["auroc"]["minority_clusters"] == 2


def test_a_bootstrap_that_skipped_many_resamples_prints_no_interval():
    assert rule(Support(generations=40, clusters=40, minority=10, resamples=1000, resamples_used=960)).interval
    assert not rule(Support(generations=40, clusters=40, minority=10, resamples=1000, resamples_used=940)).interval


def test_block_tau_over_two_bins_is_a_split_share_never_beside_the_paper():
    support = Support(generations=19, clusters=19, bins=validity.bins_on_canvas(128, 64))
    ruling = rule(support, canvas_length=128, bin_size=64)
    assert support.bins == 2
    assert ruling.reading == validity.SPLIT_SHARE and not ruling.paper
    # 18 of 19 generations +1, one -1: mean tau 17/19
    assert format_value(17 / 19, [0.68, 1.0], ruling, support=support) == "split share 18/19"


def test_answers_that_span_two_bins_make_a_split_share_on_any_canvas():
    """8 bins of 16 on the canvas, but every answer occupies 2 of them: each generation's tau is +1 or -1."""
    assert validity.bins_on_canvas(128, 16) == 8
    entropy = [0.01] * 128
    calls = [AcceptCall(step=2, accepted=list(range(12)), entropy=entropy),
             AcceptCall(step=1, accepted=list(range(128)), entropy=entropy)]
    short = GenerationTrace("g", "code", "p", 0, 48, [p < 20 for p in range(128)], calls, True)
    assert measure_generation(short).block_bins[16] == 2 and measure_generation(short).block_bins[4] == 5
    summary = aggregate_order_metrics([measure_generation(short)], 0)["regimes"]["code"]
    assert summary["support"]["block_tau_16"]["bins"] == 2 and summary["support"]["block_tau_16"]["narrow"] == 1
    assert summary["validity"]["block_tau_16"]["reading"] == validity.SPLIT_SHARE
    every = rule(Support(generations=20, clusters=20, bins=2, narrow=20), canvas_length=128, bin_size=16)
    assert every.reading == validity.SPLIT_SHARE
    some = rule(Support(generations=93, clusters=20, bins=2, narrow=11), canvas_length=128, bin_size=32)
    assert some.reading == validity.VALUE
    assert some.flags == ("11 of 93 generations over fewer than 3 bins, each +1 or -1",)


def test_block_tau_over_one_bin_is_omitted_and_three_bins_is_a_tau():
    assert rule(Support(generations=9, clusters=9, bins=1), canvas_length=64, bin_size=64).reading == validity.OMITTED
    assert format_value(0.5, None, rule(Support(9, 9, bins=1))) == "-"
    assert rule(Support(generations=9, clusters=9, bins=3)).reading == validity.VALUE


def test_paper_comparison_needs_its_canvas_and_bins():
    assert validity.paper_comparable(256, 64) and validity.paper_comparable(256)
    assert not validity.paper_comparable(128, 64)
    assert not validity.paper_comparable(256, 128)
    assert not validity.paper_comparable(None)
    assert rule(Support(20, 20, bins=4), canvas_length=256, bin_size=64).paper
    assert not rule(Support(20, 20, bins=2), canvas_length=128, bin_size=64).paper


def test_zero_variance_is_flagged():
    assert any("zero variance" in flag for flag in rule(Support(10, 10, zero_variance=True)).flags)


def test_tost_equivalent_but_significantly_different_is_flagged_beside_the_verdict():
    rng = np.random.default_rng(0)
    differences = 0.085 + rng.normal(0, 0.15, 113)  # the run of record's shape: inside 0.25, off zero
    effect = paired_equivalence(differences, 0.25)
    assert effect["verdict"] == "equivalent" and effect["p_two_sided"] < 0.05
    flags = validity.effect_flags(effect, unit="prompt")
    assert len(flags) == 1 and flags[0].startswith("equivalent within the margin, yet different from zero")
    assert validity.effect_flags(paired_equivalence(rng.normal(0, 0.15, 113), 0.25)) == []


def test_few_pairs_and_zero_variance_effects_are_flagged():
    assert validity.effect_flags(paired_equivalence([0.1, -0.2, 0.15], 0.25))[0] == "3 pairs < 5: no interval"
    assert validity.effect_flags(paired_equivalence([0.0, 0.0, 0.0], 0.25)) == ["zero variance: no test"]


def test_a_ruling_survives_json():
    ruling = Ruling(reading=validity.SPLIT_SHARE, interval=False, paper=False, flags=("a",))
    assert Ruling.from_dict(ruling.to_dict()) == ruling


def _regime(n_prompts: int, wrong: int, canvas: int = 128) -> dict:
    """A math-like regime: each generation commits its first half on call 0 and its second on call 1."""
    traces = [two_wave_trace(canvas, i, correct=i >= wrong) for i in range(n_prompts)]
    metrics = aggregate_order_metrics([measure_generation(t) for t in traces], n_bootstrap=200)
    return metrics["regimes"]["math"]


def test_order_metrics_carry_their_support_and_rulings():
    summary = _regime(20, wrong=1)
    assert summary["canvas_length"] == 128
    assert summary["support"]["auroc"]["minority"] == 1
    assert summary["support"]["block_tau_64"]["bins"] == 2
    assert summary["support"]["block_tau_64"]["zero_variance"]  # every generation +1
    assert summary["validity"]["block_tau_64"]["reading"] == validity.SPLIT_SHARE
    assert not summary["validity"]["auroc"]["interval"]
    assert summary["auroc_ci"] is not None  # computed and kept in the JSON, never printed


@pytest.mark.parametrize("canvas, paper", [(128, False), (256, True)])
def test_rulings_from_older_summaries_match_the_stored_ones(canvas, paper):
    summary = _regime(6, wrong=2, canvas=canvas)
    derived = validity.regime_rulings({k: v for k, v in summary.items() if k != "support"}, n_bootstrap=200)
    stored = validity.regime_rulings(summary)
    assert derived["auroc"][0].interval == stored["auroc"][0].interval is False
    assert derived["block_tau_64"][0].reading == stored["block_tau_64"][0].reading
    assert stored["tau_b"][0].paper is paper
