"""The frequency-graded designs (plan schema /4): strata from training counts, the float32 outcome, the later-pass
arm's canvas, the per-stratum answer with its validity flags, and the agreement of two runs of one plan."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from canvaslab.analysis.noise_study import graded_conclusion, graded_effects, outcome_agreement
from canvaslab.api import NoiseStudy
from canvaslab.cli.main import app
from canvaslab.errors import CanvaslabError
from canvaslab.studies.unused_tokens import graded
from canvaslab.studies.unused_tokens.agreement import compare_runs
from canvaslab.studies.unused_tokens.conditions import enumerate_conditions
from canvaslab.studies.unused_tokens.noise_study import run_noise_study
from canvaslab.studies.unused_tokens.plan import HASH_FILE, PLAN_FILE, load_plan

STRATUM_COUNTS = (0, 1, 5, 50, 500, 2, 9)  # every stratum of graded.STRATA present, in turn over the ids


def test_strata_hold_every_ordinary_id_of_their_count_range_and_nothing_else():
    counts = np.array([0, 0, 1, 2, 3, 10, 11, 100, 101, 7, 0], dtype=np.int64)
    ordinary = np.ones(len(counts), dtype=bool)
    ordinary[[1, 9]] = False  # an unused id (count 0) and a special one
    strata = {s["name"]: s for s in graded.stratum_ids(counts, ordinary)}
    assert {name: s["ids"] for name, s in strata.items()} == {
        "never_seen": [0, 10], "seen_1_2": [2, 3], "seen_3_10": [4, 5], "seen_11_100": [6, 7], "common": [8]}
    assert [s["id_count"] for s in strata.values()] == [2, 2, 2, 2, 1]
    with pytest.raises(CanvaslabError, match="no ordinary id falls in the frequency strata seen_1_2"):
        graded.check_strata(graded.stratum_ids(np.array([0, 5, 50, 500]), np.ones(4, dtype=bool)))
    with pytest.raises(CanvaslabError, match="vocabulary has 3"):
        graded.stratum_ids(counts, np.ones(3, dtype=bool))


def test_the_later_canvas_keeps_the_accepted_tokens_of_the_first_pass_reaching_the_target():
    noise = torch.tensor([9, 9, 9, 9])
    masks = [torch.tensor([1, 0, 0, 0]), torch.tensor([0, 1, 1, 0]), torch.tensor([1, 1, 1, 0])]
    canvases = [torch.tensor([1, 9, 9, 9]), torch.tensor([9, 2, 3, 9]), torch.tensor([4, 5, 6, 9])]
    assert graded.later_canvas(noise, masks, canvases, target=0.5) == (2, [9, 2, 3, 9], [1, 2])
    # no pass reaches the target: the generation's last pass
    assert graded.later_canvas(noise, masks, canvases, target=0.9) == (3, [4, 5, 6, 9], [0, 1, 2])
    with pytest.raises(CanvaslabError, match="no pass"):
        graded.later_canvas(noise, [], [])


def test_a_graded_plan_runs_in_float32_only():
    plan = type("Plan", (), {"graded": graded.GradedDesign("float32", [], {}, {})})()
    assert graded.refuse_dtype(plan, "auto") == "float32" == graded.refuse_dtype(plan, "float32")
    with pytest.raises(CanvaslabError, match="--dtype bfloat16: this plan fixes the outcome's dtype at float32"):
        graded.refuse_dtype(plan, "bfloat16")
    assert graded.refuse_dtype(type("Plan", (), {"graded": None})(), "bfloat16") == "bfloat16"  # earlier schemas


def _records(arm: str, differences: dict[str, list[float]]) -> list[dict]:
    """Per prompt, the unused condition and one condition per stratum, unused minus stratum as given."""
    records = []
    for index in range(len(next(iter(differences.values())))):
        cell = f"suite/p{index}/s0/b1/{arm}/n3"
        records.append({"cell_id": cell, "token_class": "unused", "condition_id": f"{cell}/unused",
                        "outcomes": {"planted_logprob_boost": 2.0}})
        for stratum, values in differences.items():
            records.append({"cell_id": cell, "token_class": stratum, "condition_id": f"{cell}/{stratum}",
                            "outcomes": {"planted_logprob_boost": 2.0 - values[index]}})
    return records


ANALYSIS = {"comparisons": [["unused", "never_seen"], ["unused", "common"], ["unused", "seen_1_2"]],
            "margins": {"planted_logprob_boost": 0.25}, "alpha": 0.05, "ci_level": 0.95,
            "primary_outcome": "planted_logprob_boost"}


def test_each_stratum_gets_its_own_answer_and_a_contradicted_equivalence_is_flagged():
    rng = np.random.default_rng(0)
    differences = {"never_seen": list(0.1 + 0.02 * rng.standard_normal(40)),  # inside the margin, yet not zero
                   "common": list(-0.8 + 0.1 * rng.standard_normal(40)),  # wholly below -margin
                   "seen_1_2": list(rng.standard_normal(40))}  # noisy: nothing decided
    arms = {"content": _records("content", {name: values[:4] for name, values in differences.items()}),
            "later": _records("later", differences)}
    effects = graded_effects(arms, ANALYSIS, ["planted_logprob_boost"], min_units=5)
    answer = graded_conclusion(effects, "planted_logprob_boost")
    later = answer["per_stratum"]["later"]
    assert later["never_seen"]["direction"] == "equivalent"
    assert any("yet different from zero" in flag for flag in later["never_seen"]["flags"])
    assert later["common"]["direction"] == "lower" and not later["common"]["flags"]
    assert later["seen_1_2"]["direction"] == "undecided"
    content = answer["per_stratum"]["content"]  # 4 prompts: no interval, no verdict
    assert content["common"]["prompts"] == 4 and content["common"]["verdict"] == "insufficient data"
    assert "later: = never_seen, < common, ? seen_1_2" in answer["text"]


def test_the_agreement_of_two_runs_is_per_condition_and_counts_exact_equalities():
    first = _records("content", {"common": [0.5, 0.1, 0.3]})
    second = [dict(r, outcomes=dict(r["outcomes"])) for r in first]
    second[1]["outcomes"]["planted_logprob_boost"] += 0.25  # one condition moved on the other device
    second[3]["outcomes"]["planted_logprob_boost"] -= 0.75
    agreement = outcome_agreement(first, second[:-1], ["planted_logprob_boost"])
    spread = agreement["outcomes"]["planted_logprob_boost"]
    assert agreement["conditions"] == 5 and agreement["only_first"] == 1 and agreement["only_second"] == 0
    assert spread["all"]["n"] == 5 and spread["all"]["exactly_equal"] == 3
    assert spread["all"]["max_abs"] == pytest.approx(0.75)
    assert spread["all"]["sd"] == pytest.approx(float(np.std([0, -0.25, 0, 0.75, 0], ddof=1)))
    assert spread["content common"]["n"] == 2 and spread["content common"]["max_abs"] == pytest.approx(0.75)
    assert spread["content unused"]["exactly_equal"] == 3


@pytest.fixture(scope="module")
def short_tiny(tmp_path_factory):
    """tiny with a 16-token canvas and one layer: the graded design's registration in seconds."""
    from canvaslab.models.presets import PRESETS

    config = PRESETS["tiny"].build_config()
    config.canvas_length = 16
    folder = tmp_path_factory.mktemp("graded-model")
    (folder / "config.json").write_text(config.to_json_string())
    counts = folder / "counts.npy"
    np.save(counts, np.array([STRATUM_COUNTS[i % len(STRATUM_COUNTS)] for i in range(config.text_config.vocab_size)]))
    return folder / "config.json", counts


