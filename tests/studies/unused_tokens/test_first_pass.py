"""The noise study's first-pass designs (plan schema /3): outcomes with variance, content positions, prompts in
the model's format, analysis per prompt, the decision table, sizing from a pilot, batched invariant runs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from canvaslab.analysis.noise_study import first_pass_conclusion, noise_study_effects, per_prompt_differences, prompt_of
from canvaslab.analysis.power import t_test_power, tost_power
from canvaslab.api import NoiseStudy
from canvaslab.errors import CanvaslabError
from canvaslab.studies.unused_tokens.conditions import enumerate_conditions
from canvaslab.studies.unused_tokens.first_pass import (MIN_PROMPTS, PER_COMPARISON_POWER, achieved_power,
                                                        confirmatory_size, content_positions, first_pass_outcomes)
from canvaslab.studies.unused_tokens.noise_study import run_noise_study
from canvaslab.studies.unused_tokens.plan import PLAN_FILE, load_plan, save_plan


def _logprobs(rows: int = 8, vocab: int = 5, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(rows, vocab, generator=generator), dim=-1)


def test_the_boost_is_the_planted_tokens_log_probability_over_the_no_plant_canvas():
    reference, planted = _logprobs(seed=1), _logprobs(seed=2)
    measured = first_pass_outcomes(planted, reference, positions=[3, 6], planted=[4, 0])
    assert measured["boost"] == pytest.approx([float(planted[3, 4] - reference[3, 4]),
                                               float(planted[6, 0] - reference[6, 0])])


def test_neighbour_divergence_is_zero_where_nothing_moved_and_skips_planted_and_outside_positions():
    reference = _logprobs()
    moved = reference.clone()
    moved[5] = _logprobs(seed=9)[5]  # only position 5 changes
    measured = first_pass_outcomes(moved, reference, positions=[0, 7], planted=[1, 1], radius=2)
    assert measured["neighbour_kl"] == [pytest.approx(0.0, abs=1e-7), pytest.approx(
        float((moved[5].exp() * (moved[5] - reference[5])).sum()) / 2)]  # 7's neighbours inside: 5 and 6
    alone = first_pass_outcomes(reference, reference, positions=[0, 1], planted=[1, 1], radius=1)
    # position 0's only neighbour (1) is planted: no value; position 1's unplanted neighbour (2) did not move
    assert alone["neighbour_kl"] == [None, pytest.approx(0.0, abs=1e-7)]
    none_left = first_pass_outcomes(_logprobs(rows=2), _logprobs(rows=2), positions=[0, 1], planted=[1, 1], radius=2)
    assert none_left["neighbour_kl"] == [None, None]


def test_content_positions_are_those_predicted_as_ordinary_tokens():
    logprobs = torch.full((4, 6), -10.0)
    for position, token in enumerate([0, 3, 5, 3]):
        logprobs[position, token] = 0.0
    positions, special_share = content_positions(logprobs, not_content={0, 5})
    assert positions == [1, 3] and special_share == 0.5


def _effect(name: str, mean: float | None, verdict: str, half_width: float = 0.2) -> dict:
    ci = None if mean is None or verdict == "insufficient data" else [mean - half_width, mean + half_width]
    return {"comparison": name, "outcome": "planted_logprob_boost", "mean_difference": mean, "verdict": verdict,
            "ci": ci, "margin": 0.25}


@pytest.mark.parametrize("random_, rare, answer", [
    ((-1.0, "different"), (-1.0, "different"), "yes"),
    ((0.01, "equivalent"), (-0.01, "equivalent"), "no"),
    ((-1.0, "different"), (0.0, "equivalent"), "like rare tokens"),
    ((0.0, "equivalent"), (-1.0, "different"), "no"),
    ((1.0, "different"), (0.0, "equivalent"), "no"),
    ((1.0, "different"), (-1.0, "different"), "between the controls"),
    ((-1.0, "different"), (-0.5, "inconclusive"), "inconclusive"),
    ((-1.0, "different"), (None, "insufficient data"), "inconclusive"),
    # significant, but the interval reaches inside the margin: smaller than the smallest effect of interest
    ((-0.3, "different"), (-1.0, "different"), "inconclusive"),
])
def test_the_decision_table_answers_every_pattern_of_the_two_comparisons(random_, rare, answer):
    effects = [_effect(name, *pattern) for name, pattern in (("unused - random", random_), ("unused - rare", rare))]
    assert first_pass_conclusion(effects, "planted_logprob_boost")["answer"] == answer


def _record(prompt: str, seed: int, token_class: str, boost: float) -> dict:
    return {"cell_id": f"{prompt}/s{seed}/b1/n1/content", "token_class": token_class,
            "outcomes": {"planted_logprob_boost": boost}}


def test_the_unit_of_analysis_is_the_prompt_and_ids_may_hold_slashes():
    records = [_record("mini/math/7", seed, cls, boost) for seed in (0, 1)
               for cls, boost in (("unused", 1.0 + seed), ("random", 0.0))]
    cells = {r["cell_id"]: {} for r in records}
    for r in records:
        cells[r["cell_id"]][r["token_class"]] = r["outcomes"]
    assert prompt_of("mini/math/7/s0/b1/n3/content") == "mini/math/7"
    assert per_prompt_differences(cells, "unused", "random", "planted_logprob_boost") == {"mini/math/7": 1.5}


def test_fewer_prompts_than_the_minimum_give_no_interval_and_no_verdict():
    analysis = {"comparisons": [["unused", "random"]], "margins": {"planted_logprob_boost": 0.25},
                "alpha": 0.05, "ci_level": 0.95, "primary_outcome": "planted_logprob_boost"}
    records = [_record(f"p{i}", 0, cls, boost) for i in range(MIN_PROMPTS - 1)
               for cls, boost in (("unused", 2.0 + i), ("random", 0.0))]
    effect, = noise_study_effects(records, analysis, ["planted_logprob_boost"], unit="prompt", min_units=MIN_PROMPTS)
    assert effect["verdict"] == "insufficient data" and effect["ci"] is None and effect["n_pairs"] == MIN_PROMPTS - 1
    more = records + [_record("p9", 0, "unused", 3.0), _record("p9", 0, "random", 0.0)]
    effect, = noise_study_effects(more, analysis, ["planted_logprob_boost"], unit="prompt", min_units=MIN_PROMPTS)
    assert effect["verdict"] == "different" and effect["n_pairs"] == MIN_PROMPTS


def test_the_confirmatory_size_is_the_fewest_prompts_reaching_the_power_at_the_pilots_upper_sd():
    statistics = {"pilot_plan_sha256": "x", "pilot_report_sha256": "y", "pilot_prompts": 10,
                  "pilot_sd": {"unused - random": 0.3, "unused - rare": 0.2}}
    size = confirmatory_size(statistics, margin=0.25, alpha=0.05)
    n, sd = size["prompts_needed"], size["planning_sd"]
    assert sd > 0.3  # the upper limit of the larger sd, not the estimate
    assert tost_power(n, sd, 0.25) >= PER_COMPARISON_POWER > tost_power(n - 1, sd, 0.25)
    power = achieved_power(size, n)
    assert power["meets_target"] and power["joint_power_lower_bound"] >= 0.8
    assert not achieved_power(size, n // 2)["meets_target"]


def test_t_test_power_grows_with_the_number_of_prompts():
    assert t_test_power(5, 1.0, 0.5) < t_test_power(40, 1.0, 0.5) < 1.0
    assert math.isclose(t_test_power(200, 1.0, 0.0), 0.05, abs_tol=0.01)


@pytest.fixture(scope="module")
def smoke(tiny, tmp_path_factory):
    """The smoke design on tiny, run in invariant mode (batches of 6)."""
    folder = tmp_path_factory.mktemp("first-pass") / "smoke"
    NoiseStudy(model="tiny", design="smoke").register(folder)
    report = run_noise_study(folder, tiny, mode="invariant", batch_size=6)
    return folder, report


def test_a_first_pass_plan_plants_only_at_the_content_positions_it_lists(smoke):
    plan, _ = load_plan(smoke[0])
    assert plan.schema.endswith("/3") and plan.factors.budgets == [1] and plan.factors.positions == ["content"]
    assert plan.first_pass.chat_template is False  # tiny's synthetic tokenizer has no template
    for condition in enumerate_conditions(plan):
        listed = plan.first_pass.content_positions[f"{condition.prompt.prompt_id}/s{condition.seed}"]
        assert set(condition.positions) <= set(listed) and len(set(condition.positions)) == condition.count


def test_the_invariant_run_analyses_batched_rows_its_safeguard_is_silent_and_the_outcome_varies(smoke):
    report = smoke[1]
    assert report["complete"] and report["analysed_run"] == "batched" and report["unit"] == "prompt"
    assert report["safeguard"]["fired"] == 0 and report["safeguard"]["compared"] == report["conditions_total"]
    assert "first_pass" in report["safeguard"]["by_field"]
    primary = [e for e in report["effects"] if e["primary"]]
    assert all(e["sd"] and e["sd"] > 0 and e["n_pairs"] == report["prompts"] for e in primary)
    assert report["conclusion"]["answer"] in ("yes", "no", "like rare tokens", "between the controls",
                                              "inconclusive")


def test_a_stock_run_of_the_same_plan_analyses_each_condition_alone(smoke, tiny, tmp_path):
    folder = tmp_path / "stock"
    folder.mkdir()
    for name in (PLAN_FILE, "plan.sha256"):
        (folder / name).write_bytes((smoke[0] / name).read_bytes())
    report = run_noise_study(folder, tiny, mode="stock", batch_size=6, limit=6)
    assert report["analysed_run"] == "alone" and report["conditions_run"] == 6


def test_a_first_pass_plan_without_its_design_or_a_second_schema_plan_with_one_is_refused(smoke, tmp_path):
    data = json.loads((smoke[0] / PLAN_FILE).read_text())
    plan, _ = load_plan(smoke[0])
    save_plan(plan, tmp_path)
    broken = dict(data)
    del broken["first_pass"]
    (tmp_path / PLAN_FILE).write_text(json.dumps(broken))
    with pytest.raises(CanvaslabError, match="is not a noise-study plan"):
        load_plan(tmp_path)
    (tmp_path / PLAN_FILE).write_text(json.dumps({**data, "schema": "canvaslab.noise-study.plan/2"}))
    with pytest.raises(CanvaslabError, match="is not a noise-study plan"):
        load_plan(tmp_path)


def test_confirmatory_needs_a_finished_pilot(smoke, tmp_path):
    with pytest.raises(CanvaslabError, match="--pilot DIR"):
        NoiseStudy(model="tiny", design="confirmatory")
    with pytest.raises(CanvaslabError, match="not a pilot"):  # the smoke design is no pilot
        NoiseStudy(model="tiny", design="confirmatory", pilot=smoke[0]).register(tmp_path / "c")


def test_the_confirmatory_design_is_sized_from_the_pilot_on_prompts_the_pilot_never_saw(tiny, tmp_path):
    pilot = tmp_path / "pilot"
    NoiseStudy(model="tiny", design="pilot").register(pilot)
    with pytest.raises(CanvaslabError, match="run the pilot to the end"):
        NoiseStudy(model="tiny", design="confirmatory", pilot=pilot).register(tmp_path / "early")
    pilot_plan, digest = load_plan(pilot)
    # the pilot's finished report, as a complete run writes it (its sd chosen to ask for few prompts)
    effects = [{"outcome": "planted_logprob_boost", "comparison": name, "sd": 0.15, "n_pairs": 10}
               for name in ("unused - random", "unused - rare")]
    (pilot / "noise_study.json").write_text(json.dumps({"plan_hash": digest, "complete": True, "effects": effects}))
    counts = tmp_path / "token_counts.npy"
    np.save(counts, np.arange(tiny.vocab_size, dtype=np.int64) + 1)
    with pytest.raises(CanvaslabError, match="token pools differ"):  # the pilot's rare control was another
        NoiseStudy(model="tiny", design="confirmatory", pilot=pilot, token_counts=counts).register(tmp_path / "x")
    NoiseStudy(model="tiny", design="confirmatory", pilot=pilot).register(tmp_path / "confirmatory")
    plan, _ = load_plan(tmp_path / "confirmatory")
    power = plan.first_pass.power
    assert power["pilot_plan_sha256"] == digest and power["prompts_planned"] == len(plan.factors.prompts)
    assert power["prompts_planned"] == power["prompts_needed"] and power["meets_target"]
    assert not {p.prompt_id for p in plan.factors.prompts} & {p.prompt_id for p in pilot_plan.factors.prompts}


def _finished_pilot(tiny, folder, effects):
    NoiseStudy(model="tiny", design="pilot").register(folder)
    _, digest = load_plan(folder)
    (folder / "noise_study.json").write_text(json.dumps({"plan_hash": digest, "complete": True, "effects": effects}))


@pytest.mark.parametrize("effects", [
    5,
    [{"outcome": "planted_logprob_boost", "sd": 0.2, "n_pairs": 10}],
    [{"outcome": "planted_logprob_boost", "comparison": name, "sd": sd, "n_pairs": 10}
     for name, sd in (("unused - random", float("nan")), ("unused - rare", 0.2))],
    [{"outcome": "planted_logprob_boost", "comparison": name, "sd": 0.0, "n_pairs": 10}
     for name in ("unused - random", "unused - rare")],
    [{"outcome": "planted_logprob_boost", "comparison": name, "sd": True, "n_pairs": 10}
     for name in ("unused - random", "unused - rare")],
    [{"outcome": "planted_logprob_boost", "comparison": name, "sd": 0.2, "n_pairs": 2}
     for name in ("unused - random", "unused - rare")],
], ids=["not-a-list", "no-comparison", "nan", "zero", "bool", "too-few-prompts"])
def test_a_pilot_report_without_a_usable_variance_is_refused_in_one_line_before_the_model_loads(
        tiny, tmp_path, effects, monkeypatch):
    pilot = tmp_path / "pilot"
    _finished_pilot(tiny, pilot, effects)
    import canvaslab.models

    monkeypatch.setattr(canvaslab.models, "load_model", lambda *a, **k: pytest.fail("the model loaded"))
    with pytest.raises(CanvaslabError, match="no usable standard deviation"):
        NoiseStudy(model="tiny", design="confirmatory", pilot=pilot).register(tmp_path / "c")


def test_a_pilot_of_another_random_model_or_suite_is_refused(tiny, tmp_path):
    pilot = tmp_path / "pilot"
    effects = [{"outcome": "planted_logprob_boost", "comparison": name, "sd": 0.15, "n_pairs": 10}
               for name in ("unused - random", "unused - rare")]
    _finished_pilot(tiny, pilot, effects)
    with pytest.raises(CanvaslabError, match="model seed"):
        NoiseStudy(model="tiny", design="confirmatory", pilot=pilot, model_seed=3).register(tmp_path / "a")
    with pytest.raises(CanvaslabError, match="suite"):
        NoiseStudy(model="tiny", design="confirmatory", pilot=pilot, suite="default").register(tmp_path / "b")


def _edited(folder, tmp_path, edit) -> None:
    data = json.loads((folder / PLAN_FILE).read_text())
    edit(data)
    from canvaslab.studies.unused_tokens.plan import NoisePlan

    save_plan(NoisePlan.from_dict(data), tmp_path)  # re-registered: the hash matches the edited content


@pytest.mark.parametrize("edit, said", [
    (lambda d: d["first_pass"]["content_positions"].popitem(), "every prompt and seed"),
    (lambda d: d["first_pass"]["content_positions"].update(
        {k: v[:1] for k, v in d["first_pass"]["content_positions"].items()}), "distinct positions"),
    (lambda d: d["first_pass"]["content_positions"].update(
        {k: [10_000, 10_001, 10_002] for k in d["first_pass"]["content_positions"]}), "inside the canvas"),
])
def test_an_edited_first_pass_design_is_refused_in_one_line(smoke, tmp_path, edit, said):
    _edited(smoke[0], tmp_path, edit)
    with pytest.raises(CanvaslabError, match=said):
        load_plan(tmp_path)


def test_content_positions_belong_to_the_first_pass_schema_only(tmp_path):
    from canvaslab.api import NoiseStudy as Study

    Study(model="tiny", design="small").register(tmp_path / "small")
    data = json.loads((tmp_path / "small" / PLAN_FILE).read_text())
    data["factors"]["positions"] = ["content"]
    from canvaslab.studies.unused_tokens.plan import NoisePlan

    save_plan(NoisePlan.from_dict(data), tmp_path / "edited")
    with pytest.raises(CanvaslabError, match="'content' belongs to plan schema"):
        load_plan(tmp_path / "edited")


def test_the_plan_records_how_its_content_positions_were_computed(smoke):
    plan, _ = load_plan(smoke[0])
    assert plan.first_pass.registration["mode"] == "invariant"
    assert plan.first_pass.registration["device_type"] == "cpu" and plan.first_pass.registration["dtype"] == "float32"
