"""`canvaslab mini train` with no training options is the shipped `mini`'s recipe, as its run recorded it."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from canvaslab.cli.main import app
from canvaslab.models.mini import load_mini_tokenizer
from canvaslab.training import run as training_run
from canvaslab.training.recipe import SHIPPED
from canvaslab.training.tasks import mixture_shares, parse_shares

SHIPPED_RUN = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "mini" / "training.json"


def test_the_recipe_is_what_the_shipped_run_recorded():
    recorded = json.loads(SHIPPED_RUN.read_text())
    settings = recorded["settings"]
    assert (settings["steps"], settings["batch_size"], settings["learning_rate"]) == (
        SHIPPED.steps, SHIPPED.batch_size, SHIPPED.learning_rate)
    assert recorded["pool_examples"] == SHIPPED.examples
    assert recorded["mixture_shares"] == mixture_shares(parse_shares(SHIPPED.mixture))
    assert recorded["vocabulary"] == len(load_mini_tokenizer())  # trained on the tokenizer that ships


def test_mini_train_without_training_options_trains_by_the_recipe(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(training_run, "train_models", lambda spec, log: seen.setdefault("spec", spec))
    monkeypatch.setattr(training_run, "evaluate_models", lambda *args, **kwargs: None)
    monkeypatch.setattr("canvaslab.training.card.write_card", lambda out: out / "MODEL_CARD.md")
    result = CliRunner().invoke(app, ["mini", "train", "--out", str(tmp_path / "run"), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    spec = seen["spec"]
    assert (spec.settings.steps, spec.settings.batch_size, spec.settings.learning_rate, spec.examples) == (
        SHIPPED.steps, SHIPPED.batch_size, SHIPPED.learning_rate, SHIPPED.examples)
    assert dict(spec.shares) == parse_shares(SHIPPED.mixture)
