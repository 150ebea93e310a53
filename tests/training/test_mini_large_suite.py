"""The `mini-large` probe suite: mini's held-out task generators, 200 probes per regime, another seed, and none of
the `mini` suite's prompts (the noise study's prompt population, canvaslab.training.probes)."""

from __future__ import annotations

import json
from collections import Counter
from importlib import resources

import pytest

from canvaslab.choices import SUITE_REGIMES, SUITES
from canvaslab.cli.main import main
from canvaslab.errors import CanvaslabError
from canvaslab.scoring.probes import load_probe_suite
from canvaslab.scoring.probes.datasets import load_suite_file
from canvaslab.studies.unused_tokens.plan import load_plan
from canvaslab.training.probes import MINI_SUITES, SUITE_TASKS, mini_probe_records, packaged_prompts, write_mini_suite
from canvaslab.training.tasks import Mixture

REGIMES = list(SUITE_TASKS)
PER_REGIME = 200


def _shipped_lines(suite: str) -> list[str]:
    path = resources.files("canvaslab.scoring.probes").joinpath("data", "suites", f"{suite}.jsonl")
    return path.read_text(encoding="utf-8").splitlines()


def test_the_suite_is_known_and_has_mini_regimes():
    assert "mini-large" in SUITES and SUITE_REGIMES["mini-large"] == SUITE_REGIMES["mini"]
    assert MINI_SUITES["mini-large"].seed != MINI_SUITES["mini"].seed


def test_it_loads_with_200_probes_per_regime_split_between_the_math_tasks():
    probes = load_suite_file("mini-large")
    assert Counter(p.regime for p in probes) == {regime: PER_REGIME for regime in REGIMES}
    tasks = Counter(p.probe_id.split("/")[1].removeprefix("mini-large-").rsplit("-", 1)[0] for p in probes)
    assert tasks == {"add2": 67, "add3": 67, "word": 66, "fact": 200, "json": 200, "code": 200, "prose": 200}


def test_no_id_or_prompt_is_shared_with_mini_and_no_prompt_comes_twice():
    large, mini = load_suite_file("mini-large"), load_suite_file("mini")
    prompts = [p.prompt for p in large]
    assert len(set(prompts)) == len(prompts)
    assert len({p.probe_id for p in large}) == len(large)
    assert not {p.probe_id for p in large} & {p.probe_id for p in mini}
    assert not set(prompts) & {p.prompt for p in mini}
    assert all(p.probe_id.split("/")[1].startswith("mini-large-") for p in large)


def test_both_halves_of_every_regime_hold_many_probes():
    for split in ("exploratory", "confirmatory"):
        probes = load_probe_suite(REGIMES, split, suite="mini-large")
        assert len(probes) > 450
        assert min(Counter(p.regime for p in probes).values()) > 80


def test_prompts_are_held_out_never_trained():
    mixture = Mixture(None)
    trained = {mixture.sample(__import__("random").Random(i), "train").prompt for i in range(3000)}
    assert not {probe.prompt for probe in load_suite_file("mini-large")} & trained


def test_packaged_suite_is_what_the_generator_makes_byte_for_byte():
    """Rebuilt without the passage file: every regime but open-ended must give the shipped lines exactly."""
    rebuilt = [json.dumps(r, sort_keys=True) for r in mini_probe_records(None, suite="mini-large")]
    shipped = [line for line in _shipped_lines("mini-large") if json.loads(line)["regime"] != "open_ended"]
    assert rebuilt == shipped


@pytest.fixture(scope="module")
def passages(tmp_path_factory):
    """A small passage file: 400 two-sentence passages (about 40 of them held out)."""
    path = tmp_path_factory.mktemp("prose") / "prose.txt"
    path.write_text("".join(f"The village number {i} lay quiet under the hills. Its people rose early and worked "
                            f"the fields until dusk, day after day {i}.\n" for i in range(400)), encoding="utf-8")
    return path


def test_the_prose_part_is_reproducible_held_out_and_distinct(passages, tmp_path):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert write_mini_suite(passages, first, "mini-large") == write_mini_suite(passages, second, "mini-large") == 1000
    assert first.read_bytes() == second.read_bytes()
    records = [json.loads(line) for line in first.read_text(encoding="utf-8").splitlines()]
    prose = [r for r in records if r["regime"] == "open_ended"]
    assert len(prose) == PER_REGIME and len({r["prompt"] for r in prose}) == PER_REGIME
    heldout = {e.prompt for e in Mixture(passages).heldout("prose", 2000, MINI_SUITES["mini-large"].seed)}
    assert {r["prompt"] for r in prose} <= heldout
    # the other regimes do not depend on the passages
    assert [r for r in records if r["regime"] != "open_ended"] == mini_probe_records(None, suite="mini-large")


def test_avoided_prompts_are_skipped_and_the_count_kept():
    first = mini_probe_records(None, per_regime=5, suite="mini-large", avoid=set())
    avoided = {first[0]["prompt"], first[-1]["prompt"]}
    again = mini_probe_records(None, per_regime=5, suite="mini-large", avoid=avoided)
    assert len(again) == len(first) and not avoided & {r["prompt"] for r in again}
    assert again[0]["prompt"] == first[1]["prompt"]  # the next held-out prompt takes the place
    assert packaged_prompts("mini") == {p.prompt for p in load_suite_file("mini")}


def test_an_unknown_mini_suite_is_an_error():
    with pytest.raises(CanvaslabError, match="no mini suite 'nope'"):
        mini_probe_records(None, suite="nope")


def test_noise_study_plan_takes_its_prompts_from_mini_large(tmp_path, capsys):
    out = tmp_path / "smoke"
    main(["noise-study", "plan", "--model", "tiny", "--design", "smoke", "--suite", "mini-large", "--out", str(out)])
    assert "suite 'mini-large'" in capsys.readouterr().out
    plan, _ = load_plan(out)
    assert plan.first_pass.suite == "mini-large"
    assert {p.prompt_id.split("/")[1].rsplit("-", 2)[0] for p in plan.factors.prompts} == {"mini-large"}


def test_noise_study_plan_refuses_an_unknown_suite_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["noise-study", "plan", "--model", "tiny", "--design", "smoke", "--suite", "nope",
              "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "--suite 'nope'" in err and "mini-large" in err
    assert not (tmp_path / "x").exists()
