"""A prompt too short for the copied prompt cache is refused before any unit runs: one line, exit 2."""

import pytest

from canvaslab.cli.main import main
from canvaslab.models.loading import load_model, load_tokenizer


@pytest.mark.parametrize("executor", [[], ["--executor", "ray", "--workers", "1"]], ids=["local", "ray"])
def test_batch_study_refuses_a_one_token_prompt_before_running(capsys, tmp_path, executor):
    prompts = tmp_path / "one.txt"
    prompts.write_text("the man said that the water was cold\nabc\n")  # "abc" is one token (<unk>) for tiny
    out = tmp_path / "runs" / "one"
    with pytest.raises(SystemExit) as exit_info:
        main(["batch-study", "--prompts", str(prompts), "--batch-sizes", "1,2", "--steps", "1", "--out", str(out),
              *executor])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("error:") and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "line-2" in err and "1 token" in err and "--no-copy-prompt-cache" in err
    assert "runs diverged" not in captured.out  # no table of an empty study
    assert not out.exists()  # nothing started: no store, no failure note


@pytest.mark.parametrize("spec", ["tiny", "mini"])
def test_the_tokenizer_alone_is_the_loaded_models(spec):
    text = "What is 12 plus 30? the man said that the water was cold"
    assert load_tokenizer(spec)(text)["input_ids"] == load_model(spec).tokenizer(text)["input_ids"]