@pytest.fixture(scope="module")
def graded_smoke(short_tiny, tmp_path_factory):
    spec, counts = short_tiny
    folder = tmp_path_factory.mktemp("graded") / "smoke"
    NoiseStudy(model=str(spec), design="graded-smoke", token_counts=counts, layers=1).register(folder)
    report = run_noise_study(folder, mode="invariant", batch_size=6, dtype="float32")
    return folder, report


def test_the_later_arm_plants_into_its_registered_canvas_at_the_positions_it_lists(graded_smoke):
    from canvaslab.studies.unused_tokens.noise_study import _RowRunner

    plan, _ = load_plan(graded_smoke[0])
    later = plan.graded.later
    assert plan.schema == graded.SCHEMA_ID and plan.factors.token_classes == list(graded.TOKEN_CLASSES)
    assert [s["name"] for s in plan.graded.strata] == list(graded.STRATUM_NAMES)
    runner = _RowRunner(type("Loaded", (), {"device": torch.device("cpu")})(), plan, "invariant")
    for condition in enumerate_conditions(plan):
        key = f"{condition.prompt.prompt_id}/s{condition.seed}"
        listed = later["content_positions"] if condition.position == "later" else plan.first_pass.content_positions
        assert set(condition.positions) <= set(listed[key])
        if condition.token_class != "unused":
            assert set(condition.tokens) <= set(plan.token_pools.strata[condition.token_class])
        if condition.position == "later":
            assert runner._noise(condition).tolist() == later["canvases"][key]


def test_a_graded_run_reports_per_arm_and_stratum_and_its_safeguard_is_silent(graded_smoke):
    report = graded_smoke[1]
    assert report["complete"] and report["safeguard"]["fired"] == 0
    assert {(e["arm"], e["comparison"]) for e in report["effects"]} == {
        (arm, f"unused - {name}") for arm in graded.ARMS for name in graded.STRATUM_NAMES}
    assert set(report["conclusion"]["per_stratum"]) == set(graded.ARMS)
    assert report["graded"]["dtype"] == "float32" and report["execution"]["dtype"] == "float32"


