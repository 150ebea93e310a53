"""A prompt longer than the model's context less the completion budget is refused in one line before the
model runs, wherever generation starts (the runner, ``canvaslab.generate``, the command line): positions past
the context have no trained rotary embedding, so the text would be garbage without a word."""

from __future__ import annotations

import dataclasses

import pytest
from typer.testing import CliRunner

import canvaslab
from canvaslab.cli.main import app
from canvaslab.errors import CanvaslabError
from canvaslab.generation import generate
from canvaslab.generation.runner import max_prompt_tokens
from canvaslab.models.presets import PRESETS


@pytest.fixture(scope="module")
def short_context(tmp_path_factory):
    """tiny with a 32-token canvas and a 96-token context: 64 prompt tokens fit with one canvas's budget."""
    config = PRESETS["tiny"].build_config()
    config.canvas_length = 32
    config.text_config.max_position_embeddings = 96
    path = tmp_path_factory.mktemp("short_context") / "config.json"
    path.write_text(config.to_json_string())
    return path


def test_the_limit_is_the_context_less_the_canvases_of_the_budget(short_context):
    config = canvaslab.load_model(str(short_context)).model.config
    assert max_prompt_tokens(config, 32) == 64
    assert max_prompt_tokens(config, 33) == 32  # two canvases


def test_the_runner_refuses_a_prompt_past_the_context_and_runs_one_within_it(short_context):
    loaded = canvaslab.load_model(str(short_context))
    with pytest.raises(CanvaslabError, match="65 tokens; this model takes at most 64"):
        generate(loaded, [[5] * 10, [5] * 65], generation={"max_new_tokens": 32, "max_denoising_steps": 1})
    out = generate(loaded, [[5] * 64], generation={"max_new_tokens": 32, "max_denoising_steps": 1})
    assert len(out.rows) == 1
    # the budget counts in whole canvases, and the line says so
    with pytest.raises(CanvaslabError, match=r"at most 32: its context of 96 less the completion budget of 33 "
                                             r"tokens, 2 canvases of 32 \(64 positions\)"):
        generate(loaded, [[5] * 33], generation={"max_new_tokens": 33, "max_denoising_steps": 1})


def test_a_server_whose_budget_fills_the_context_is_refused_before_it_starts(short_context):
    from canvaslab.serving import Engine, ServeSettings

    loaded = canvaslab.load_model(str(short_context))  # its budget: 256 tokens, 8 canvases, past the context
    with pytest.raises(CanvaslabError, match="leaves no room for a prompt"):
        Engine(loaded, ServeSettings("short", steps=1))


def test_a_canvas_of_no_tokens_is_one_line(short_context):
    config = canvaslab.load_model(str(short_context)).model.config
    config.canvas_length = 0
    with pytest.raises(CanvaslabError, match="canvas_length 0"):
        max_prompt_tokens(config, 32)


def test_an_unset_budget_is_the_one_transformers_uses(short_context):
    loaded = canvaslab.load_model(str(short_context))
    loaded.model.generation_config.max_new_tokens = None
    settings = dict(loaded.generation_defaults)
    settings.pop("max_new_tokens", None)
    # transformers' default budget, 256 tokens, is 8 canvases of 32: more than the 96-token context holds
    with pytest.raises(CanvaslabError, match=r"budget of 256 tokens, 8 canvases of 32 \(256 positions\) leaves no room"):
        generate(dataclasses.replace(loaded, generation_defaults=settings), [[5] * 10],
                 generation={"max_denoising_steps": 1})


def test_the_command_line_says_it_in_one_line(short_context):
    long_prompt = " ".join(["river"] * 200)
    result = CliRunner().invoke(app, ["generate", "--model", str(short_context), "--prompt", long_prompt,
                                      "--steps", "1", "--max-new-tokens", "32"])
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "this model takes at most 64" in lines[0], result.stderr
