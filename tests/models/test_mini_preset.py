"""The `mini` model (distribution canvaslab-mini, found through the ``canvaslab.models`` entry points): trained
weights loaded by transformers' own from_pretrained, with the checkpoint's sampler defaults; its AR sibling
(canvaslab-mini-ar) is what ``--baseline mini`` loads. These tests need both packages installed (the README's
test command installs them); without them they fail with the line that says how to install them."""

from __future__ import annotations

import pytest
import torch
from transformers import DiffusionGemmaForBlockDiffusion

from canvaslab.generation import generate
from canvaslab.models import load_model
from canvaslab.models.mini import MINI_VOCAB
from canvaslab.models.registry import baseline_of, model_folder
from canvaslab.studies.commit_order.baseline import check_baseline_path, load_causal_lm
from canvaslab.scoring.prompting import encode_prompt

MAX_BYTES = 40_000_000  # mini is at most 40 MB in the repository


def test_packaged_mini_is_a_transformers_checkpoint_under_40_mb():
    folder = model_folder("mini")
    weights = sorted(folder.glob("model-*.safetensors"))
    assert weights and sum(path.stat().st_size for path in weights) <= MAX_BYTES
    assert all(path.stat().st_size < 16 * 2**20 for path in weights)
    model = DiffusionGemmaForBlockDiffusion.from_pretrained(folder, local_files_only=True)
    assert model.config.canvas_length == 128 and model.config.text_config.vocab_size == MINI_VOCAB


@pytest.mark.slow
def test_mini_preset_loads_with_its_sampler_defaults_and_stops_early():
    loaded = load_model("mini")
    assert loaded.source["kind"] == "preset" and loaded.source["name"] == "mini"
    assert loaded.generation_defaults["max_denoising_steps"] == 48
    assert loaded.generation_defaults["entropy_bound"] == 0.1 and loaded.generation_defaults["max_new_tokens"] == 256
    prompts = [encode_prompt(loaded.tokenizer, text) for text in
               ("What is 23 + 45?", "What's the sum of 39 and 90?", "Name the capital of Boustokisania.")]
    output = generate(loaded, prompts, seed=0)
    # A trained model is confident early: the stopping rule fires well inside the 48-pass budget,
    # one canvas each (random weights run to the budget). The country is one of the knowledge base's: asked
    # about one it never saw ("Valdoria"), an earlier `mini` was unsure for 28 passes, as it should be.
    assert all(len(row.passes) == 1 and row.passes[0] < 24 for row in output.rows)


def test_baseline_mini_is_the_shipped_sibling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no folder named mini here
    path = check_baseline_path("mini")
    assert baseline_of("mini") == "mini-ar" and path == model_folder("mini-ar")
    model, tokenizer = load_causal_lm("mini")
    assert type(model).__name__ == "Gemma4ForCausalLM" and len(tokenizer) == MINI_VOCAB
    assert model.config.vocab_size == MINI_VOCAB


def test_a_folder_named_mini_is_still_a_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mini").mkdir()
    with pytest.raises(Exception, match="no config.json"):
        check_baseline_path("mini")


def test_checkpoint_generation_defaults_come_from_its_generation_config():
    """Studies read the budget from ``generation_defaults``: a checkpoint's used to be empty (KeyError)."""
    loaded = load_model(str(model_folder("mini")), dtype="float32")
    assert loaded.generation_defaults["max_denoising_steps"] == 48
    assert loaded.generation_defaults["eos_token_id"] == [1, 106]
    assert loaded.model.dtype == torch.float32


def test_loading_mini_prints_no_progress_bar_without_a_terminal(capfd):
    from canvaslab.models import load_model

    capfd.readouterr()
    load_model("mini")
    assert "Loading" not in capfd.readouterr().err  # transformers' weight-loading bar, noise in a log
