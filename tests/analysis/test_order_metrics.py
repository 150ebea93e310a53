"""Commit-order measures against scipy, sklearn, brute force and planted traces (issue 4, point 6)."""

from __future__ import annotations

import hashlib
import itertools
import math

import numpy as np
import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import kendalltau
from sklearn.metrics import roc_auc_score
from typer.testing import CliRunner

from canvaslab.analysis.order_metrics import (
    BLOCK_BINS,
    compute_order_metrics,
    measure_generation,
)
from canvaslab.errors import CanvaslabError
from canvaslab.capture.commit_trace import AcceptCall, GenerationTrace, write_traces


def trace_from_commits(
    commits, content=None, *, gid="g", regime="r", prompt="p", seed=0, correct=None, entropy=None
) -> GenerationTrace:
    """A monotone trace whose position p is first accepted on call commits[p] (-1: never).

    ``entropy(call, position)`` gives the planted entropies (default 0).
    """
    width = len(commits)
    n_calls = max(max(commits) + 1, 1)
    entropy = entropy or (lambda call, position: 0.0)
    calls = [
        AcceptCall(
            step=n_calls - call,
            accepted=[p for p, c in enumerate(commits) if 0 <= c <= call],
            entropy=[float(entropy(call, p)) for p in range(width)],
        )
        for call in range(n_calls)
    ]
    content = [True] * width if content is None else [bool(c) for c in content]
    return GenerationTrace(gid, regime, prompt, seed, 48, content, calls, correct)


def brute_force_tau_b(x, y) -> float:
    """Kendall tau_b from its definition: (concordant - discordant) / sqrt((n0 - ties_x)(n0 - ties_y))."""
    concordant = discordant = ties_x = ties_y = pairs = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        pairs += 1
        dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
        ties_x += dx == 0
        ties_y += dy == 0
        concordant += dx * dy > 0
        discordant += dx * dy < 0
    return (concordant - discordant) / math.sqrt((pairs - ties_x) * (pairs - ties_y))


# ---------------------------------------------------------------- order


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-1, 6), st.booleans()), min_size=2, max_size=40),
)
def test_tau_b_equals_scipy_and_brute_force(cells):
    commits = [c for c, _ in cells]
    content = [flag for _, flag in cells]
    measures = measure_generation(trace_from_commits(commits, content))
    keep = [p for p, (c, flag) in enumerate(cells) if flag and c >= 0]
    calls, positions = np.array([commits[p] for p in keep]), np.array(keep)
    if len(keep) < 2 or len(set(calls)) < 2:
        assert measures.tau_b is None and "tau_b" in measures.undefined
        return
    assert measures.tau_b == pytest.approx(kendalltau(calls, positions).statistic, abs=1e-12)
    assert measures.tau_b == pytest.approx(brute_force_tau_b(calls, positions), abs=1e-12)
    for size in BLOCK_BINS:
        bins = positions // size
        expected = None if len(set(bins)) < 2 else brute_force_tau_b(calls, bins)
        assert measures.token_block_tau[size] == pytest.approx(expected, abs=1e-12)
        # bin level: each non-empty bin's mean commit call against the bin's index
        index = sorted(set(bins))
        means = [np.mean(calls[bins == b]) for b in index]
        defined = len(index) >= 2 and len(set(means)) >= 2
        expected = brute_force_tau_b(np.array(means), np.array(index)) if defined else None
        assert measures.block_tau[size] == pytest.approx(expected, abs=1e-12)


def test_commit_call_is_the_first_acceptance_when_positions_drop_out():
    rng = np.random.default_rng(3)
    for _ in range(20):
        width, n_calls = 24, 6
        accepted = rng.random((n_calls, width)) < 0.4  # not monotone: positions come and go
        calls = [AcceptCall(i, np.flatnonzero(row).tolist(), [0.0] * width) for i, row in enumerate(accepted)]
        trace = GenerationTrace("g", "r", "p", 0, 48, [True] * width, calls, None)
        ever = [p for p in range(width) if accepted[:, p].any()]
        first = {p: next(i for i in range(n_calls) if accepted[i, p]) for p in ever}
        x, y = np.array(list(first.values())), np.array(list(first))
        assert measure_generation(trace).tau_b == pytest.approx(brute_force_tau_b(x, y), abs=1e-12)
        assert measure_generation(trace).never_accepted == width - len(first)