def test_two_runs_of_one_plan_are_compared_condition_by_condition(graded_smoke, tmp_path):
    copy = tmp_path / "stock"
    copy.mkdir()
    for name in (PLAN_FILE, HASH_FILE):
        (copy / name).write_bytes((graded_smoke[0] / name).read_bytes())
    run_noise_study(copy, mode="stock", batch_size=6, dtype="float32", limit=12)
    agreement = compare_runs(graded_smoke[0], copy)
    assert agreement["conditions"] == 12 and agreement["only_first"] == len(enumerate_conditions(
        load_plan(copy)[0])) - 12
    spread = agreement["outcomes"]["planted_logprob_boost"]["all"]
    assert spread["n"] == 12 and spread["max_abs"] < 1e-3  # the same CPU, another mode: float32 rounding at most
    result = CliRunner().invoke(app, ["noise-study", "report", str(graded_smoke[0]), "--against", str(copy),
                                      "--agreement-out", str(tmp_path / "agreement.json")])
    assert result.exit_code == 0 and "device agreement" in result.output
    assert json.loads((tmp_path / "agreement.json").read_text())["conditions"] == 12


def _cli(*args: str):
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output.strip().splitlines()


def test_a_graded_plan_run_in_another_dtype_is_refused_in_one_line(graded_smoke):
    code, lines = _cli("noise-study", "run", str(graded_smoke[0]), "--dtype", "bfloat16")
    assert code == 2 and len(lines) == 1 and "fixes the outcome's dtype at float32" in lines[0]


def test_graded_registration_refuses_bad_choices_in_one_line(short_tiny, graded_smoke, tmp_path):
    spec, counts = short_tiny
    for args, said in (
            (["--design", "graded-smoke"], "need --token-counts"),
            (["--design", "graded-smoke", "--token-counts", str(counts), "--dtype", "bfloat16"], "float32"),
            (["--design", "graded-pilot", "--token-counts", str(counts), "--max-prompts", "9"], "--max-prompts"),
            (["--design", "graded-confirmatory", "--token-counts", str(counts), "--pilot", str(graded_smoke[0])],
             "not a graded-pilot")):
        code, lines = _cli("noise-study", "plan", "--model", str(spec), "--out", str(tmp_path / "p"), *args)
        assert code == 2 and len(lines) == 1 and said in lines[0], lines
    empty = tmp_path / "empty"
    empty.mkdir()
    for name in (PLAN_FILE, HASH_FILE):
        (empty / name).write_bytes((graded_smoke[0] / name).read_bytes())
    code, lines = _cli("noise-study", "report", str(graded_smoke[0]), "--against", str(empty))
    assert code == 2 and len(lines) == 1 and "no study store" in lines[0], lines
    code, lines = _cli("noise-study", "report", str(graded_smoke[0]), "--agreement-out", str(tmp_path / "a.json"))
    assert code == 2 and len(lines) == 1 and "needs --against" in lines[0], lines


def test_a_pilot_without_every_stratum_and_arm_sizes_nothing_and_the_cap_states_its_power():
    effects = [{"arm": arm, "comparison": f"unused - {name}", "outcome": "planted_logprob_boost", "sd": 0.4,
                "n_pairs": 10} for arm in graded.ARMS for name in graded.STRATUM_NAMES]
    sds, prompts = graded.pilot_sds(effects, "pilot", "planted_logprob_boost")
    assert len(sds) == 10 and prompts == 10
    with pytest.raises(CanvaslabError, match="every stratum and arm"):
        graded.pilot_sds(effects[1:], "pilot", "planted_logprob_boost")
    statistics = {"pilot_sd": sds, "pilot_prompts": prompts}
    size = graded.graded_size(statistics, 0.25, 0.05, cap=None)
    capped = graded.graded_size(statistics, 0.25, 0.05, cap=size["prompts_needed"] - 10)
    assert capped["prompts_wanted"] == size["prompts_needed"] - 10
    assert graded.graded_power(size, size["prompts_needed"])["meets_target"]
    assert not graded.graded_power(capped, capped["prompts_wanted"])["meets_target"]


def test_the_tables_name_each_effects_arm(graded_smoke):
    from rich.console import Console

    from canvaslab.reports.html.noise_panel import verdict_rows
    from canvaslab.reports.noise_study import noise_study_table

    report = graded_smoke[1]
    assert {row[0].split(":")[0] for row in verdict_rows(report)} == set(graded.ARMS)
    console = Console(width=250, record=True)
    console.print(noise_study_table(report))
    text = console.export_text()
    assert "arm" in text and "later" in text and "unused tokens against each frequency stratum" in text
