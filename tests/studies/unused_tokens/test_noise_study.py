"""The pre-registered noise study on the tiny preset (CPU, the small design's 3-step budget): plan hash,
refusals, resume after a kill, the 2,304-condition default, the statistics against scipy, and the batch
safeguard firing in stock mode (tiny float32 is batch-variant on x86)."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from canvaslab.analysis.tost import DEGENERATE
from canvaslab.analysis.noise_study import conclusion, noise_study_effects
from canvaslab.cli.main import main
from canvaslab.errors import CanvaslabError
from canvaslab.generation import generate
from canvaslab.reports.noise_study import noise_study_table
from canvaslab.studies.unused_tokens import noise_study
from canvaslab.studies.unused_tokens.batch_safeguard import FIELDS, differing_fields
from canvaslab.studies.unused_tokens.conditions import base_noise, enumerate_conditions, region
from canvaslab.studies.unused_tokens.model_facts import read_model_facts
from canvaslab.studies.engine.plan import sha256_of
from canvaslab.studies.engine.store import Store
from canvaslab.studies.unused_tokens.noise_study import (OLD_RESULTS_FILE, REPORT_FILE, report_noise_study,
                                                        run_noise_study)
from canvaslab.studies.unused_tokens.plan import (
    HASH_FILE,
    PLAN_FILE,
    build_plan,
    canonical_json,
    hash_plan_dict,
    load_plan,
    plan_deviations,
    plan_hash,
    save_plan,
)
from canvaslab.studies.unused_tokens.planted_observer import Observation
from canvaslab.studies.unused_tokens.token_pools import RARE_POOL_SIZE, build_token_pools

REPORT_KEYS = {"study", "plan_hash", "plan_file", "question", "design", "conditions_total", "conditions_run",
               "complete", "execution", "class_means", "effects", "conclusion", "safeguard",
               "deviations_from_plan", "environment"}
EFFECT_KEYS = {"comparison", "outcome", "primary", "n_pairs", "margin", "mean_difference", "sd", "ci", "ci_level",
               "p_lower", "p_upper", "tost_p", "p_two_sided", "verdict", "flags"}


def _plan(design: str = "small", token_counts=None, **kwargs):
    facts, tokenizer = read_model_facts("tiny")
    pools = build_token_pools(tokenizer, facts.vocab_size, facts.generation_defaults, token_counts)
    return build_plan(facts, tokenizer, pools, design=design, **kwargs)


def _register(directory: Path, **kwargs) -> str:
    return save_plan(_plan(**kwargs), directory)


def _records(directory: Path) -> dict[str, dict]:
    """The stored condition records, by condition id (the store's own check of every file)."""
    stored = {}
    for path in sorted((directory / "store" / "records").glob("*.json")):
        entry = json.loads(path.read_text())
        stored[entry["unit"]] = Store(directory, entry["plan_sha256"]).load(entry["unit"])
    return stored


def _count_generate_calls(monkeypatch) -> list[int]:
    calls: list[int] = []

    def counting(*args, **kwargs):
        calls.append(len(args[1]))
        return generate(*args, **kwargs)

    monkeypatch.setattr(noise_study, "generate", counting)
    return calls


# ------------------------------------------------------------------------------------------- the plan


def _leaf_paths(value, path=()):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaf_paths(item, (*path, key))
    elif isinstance(value, list) and value:
        for index, item in enumerate(value):
            yield from _leaf_paths(item, (*path, index))
    else:
        yield path


def _mutated(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if value is None:
        return 0
    return [*value, 0]  # an empty list


def test_plan_hash_is_stable_and_changes_when_any_field_changes():
    plan = _plan()
    assert plan_hash(plan) == plan_hash(_plan())
    data = plan.to_dict()
    paths = list(_leaf_paths(data))
    assert len(paths) > 100  # every factor level, pool id, margin and rule text is a leaf
    for path in paths:
        changed = copy.deepcopy(data)
        holder = changed
        for key in path[:-1]:
            holder = holder[key]
        holder[path[-1]] = _mutated(holder[path[-1]])
        assert hash_plan_dict(changed) != plan_hash(plan), f"changing {path} left the hash unchanged"


def test_plan_file_is_canonical_and_its_sha256_is_the_plan_hash(tmp_path):
    digest = _register(tmp_path, seed=3, margin=0.07)
    text = (tmp_path / PLAN_FILE).read_text()
    assert hashlib.sha256(text.encode()).hexdigest() == digest  # `sha256sum -c plan.sha256` works
    assert (tmp_path / HASH_FILE).read_text() == f"{digest}  {PLAN_FILE}\n"
    loaded, loaded_hash = load_plan(tmp_path)
    assert loaded_hash == digest and canonical_json(loaded.to_dict()) == text
    assert loaded.analysis.margins["first_pass_keeps"] == 0.07 and loaded.factors.seeds == [3]
    (tmp_path / PLAN_FILE).write_text(json.dumps(json.loads(text), indent=4))  # whitespace only: same content
    assert load_plan(tmp_path)[1] == digest


def test_default_design_enumerates_exactly_2304_unique_conditions_in_matched_cells():
    plan = _plan("default")
    conditions = enumerate_conditions(plan)
    assert plan.factors.n_conditions == len(conditions) == 2304
    assert len({c.condition_id for c in conditions}) == 2304
    assert [c.condition_id for c in enumerate_conditions(plan)] == [c.condition_id for c in conditions]
    cells: dict[str, list] = {}
    for condition in conditions:
        cells.setdefault(condition.cell_id, []).append(condition)
    assert len(cells) == 768
    unused = set(plan.token_pools.ids("unused", plan.model.vocab_size).tolist())
    rare = set(plan.token_pools.rare_ids)
    for cell in cells.values():
        assert sorted(c.token_class for c in cell) == ["random", "rare", "unused"]
        assert len({c.positions for c in cell}) == 1  # the classes of a cell plant at the same places
        for c in cell:
            assert len(c.positions) == len(set(c.positions)) == len(c.tokens) == c.count
            if c.position != "spread":
                assert all(p in region(c.position, plan.model.canvas_length) for p in c.positions)
            pool_check = {"unused": lambda t: t in unused, "rare": lambda t: t in rare,
                          "random": lambda t: t not in unused and t not in plan.token_pools.excluded_ids}
            assert all(pool_check[c.token_class](t) for t in c.tokens)


def test_default_batch_size_gives_each_group_of_the_default_design_one_safeguard_batch():
    """A group's batched run costs about the same host time at 36 rows as at 8 on a GPU: by default one
    batched run per (prompt, seed, budget), not five."""
    import inspect

    from canvaslab.cli import noise_study as cli

    conditions = enumerate_conditions(_plan("default"))
    default = inspect.signature(run_noise_study).parameters["batch_size"].default
    assert cli.NOISE_BATCH_SIZE == default
    batches = noise_study.planned_batches(conditions, default)
    assert len(batches) == len({c.base_id for c in conditions}) == 64
    assert all(len({c.base_id for c in batch}) == 1 and len(batch) == 36 for batch in batches)


def test_rare_control_comes_from_the_least_frequent_attested_ordinary_tokens(tmp_path):
    facts, tokenizer = read_model_facts("tiny")
    counts = np.full(facts.vocab_size, 1000, dtype=np.int64)
    counts[6:14] = 0  # unused: never seen
    counts[[20, 30, 40]] = [1, 2, 3]
    counts[[21, 22]] = 0  # never seen ordinary ids are not "rare", they are unattested
    np.save(tmp_path / "counts.npy", counts)
    pools = build_token_pools(tokenizer, facts.vocab_size, facts.generation_defaults, tmp_path / "counts.npy")
    assert pools.rare_source["kind"] == "corpus" and len(pools.rare_ids) == RARE_POOL_SIZE
    assert {20, 30, 40} <= set(pools.rare_ids) and not {21, 22} & set(pools.rare_ids)
    assert not set(pools.rare_ids) & set(range(6, 14)) and not set(pools.rare_ids) & set(pools.excluded_ids)
    fallback = build_token_pools(tokenizer, facts.vocab_size, facts.generation_defaults)
    assert fallback.rare_source["kind"] == "fallback" and max(fallback.rare_ids) == 503  # below the 504-511 block
    np.save(tmp_path / "short.npy", counts[:100])
    with pytest.raises(CanvaslabError, match="100 ids"):
        build_token_pools(tokenizer, facts.vocab_size, facts.generation_defaults, tmp_path / "short.npy")


# ------------------------------------------------------------------------------------------- statistics


def test_degenerate_primary_outcomes_make_the_answer_inconclusive():
    effects = [{"comparison": c, "outcome": "keeps", "mean_difference": 0.0, "verdict": DEGENERATE}
               for c in ("unused - random", "unused - rare")]
    assert conclusion(effects, "keeps")["answer"] == "inconclusive"
    assert conclusion([dict(e, verdict="equivalent") for e in effects], "keeps")["answer"] == "no"


def test_the_plan_states_the_zero_variance_rule():
    plan = _plan()
    assert plan.schema == "canvaslab.noise-study.plan/2"
    assert "degenerate: zero variance" in plan.analysis.decision_rule
    assert "never counted as equivalent" in plan.analysis.decision_rule


def test_effects_pair_each_cell_unused_minus_control():
    outcomes = ["first_pass_keeps"]
    records = []
    for cell, (unused, random_, rare) in enumerate([(1.0, 0.0, 0.5), (1.0, 0.0, 0.25), (1.0, 0.5, 0.5)]):
        for cls, value in (("unused", unused), ("random", random_), ("rare", rare)):
            records.append({"cell_id": f"c{cell}", "token_class": cls, "outcomes": {"first_pass_keeps": value}})
    records.append({"cell_id": "c9", "token_class": "unused", "outcomes": {"first_pass_keeps": 9.0}})  # unpaired
    analysis = {"comparisons": [["unused", "random"], ["unused", "rare"]], "margins": {"first_pass_keeps": 0.05},
                "alpha": 0.05, "ci_level": 0.95, "primary_outcome": "first_pass_keeps"}
    by_comparison = {e["comparison"]: e for e in noise_study_effects(records, analysis, outcomes)}
    assert by_comparison["unused - random"]["n_pairs"] == 3
    assert by_comparison["unused - random"]["mean_difference"] == pytest.approx((1 + 1 + 0.5) / 3)
    assert by_comparison["unused - rare"]["mean_difference"] == pytest.approx((0.5 + 0.75 + 0.5) / 3)


# ------------------------------------------------------------------------------------------- safeguard logic


def _observation(**changes) -> Observation:
    fields = dict(positions=[3], planted=[9], predictions=[[4], [9]], accepted=[[False], [True]], first_entropy=[5.5],
                  logits_digests=[1, 2], tokens=[4, 9, 0], text="a b", passes=2, stop_passes=[None])
    return Observation(**{**fields, **changes})


def test_safeguard_is_silent_on_identical_rows_and_names_each_changed_field():
    assert differing_fields(_observation(), [_observation(), _observation()]) == []
    assert differing_fields(_observation(), [_observation(logits_digests=[1, 3])]) == ["logits"]
    assert differing_fields(_observation(), [_observation(), _observation(first_entropy=[5.500001])]) == ["entropy"]
    changed = _observation(accepted=[[True], [True]], predictions=[[9], [9]], tokens=[9, 9, 0])
    assert differing_fields(_observation(), [changed]) == ["tokens", "accept_passes", "predictions"]
    assert list(FIELDS) == ["tokens", "stop", "accept_passes", "predictions", "entropy", "logits", "first_pass"]
    measured = {"boost": [0.5], "neighbour_kl": [0.01]}
    assert differing_fields(_observation(first_pass=measured),
                            [_observation(first_pass={"boost": [0.5], "neighbour_kl": [0.0100001]})]) == ["first_pass"]


# ------------------------------------------------------------------------------------------- running


def test_base_noise_is_the_canvas_generate_would_draw_itself(tiny):
    plan = _plan()
    condition = enumerate_conditions(plan)[0]
    noise = base_noise(condition.seed, condition.stream, 256, tiny.vocab_size, tiny.device)
    settings = dict(seed=condition.seed, requests=[condition.stream], generation={"max_denoising_steps": 3})
    own = generate(tiny, [condition.prompt.token_ids], **settings)
    given = generate(tiny, [condition.prompt.token_ids], initial_canvas=noise[None], **settings)
    assert own.rows[0].tokens == given.rows[0].tokens and own.rows[0].passes == given.rows[0].passes
    planted = condition.plant(noise)
    assert planted[list(condition.positions)].tolist() == list(condition.tokens)
    assert torch.equal(torch.cat([planted[:condition.positions[0]], planted[condition.positions[0] + 1:]]),
                       torch.cat([noise[:condition.positions[0]], noise[condition.positions[0] + 1:]]))


@pytest.fixture(scope="module")
def resumed(tiny, tmp_path_factory):
    """The small design interrupted after 3 conditions (the 4th computed, never stored), then resumed."""
    directory = tmp_path_factory.mktemp("noise")
    _register(directory)
    first: list[int] = []

    def kill_after_three(done, total, doing):
        first.append(done)
        if done == 3:  # mid-batch: the 4th condition was computed but never written
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_noise_study(directory, tiny, batch_size=4, progress=kill_after_three)
    stored_first = set(_records(directory))
    with pytest.MonkeyPatch.context() as monkeypatch:
        calls = _count_generate_calls(monkeypatch)
        report = run_noise_study(directory, tiny, batch_size=4)
    return {"dir": directory, "first": stored_first, "calls": calls, "report": report}


@pytest.fixture(scope="module")
def uninterrupted(tiny, tmp_path_factory):
    """The small design run in one go, batch size 4 (as ``resumed``): the reference of every resume."""
    directory = tmp_path_factory.mktemp("uninterrupted")
    _register(directory)
    run_noise_study(directory, tiny, batch_size=4)
    return directory


def test_a_killed_and_resumed_run_writes_the_same_report_as_an_uninterrupted_one(resumed, uninterrupted):
    assert (resumed["dir"] / REPORT_FILE).read_bytes() == (uninterrupted / REPORT_FILE).read_bytes()
    assert _records(resumed["dir"]) == _records(uninterrupted)  # the same results, record for record


def test_a_damaged_record_is_redone_and_the_report_is_identical(tiny, uninterrupted, tmp_path):
    """A record cut short (or edited) fails its checksum: it is set aside and its condition run again,
    in the safeguard batch it always belonged to, so the report is the uninterrupted one."""
    directory = Path(shutil.copytree(uninterrupted, tmp_path / "copy"))
    record = sorted((directory / "store" / "records").glob("*.json"))[5]
    record.write_bytes(record.read_bytes()[:-60])
    report = run_noise_study(directory, tiny, batch_size=4)
    assert report["outcome"]["ran"] == 1 and report["outcome"]["skipped"] == 11
    assert list((directory / "store" / "records").glob("*.damaged"))
    assert (directory / REPORT_FILE).read_bytes() == (uninterrupted / REPORT_FILE).read_bytes()


def test_resume_refuses_another_batch_size(resumed):
    with pytest.raises(CanvaslabError, match="execution.batch_size was 4, now 8"):
        run_noise_study(resumed["dir"], batch_size=8)


def test_resume_after_a_kill_redoes_and_loses_nothing(resumed):
    records = _records(resumed["dir"])
    assert len(resumed["first"]) == 3 and len(records) == 12
    assert resumed["report"]["outcome"] == {"ran": 9, "skipped": 3, "failed": {}, "by_others": 0}
    # one baseline, 9 single runs + the 3 planned safeguard batches [1..4], [5..8], [9..12]: the first is
    # rerun whole although 3 of its conditions were done, so the 4th is compared in the batch it always belonged to
    assert sorted(resumed["calls"]) == [1] * 10 + [4] * 3


def test_end_to_end_report_has_every_key_and_consistent_numbers(resumed):
    report = json.loads((resumed["dir"] / REPORT_FILE).read_text())
    assert set(report) == REPORT_KEYS
    assert report["conditions_total"] == report["conditions_run"] == 12 and report["complete"] is True
    assert report["plan_hash"] == load_plan(resumed["dir"])[1]
    assert len(report["effects"]) == 2 * 6 and all(set(e) == EFFECT_KEYS for e in report["effects"])
    assert all(e["n_pairs"] == 4 for e in report["effects"])
    assert sum(e["primary"] for e in report["effects"]) == 2
    assert {cls: m["conditions"] for cls, m in report["class_means"].items()} == {"random": 4, "rare": 4, "unused": 4}
    assert report["conclusion"]["answer"] in {"no", "yes", "inconclusive"}
    assert report["environment"]["mode"] == "stock" and report["execution"]["dtype"] == "float32"
    assert report["plan_file"] == PLAN_FILE and report["deviations_from_plan"] == []
    flat = [e for e in report["effects"] if e["sd"] == 0]
    assert flat and all(e["verdict"] == DEGENERATE and e["tost_p"] is None for e in flat)


def test_batch_safeguard_fires_in_stock_mode_on_this_cpu(resumed):
    """Tiny float32 is batch-variant on x86 (README): batched rows' logits differ from the single run's."""
    safeguard = resumed["report"]["safeguard"]
    assert safeguard["compared"] == 12 and safeguard["fired"] > 0
    assert safeguard["by_field"]["logits"] > 0 and len(safeguard["fired_conditions"]) == safeguard["fired"]
    fired = [cid for cid, record in _records(resumed["dir"]).items() if record["safeguard"]["fired"]]
    assert set(fired) == set(safeguard["fired_conditions"])


def test_run_refuses_a_plan_edited_after_the_first_result(resumed, tmp_path):
    directory = Path(shutil.copytree(resumed["dir"], tmp_path / "copy"))
    digest = load_plan(directory)[1]
    assert {record["plan_hash"] for record in _records(directory).values()} == {digest}  # every result cites the plan
    plan = json.loads((directory / PLAN_FILE).read_text())
    plan["analysis"]["margins"]["first_pass_keeps"] = 0.5  # loosen the margin after seeing results...
    (directory / PLAN_FILE).write_text(canonical_json(plan))
    with pytest.raises(CanvaslabError, match="edited after it was registered"):
        run_noise_study(directory, limit=1)
    (directory / HASH_FILE).write_text(f"{hash_plan_dict(plan)}  {PLAN_FILE}\n")  # ...and re-register it in place
    with pytest.raises(CanvaslabError, match="another plan: plan.registered_plan_sha256"):
        run_noise_study(directory, batch_size=4, limit=1)
    assert _records(directory) == _records(resumed["dir"])


def test_a_plan_of_schema_1_still_loads_and_its_report_lists_the_changed_rules(tmp_path):
    data = _plan().to_dict()
    data["schema"] = "canvaslab.noise-study.plan/1"
    (tmp_path / PLAN_FILE).write_text(canonical_json(data))
    (tmp_path / HASH_FILE).write_text(f"{hash_plan_dict(data)}  {PLAN_FILE}\n")
    plan, digest = load_plan(tmp_path)
    assert digest == hash_plan_dict(data) and plan.schema == data["schema"]
    deviations = plan_deviations(plan)
    assert len(deviations) == 2 and "zero variance" in deviations[0] and "batches" in deviations[1]
    assert plan_deviations(_plan()) == []
    data["schema"] = "canvaslab.noise-study.plan/9"
    (tmp_path / PLAN_FILE).write_text(canonical_json(data))
    with pytest.raises(CanvaslabError, match="not a noise-study plan: at schema"):
        load_plan(tmp_path)


def test_resume_refuses_another_dtype_or_mode(resumed):
    with pytest.raises(CanvaslabError, match="plan.execution.dtype was \"float32\", now \"bfloat16\""):
        run_noise_study(resumed["dir"], batch_size=4, dtype="bfloat16")
    with pytest.raises(CanvaslabError, match="plan.execution.mode"):
        run_noise_study(resumed["dir"], batch_size=4, mode="rowwise")


def test_fresh_starts_the_registered_plan_over_and_keeps_the_old_results(resumed, tiny, tmp_path):
    directory = Path(shutil.copytree(resumed["dir"], tmp_path / "study"))
    report = run_noise_study(directory, tiny, batch_size=12, limit=1, fresh=True)
    assert report["outcome"]["ran"] == 1 and report["plan_hash"] == load_plan(directory)[1]
    assert _records(tmp_path / "study.1") == _records(resumed["dir"])  # kept under a new name


def test_a_folder_with_an_old_results_log_is_refused(tmp_path):
    _register(tmp_path)
    (tmp_path / OLD_RESULTS_FILE).write_text("{}\n")
    with pytest.raises(CanvaslabError, match="older canvaslab"):
        run_noise_study(tmp_path)


@pytest.mark.slow
def test_invariant_mode_keeps_the_safeguard_silent(tiny, tmp_path):
    """The lead's batch-invariant mode: a condition alone and duplicated in a batch agree bit for bit."""
    from canvaslab.invariant import generation_mode

    try:
        with generation_mode(tiny.model, "invariant"):
            pass
    except CanvaslabError as error:
        pytest.skip(f"invariant mode unavailable: {error}")
    _register(tmp_path)
    report = run_noise_study(tmp_path, tiny, batch_size=1, limit=1, mode="invariant")
    assert report["safeguard"]["compared"] == 1 and report["safeguard"]["fired"] == 0
    assert report["safeguard"]["batch_rows"] == [2]


def test_cli_plans_runs_and_refuses_to_replace_a_plan_with_results(tmp_path, capsys):
    out = tmp_path / "study"
    main(["noise-study", "plan", "--model", "tiny", "--out", str(out), "--design", "small", "--margin", "0.1"])
    digest = (out / HASH_FILE).read_text().split()[0]
    assert digest in capsys.readouterr().out
    main(["noise-study", "run", str(out), "--batch-size", "1", "--limit", "1"])
    printed = capsys.readouterr().out
    assert "first_pass_keeps" in printed and "batch safeguard" in printed
    report = json.loads((out / REPORT_FILE).read_text())
    assert report["conditions_run"] == 1 and report["complete"] is False and report["plan_hash"] == digest
    with pytest.raises(SystemExit) as exit_info:
        main(["noise-study", "plan", "--model", "tiny", "--out", str(out), "--design", "small"])
    assert exit_info.value.code == 2 and "never replaced" in capsys.readouterr().err
    assert (out / HASH_FILE).read_text().split()[0] == digest


def test_report_of_a_finished_folder_is_what_the_run_wrote(uninterrupted, tmp_path):
    directory = Path(shutil.copytree(uninterrupted, tmp_path / "copy"))
    (directory / REPORT_FILE).unlink()
    report = report_noise_study(directory)
    assert report["complete"] is True and "interim" not in noise_study_table(report).title
    # a toy design answers like a study: the title says it is not one
    assert report["design"] == "small" and "a check of the machinery, not a study" in noise_study_table(report).title
    assert "not a study" not in noise_study_table({**report, "design": "default"}).title
    assert (directory / REPORT_FILE).read_bytes() == (uninterrupted / REPORT_FILE).read_bytes()


def test_report_of_a_study_cut_short_analyses_the_stored_conditions_only(tiny, uninterrupted, tmp_path):
    """An interim look: the stored conditions, analysed as a run that stopped there would report them."""
    directory = Path(shutil.copytree(uninterrupted, tmp_path / "cut"))
    records = sorted((directory / "store" / "records").glob("*.json"))
    for record in records[4:]:
        record.unlink()
    (directory / REPORT_FILE).unlink()
    report = report_noise_study(directory)
    assert report["complete"] is False and report["conditions_run"] == 4
    assert report["safeguard"]["compared"] == 4
    assert "interim" in noise_study_table(report).title
    interim = (directory / REPORT_FILE).read_bytes()
    run_noise_study(directory, tiny, batch_size=4)  # resumes the other conditions, then reports them all
    assert (directory / REPORT_FILE).read_bytes() == (uninterrupted / REPORT_FILE).read_bytes() != interim


def test_report_refuses_a_folder_where_nothing_ran(tmp_path, capsys):
    _register(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["noise-study", "report", str(tmp_path)])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and "nothing has run" in error and "Traceback" not in error


def test_report_changes_no_record_a_damaged_one_is_left_in_place_and_not_counted(uninterrupted, tmp_path, capsys):
    directory = Path(shutil.copytree(uninterrupted, tmp_path / "damaged"))
    record = sorted((directory / "store" / "records").glob("*.json"))[3]
    record.write_text("{not json")
    before = {p: p.read_bytes() for p in (directory / "store").rglob("*") if p.is_file()}
    report = report_noise_study(directory)
    assert report["conditions_run"] == 11
    assert {p: p.read_bytes() for p in (directory / "store").rglob("*") if p.is_file()} == before
    assert "left as they are and not counted" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["garbage", "edited", "another_study"])
def test_report_refuses_a_damaged_or_foreign_registered_plan_in_one_line(uninterrupted, tmp_path, capsys, damage):
    directory = Path(shutil.copytree(uninterrupted, tmp_path / damage))
    registered = directory / "store" / "plan.json"
    if damage == "garbage":
        registered.write_text("{")
    else:
        content = json.loads(registered.read_text())
        if damage == "edited":
            content["plan"]["execution"]["batch_size"] += 1
        else:
            content = {"study": "batch_size", "plan": {"prompts": 3}}
        registered.write_text(json.dumps(content))
        if damage == "another_study":  # consistent with its hash: a store of another study
            digest = sha256_of(content)
            (directory / "store" / "plan.sha256").write_text(f"{digest}  plan.json\n")
    records = sorted((directory / "store" / "records").glob("*.json"))
    with pytest.raises(SystemExit) as exit_info:
        main(["noise-study", "report", str(directory)])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in error and len(error.strip().splitlines()) == 1
    assert sorted((directory / "store" / "records").glob("*.json")) == records  # nothing set aside


@pytest.mark.parametrize("damage, said", [("sha_missing", "is missing: the plan's registration is gone; restore it"),
                                          ("sha_empty", "is empty: the plan's registration is gone; restore it"),
                                          ("plan_a_folder", "plan.json is not a file")])
def test_a_broken_registration_is_named_as_it_is(tmp_path, capsys, damage, said):
    _register(tmp_path)
    if damage == "sha_missing":
        (tmp_path / HASH_FILE).unlink()
    elif damage == "sha_empty":
        (tmp_path / HASH_FILE).write_text("")
    else:
        (tmp_path / "plan.json").unlink()
        (tmp_path / "plan.json").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        main(["noise-study", "report", str(tmp_path)])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and said in " ".join(error.split()) and len(error.strip().splitlines()) == 1


def test_run_refuses_a_checkpoint_retrained_since_the_plan(tiny, tmp_path, capsys):
    """The plan records the weights behind the name: a checkpoint retrained in place is not the plan's model."""
    model, out = tmp_path / "ckpt", tmp_path / "study"
    for seed in (1, 2):
        torch.manual_seed(seed)
        type(tiny.model)._from_config(tiny.model.config).save_pretrained(model)
        tiny.tokenizer.save_pretrained(model)
        if seed == 1:
            main(["noise-study", "plan", "--model", str(model), "--out", str(out), "--design", "small"])
            assert json.loads((out / PLAN_FILE).read_text())["model"]["weights"].startswith("sha256-sampled:")
    with pytest.raises(SystemExit) as exit_info:
        main(["noise-study", "run", str(out), "--batch-size", "1", "--limit", "1"])
    assert exit_info.value.code == 2 and "weights differ from the plan's" in capsys.readouterr().err
    assert not any((out / "store" / "records").glob("*.json"))


def test_a_plan_registered_before_the_weights_fingerprint_still_loads(tmp_path):
    data = _plan().to_dict()
    del data["model"]["weights"]
    (tmp_path / PLAN_FILE).write_text(canonical_json(data))
    (tmp_path / HASH_FILE).write_text(f"{hash_plan_dict(data)}  {PLAN_FILE}\n")
    plan, digest = load_plan(tmp_path)
    assert plan.model.weights is None and digest == hash_plan_dict(data)