def test_strict_left_to_right_gives_one_even_with_eos_committed_first():
    commits = list(range(20)) + [0] * 12  # 12 trailing EOS/pad positions, all accepted on call 0
    content = [True] * 20 + [False] * 12
    measures = measure_generation(trace_from_commits(commits, content))
    assert measures.tau_b == 1.0
    assert measures.tokens_per_call == 1.0 and measures.same_call_fraction == 0.0
    assert measure_generation(trace_from_commits(commits)).tau_b < 0.6  # why the content mask matters


def test_block_sequential_process_reproduces_the_control():
    commits = [p // 16 for p in range(256)]
    measures = measure_generation(trace_from_commits(commits))
    expected = kendalltau(np.arange(256) // 16, np.arange(256)).statistic
    assert measures.tau_b == pytest.approx(measures.control_tau, abs=1e-12)
    assert measures.control_tau == pytest.approx(expected, abs=1e-12)
    assert 0.9 < measures.control_tau < 1.0
    assert measures.token_block_tau[16] == 1.0 and measures.tokens_per_call == 16.0


def test_one_call_traces_give_null_with_a_reason():
    measures = measure_generation(trace_from_commits([0] * 40))
    assert measures.tau_b is None
    assert measures.undefined["tau_b"] == "all content positions committed in one call"
    assert all(measures.block_tau[size] is None for size in BLOCK_BINS)
    assert all(measures.token_block_tau[size] is None for size in BLOCK_BINS)
    assert measures.undefined["block_tau_4"] == "all bins have the same mean commit call"
    assert measures.same_call_fraction == 1.0 and measures.tokens_per_call == 40.0
    single = measure_generation(trace_from_commits([0, 1, 2], content=[True, False, False]))
    assert single.tau_b is None and single.undefined["tau_b"] == "fewer than 2 committed content positions"
    assert single.same_call_fraction is None and single.tokens_per_call == 1.0

    pair = [trace_from_commits([0] * 40, gid="a"), trace_from_commits([0] * 40, gid="b")]
    metrics = compute_order_metrics(pair)
    regime = metrics["regimes"]["r"]
    assert regime["tau_b"] is None and regime["tau_b_ci"] is None
    one_call = "all content positions committed in one call"
    assert regime["undefined"]["tau_b"] == {"n": 2, "reasons": {one_call: 2}}
    assert regime["null_reasons"]["tau_b"] == "undefined in every generation"


def ties_only_tau_b(n_items: int, group: int) -> float:
    """tau_b of (i // group, i) for i < n_items: no discordant pair, ``group``-sized ties in x only."""
    pairs = n_items * (n_items - 1) / 2
    ties = (n_items // group) * group * (group - 1) / 2
    return math.sqrt((pairs - ties) / pairs)


def test_block_tau_of_a_strictly_left_to_right_process_is_one_at_every_bin_size():
    measures = measure_generation(trace_from_commits(list(range(256))))
    assert measures.block_tau == pytest.approx({size: 1.0 for size in BLOCK_BINS}, abs=1e-12)
    # the token-level measure falls with bin size on the same process (why it is not the paper's)
    token = [measures.token_block_tau[size] for size in BLOCK_BINS]
    assert all(a > b for a, b in zip(token, token[1:])) and token[0] > 0.99 and token[-1] < 0.87  # 0.994 -> 0.868


def test_block_tau_reaches_one_exactly_at_16_for_a_block_autoregressive_process():
    """Block k of 16 positions all committed on call k: bins of 16 and more hold whole blocks, so their
    mean calls strictly increase (tau 1); bins of 4 (8) share a block's call four (two) at a time, tied."""
    measures = measure_generation(trace_from_commits([p // 16 for p in range(256)]))
    assert measures.block_tau[4] == pytest.approx(ties_only_tau_b(64, 4), abs=1e-12)  # 0.976
    assert measures.block_tau[8] == pytest.approx(ties_only_tau_b(32, 2), abs=1e-12)  # 0.984
    assert [measures.block_tau[size] for size in (16, 32, 64)] == pytest.approx([1, 1, 1], abs=1e-12)
    assert measures.control_block_tau == measures.block_tau  # the control is this very process

    # Random order inside each block (block k on calls 16k..16k+15): bins below 16 split a block and
    # their means fall in random order inside it (pairs across blocks stay concordant: tau near
    # 1920/2016 at 4 and 480/496 at 8); from 16 on, bins are ordered by block. 1 is reached exactly at 16.
    rng = np.random.default_rng(0)
    commits = [16 * (p // 16) + int(rng.integers(16)) for p in range(256)]
    shuffled = measure_generation(trace_from_commits(commits))
    assert 0.9 < shuffled.block_tau[4] < 1 and 0.9 < shuffled.block_tau[8] < 1
    assert [shuffled.block_tau[size] for size in (16, 32, 64)] == pytest.approx([1, 1, 1], abs=1e-12)


def test_block_tau_of_a_partially_ordered_process_rises_with_bin_size():
    """A drift to the right plus large per-position noise (token tau about 0.5): averaging a bin's calls
    cancels the noise, so order shows more clearly at coarser bins, as seed 003 reports."""
    rng = np.random.default_rng(1)
    traces = []
    for index in range(40):
        commits = np.clip(np.round(np.arange(256) / 16 + rng.normal(0, 5, 256)), 0, None).astype(int)
        traces.append(trace_from_commits(commits.tolist(), gid=str(index), prompt=str(index % 10), seed=index))
    regime = compute_order_metrics(traces, n_bootstrap=200)["regimes"]["r"]
    rising = [regime["block_tau"][str(size)] for size in BLOCK_BINS]
    assert all(a < b for a, b in zip(rising, rising[1:])) and rising[-1] - rising[0] > 0.2  # 0.71 -> 1.0
    assert 0.3 < regime["tau_b"] < 0.6
    for size in BLOCK_BINS:
        low, high = regime["block_tau_ci"][str(size)]
        assert low <= regime["block_tau"][str(size)] <= high
    token = [regime["token_block_tau"][str(size)] for size in BLOCK_BINS]
    assert max(token) - min(token) < 0.1  # flat: the token-level measure does not see the coarse order


def test_block_tau_uses_nonempty_bins_and_is_null_with_fewer_than_two():
    # positions 0-3 and 8-9 committed (4-7 never accepted): bins of 4 are {0..3} and {8, 9}; bin 1 is empty
    measures = measure_generation(trace_from_commits([1, 0, 1, 0, -1, -1, -1, -1, 2, 3]))
    assert measures.block_tau[4] == pytest.approx(1.0, abs=1e-12)  # means 0.5 (bin 0) and 2.5 (bin 2)
    assert measures.block_tau[16] is None
    assert measures.undefined["block_tau_16"] == "fewer than 2 non-empty bins of 16"


# ---------------------------------------------------------------- batching, un-accepts, entropy


def planted_unaccept_trace() -> GenerationTrace:
    """Content 0..3; 4 (never accepted) and 5 are EOS. Content un-accepts: 0 on call 0->1, 1 and 2 on 2->3."""
    accepted = [[0, 1, 5], [1, 2], [0, 1, 2, 3, 5], [0, 3, 5], [0, 1, 2, 3, 5]]
    entropy = [[0.1 * (call + 1) + 0.01 * p for p in range(6)] for call in range(5)]
    calls = [AcceptCall(10 - i, acc, entropy[i]) for i, acc in enumerate(accepted)]
    return GenerationTrace("planted", "r", "p", 0, 10, [True] * 4 + [False] * 2, calls, None)


def test_unaccepts_are_counted_exactly_over_content_positions():
    measures = measure_generation(planted_unaccept_trace())
    assert measures.unaccept_events == 3  # position 5 (EOS) dropping out on call 0->1 is not counted
    assert not measures.monotone and measures.never_accepted == 0 and measures.accept_calls == 5
    # commit calls 0, 0, 1, 2: the entropy each position had on that call
    assert measures.commit_entropy == pytest.approx(np.mean([0.10, 0.11, 0.22, 0.33]))

    monotone = trace_from_commits([0, 1, 2, 3], gid="mono")
    metrics = compute_order_metrics([planted_unaccept_trace(), monotone], n_bootstrap=0)
    regime = metrics["regimes"]["r"]
    assert regime["unaccept_events_total"] == 3 and regime["unaccept_events"] == 1.5
    assert regime["monotone_fraction"] == 0.5 and regime["tau_b_monotone"] == 1.0
    assert regime["accept_calls"] == {"mean": 4.5, "min": 4, "max": 5, "budget": [10, 48]}


def test_tokens_per_call_and_same_call_fraction_on_a_planted_trace():
    # call 1 first-accepts only the EOS position, so it is not a content call
    commits = [0, 0, 0, 2, 2, 3, 1]
    measures = measure_generation(trace_from_commits(commits, content=[True] * 6 + [False]))
    assert measures.tokens_per_call == 2.0  # 6 content positions over calls 0, 2, 3
    assert measures.same_call_fraction == pytest.approx((3 + 1) / 15)


def test_never_accepted_content_positions_are_excluded_and_counted():
    measures = measure_generation(trace_from_commits([0, -1, 1, -1, 2]))
    assert measures.never_accepted == 2 and measures.tau_b == 1.0 and measures.tokens_per_call == 1.0


# ---------------------------------------------------------------- regimes, bootstrap, AUROC


def study(n_prompts=8, seeds=3, regimes=("math", "factual"), rng_seed=0) -> list[GenerationTrace]:
    """A small study: per generation a noisy left-to-right order, planted entropy and correctness."""
    rng = np.random.default_rng(rng_seed)
    traces = []
    for regime, prompt, seed in itertools.product(regimes, range(n_prompts), range(seeds)):
        width = 48
        commits = np.clip(np.arange(width) // 6 + rng.integers(-2, 3, width), 0, None)
        level = rng.random() * 0.01
        correct = bool(level < 0.006) if regime == "math" else bool(rng.random() < 0.5)
        traces.append(trace_from_commits(
            commits.tolist(),
            gid=f"{regime}-{prompt}-{seed}",
            regime=regime,
            prompt=f"{regime}-{prompt}",
            seed=seed,
            correct=correct,
            entropy=lambda call, p, level=level: level,
        ))
    return traces


def test_regime_value_is_the_mean_of_generation_values():
    traces = study()
    metrics = compute_order_metrics(traces, n_bootstrap=0)
    math_rows = [measure_generation(t) for t in traces if t.regime == "math"]
    regime = metrics["regimes"]["math"]
    assert regime["tau_b"] == pytest.approx(np.mean([m.tau_b for m in math_rows]))
    assert regime["block_tau"]["16"] == pytest.approx(np.mean([m.block_tau[16] for m in math_rows]))
    assert regime["token_block_tau"]["16"] == pytest.approx(np.mean([m.token_block_tau[16] for m in math_rows]))
    assert regime["n_generations"] == 24 and regime["n_prompts"] == 8
    assert regime["tau_b_ci"] is None and "bootstrap disabled" in regime["null_reasons"]["tau_b_ci"]
    assert list(metrics["regimes"]) == ["math", "factual"]


def test_bootstrap_cis_contain_the_estimate_and_are_reproducible():
    traces = study()
    first = compute_order_metrics(traces, n_bootstrap=100, seed=7)
    again = compute_order_metrics(traces, n_bootstrap=100, seed=7)
    other = compute_order_metrics(traces, n_bootstrap=100, seed=8)
    for name, regime in first["regimes"].items():
        low, high = regime["tau_b_ci"]
        assert low <= regime["tau_b"] <= high and low < high
        low, high = regime["auroc_ci"]
        assert low <= regime["auroc"] <= high
        assert regime["tau_b_ci"] == again["regimes"][name]["tau_b_ci"]
        assert regime["auroc_ci"] == again["regimes"][name]["auroc_ci"]
        assert regime["tau_b_ci"] != other["regimes"][name]["tau_b_ci"]
    # a regime's CIs do not depend on the regimes before it in the file
    alone = compute_order_metrics([t for t in traces if t.regime == "factual"], n_bootstrap=100, seed=7)
    assert alone["regimes"]["factual"]["tau_b_ci"] == first["regimes"]["factual"]["tau_b_ci"]


def test_bootstrap_keeps_a_prompts_generations_together():
    """Identical generations within a prompt, different across prompts: resampling generations one by one
    would narrow the CI; resampling prompts gives the CI of n_prompts values."""
    traces = []
    for prompt in range(2):
        commits = list(range(10)) if prompt == 0 else [0] * 5 + list(range(5))
        traces += [
            trace_from_commits(commits, gid=f"{prompt}-{s}", prompt=str(prompt), seed=s) for s in range(20)
        ]
    low, high = compute_order_metrics(traces, n_bootstrap=400)["regimes"]["r"]["tau_b_ci"]
    values = sorted({measure_generation(t).tau_b for t in traces})
    assert low == pytest.approx(values[0]) and high == pytest.approx(values[1])


def test_auroc_matches_sklearn_and_is_null_for_one_class():
    traces = study()
    metrics = compute_order_metrics(traces, n_bootstrap=50)
    math_rows = [measure_generation(t) for t in traces if t.regime == "math"]
    labels = [m.correct for m in math_rows]
    expected = roc_auc_score(labels, [-m.commit_entropy for m in math_rows])
    regime = metrics["regimes"]["math"]
    assert regime["auroc"] == pytest.approx(expected) and regime["auroc"] > 0.9
    assert regime["accuracy"] == pytest.approx(np.mean(labels))
    pooled = metrics["pooled_auroc"]
    assert "Simpson" in pooled["note"] and pooled["n"] == 48

    all_correct = [trace_from_commits([0, 1], gid=str(i), prompt=str(i), correct=True) for i in range(4)]
    regime = compute_order_metrics(all_correct, n_bootstrap=50)["regimes"]["r"]
    assert regime["auroc"] is None and regime["auroc_ci"] is None
    assert regime["null_reasons"]["auroc"] == "only one class (all correct)"
    assert regime["accuracy"] == 1.0

    unscored = compute_order_metrics([trace_from_commits([0, 1])], n_bootstrap=10)["regimes"]["r"]
    assert unscored["accuracy"] is None and "correct is null" in unscored["null_reasons"]["auroc"]


def scored_regime(regime, accuracy, level, rng, n=24, informative=True):
    """Generations of one regime around entropy ``level``; informative: correct ones are the most confident."""
    entropy = level * (1 + rng.random(n))
    order = np.argsort(entropy)
    correct = np.zeros(n, dtype=bool)
    correct[order[: round(accuracy * n)]] = True
    if not informative:
        correct = rng.permutation(correct)
    return [
        trace_from_commits([0, 1], gid=f"{regime}-{i}", regime=regime, prompt=f"{regime}-{i // 2}", seed=i % 2,
                           correct=bool(c), entropy=lambda call, p, e=e: e)
        for i, (e, c) in enumerate(zip(entropy, correct))
    ]


def test_simpson_flag_fires_when_pooling_reverses_the_within_regime_direction():
    """Both regimes: confident = correct (AUROC 1). The accurate regime runs at 10x the entropy of the
    inaccurate one, so pooled, confidence points to the wrong answers: AUROC below 0.5."""
    rng = np.random.default_rng(0)
    traces = scored_regime("easy", 0.9, 0.01, rng) + scored_regime("hard", 0.1, 0.001, rng)
    metrics = compute_order_metrics(traces, n_bootstrap=100)
    pooled = metrics["pooled_auroc"]
    assert [metrics["regimes"][r]["auroc"] for r in ("easy", "hard")] == [1.0, 1.0]
    assert pooled["value"] < 0.5 and pooled["simpson_prone"] is True
    assert pooled["simpson_criteria"]["opposite_side_of_chance"] is True
    assert pooled["simpson_criteria"]["outside_every_within_ci"] is True


def test_simpson_flag_stays_down_when_pooling_agrees_with_the_regimes():
    rng = np.random.default_rng(0)
    traces = scored_regime("a", 0.5, 0.01, rng) + scored_regime("b", 0.5, 0.01, rng)
    pooled = compute_order_metrics(traces, n_bootstrap=100)["pooled_auroc"]
    assert pooled["value"] > 0.9 and pooled["simpson_prone"] is False
    assert pooled["simpson_criteria"] == {
        "opposite_side_of_chance": False, "outside_every_within_ci": False,
        "regimes_compared": ["a", "b"], "regimes_off_chance": ["a", "b"],
    }


def test_simpson_flag_ignores_a_regime_at_chance_as_in_seed_003():
    """Math informative, factual at chance (its CI holds 0.5), pooled below 0.5: seed 003's case. The
    pooled value sits inside factual's CI, so only the direction criterion can see it."""
    rng = np.random.default_rng(0)
    traces = scored_regime("math", 0.8, 0.01, rng, n=40) + scored_regime("factual", 0.5, 0.004, rng, n=40,
                                                                         informative=False)
    metrics = compute_order_metrics(traces, n_bootstrap=200)
    low, high = metrics["regimes"]["factual"]["auroc_ci"]
    pooled = metrics["pooled_auroc"]
    assert low < 0.5 < high and metrics["regimes"]["math"]["auroc_ci"][0] > 0.5
    assert low < pooled["value"] < min(0.5, metrics["regimes"]["factual"]["auroc"])  # 0.404 < 0.43, as 0.437 < 0.471
    assert pooled["simpson_prone"] is True
    assert pooled["simpson_criteria"]["outside_every_within_ci"] is False
    assert pooled["simpson_criteria"]["regimes_off_chance"] == ["math"]


def test_simpson_flag_is_null_with_fewer_than_two_regimes():
    rng = np.random.default_rng(0)
    pooled = compute_order_metrics(scored_regime("a", 0.5, 0.01, rng), n_bootstrap=50)["pooled_auroc"]
    assert pooled["value"] == 1.0 and pooled["simpson_prone"] is None
    assert pooled["simpson_reason"] == "fewer than 2 regimes with a within-regime AUROC"


def test_reliability_gives_accuracy_by_entropy_tertile():
    entropies = [0.001, 0.002, 0.003, 0.004, 0.005, 0.006]
    correct = [True, True, True, False, False, False]
    traces = [
        trace_from_commits([0, 1], gid=str(i), prompt=str(i), correct=c, entropy=lambda call, p, e=e: e)
        for i, (e, c) in enumerate(zip(entropies, correct))
    ]
    curve = compute_order_metrics(traces, n_bootstrap=0)["regimes"]["r"]["reliability"]
    assert [row["n"] for row in curve] == [2, 2, 2]
    assert [row["accuracy"] for row in curve] == [1.0, 0.5, 0.0]
    assert curve[0]["entropy_range"] == pytest.approx([0.001, 0.002])


# ---------------------------------------------------------------- file and command


def test_a_trace_file_gives_the_same_numbers_and_names_its_source(tmp_path):
    traces = study(n_prompts=3, seeds=2)
    path = write_traces(tmp_path / "traces.jsonl", traces)
    from_file = compute_order_metrics(path, n_bootstrap=50)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert from_file["source"] == {"path": str(path), "sha256": digest}
    assert from_file["regimes"] == compute_order_metrics(traces, n_bootstrap=50)["regimes"]


def command_app() -> typer.Typer:
    """The command on an app of its own (a group, so the command name is needed as in ``canvaslab``)."""
    from canvaslab.cli.order_metrics import order_metrics_command

    local = typer.Typer()
    local.callback()(lambda: None)
    local.command("order-metrics")(order_metrics_command)
    return local


def test_command_writes_order_metrics_json_and_prints_the_table(tmp_path):
    path = write_traces(tmp_path / "traces.jsonl", study(n_prompts=3, seeds=2))
    args = ["order-metrics", str(path), "--out", str(tmp_path / "out"), "--bootstrap", "30", "--seed", "1"]
    result = CliRunner().invoke(command_app(), args)
    assert result.exit_code == 0, result.output
    written = (tmp_path / "out" / "order_metrics.json").read_text()
    assert '"regimes"' in written and '"bootstrap_seed": 1' in written
    assert "math" in result.output and "factual" in result.output and "Simpson" in result.output


def test_command_reports_a_malformed_file_as_a_canvaslab_error(tmp_path):
    path = tmp_path / "traces.jsonl"
    path.write_text("{}\n")
    result = CliRunner().invoke(command_app(), ["order-metrics", str(path), "--out", str(tmp_path)])
    assert isinstance(result.exception, CanvaslabError) and "line 1" in str(result.exception)
    with pytest.raises(CanvaslabError):
        compute_order_metrics([], n_bootstrap=0)
