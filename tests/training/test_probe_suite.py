"""The `mini` probe suite: held-out prompts of mini's own tasks in the commit-order study's probe format."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from canvaslab.errors import CanvaslabError
from canvaslab.scoring.probes import load_probe_suite, score
from canvaslab.scoring.probes.datasets import load_suite_file
from canvaslab.training.probes import SUITE_TASKS, mini_probe_records
from canvaslab.training.tasks import Mixture

REGIMES = list(SUITE_TASKS)


def _packaged_records() -> list[dict]:
    path = resources.files("canvaslab.scoring.probes").joinpath("data", "suites", "mini.jsonl")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_packaged_suite_is_what_the_generator_makes():
    """Rebuilt without the passage file: every regime but open-ended must match the shipped file."""
    rebuilt = mini_probe_records(None)
    shipped = [r for r in _packaged_records() if r["regime"] != "open_ended"]
    assert json.loads(json.dumps(rebuilt)) == shipped


def test_suite_prompts_are_held_out_never_trained():
    mixture = Mixture(None)
    trained = {mixture.sample(__import__("random").Random(i), "train").prompt for i in range(3000)}
    prompts = {probe.prompt for probe in load_suite_file("mini")}
    assert not prompts & trained


def test_confirmatory_half_holds_the_default_twenty_per_regime():
    probes = load_probe_suite(REGIMES, "confirmatory", 20, suite="mini")
    assert len(probes) == 20 * len(REGIMES)
    assert {p.probe_id.split("/")[1].split("-")[1] for p in probes if p.regime == "math"} == {"add2", "add3", "word"}


@pytest.mark.parametrize("regime", ["math", "factual", "json"])
def test_scorers_judge_mini_probes(regime):
    """A right answer scores True and a wrong one False, with the study's own scorers."""
    probe = next(p for p in load_suite_file("mini") if p.regime == regime)
    right = {"math": lambda r: f"The answer is {r['answer']}.",
             "factual": lambda r: f"It is {r['answers'][0]}.",
             "json": lambda r: json.dumps(r["required_values"])}[regime](probe.reference)
    assert score(probe, right) is True
    assert score(probe, "I do not know.") is False


def test_a_regime_the_suite_lacks_and_an_unknown_suite_are_one_line_errors():
    with pytest.raises(CanvaslabError, match="no code_completion probes"):
        load_probe_suite(["code_completion"], "all", suite="mini")
    with pytest.raises(CanvaslabError, match="unknown probe suite"):
        load_suite_file("nope")
