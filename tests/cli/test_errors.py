"""Bad input gets one clear line naming the problem, exit code 2, and no traceback."""

import json

import pytest
import torch

from canvaslab.cli.main import main
from canvaslab.models.tokenizer import build_synthetic_tokenizer


def _fails(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    return err


def test_missing_model_path(capsys, tmp_path):
    assert "neither a preset" in _fails(capsys, "batch-study", "--model", str(tmp_path / "nope"))


def test_config_that_is_not_diffusion_gemma(capsys, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    assert "model_type 'llama'" in _fails(capsys, "generate", "--prompt", "hi", "--model", str(config))


def test_directory_without_config(capsys, tmp_path):
    assert "without config.json" in _fails(capsys, "generate", "--prompt", "hi", "--model", str(tmp_path))


def test_checkpoint_without_weights(capsys, tmp_path, tiny):
    tiny.model.config.save_pretrained(tmp_path)
    assert "no weights" in _fails(capsys, "generate", "--prompt", "hi", "--model", str(tmp_path))


def test_tokenizer_vocab_mismatch(capsys, tmp_path, tiny):
    tiny.model.save_pretrained(tmp_path)
    build_synthetic_tokenizer(1024).save_pretrained(tmp_path)
    capsys.readouterr()  # save_pretrained's progress bar
    assert "1024 ids but the model's vocabulary has 512" in _fails(
        capsys, "generate", "--prompt", "hi", "--model", str(tmp_path))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_asked_but_absent(capsys):
    assert "no CUDA device" in _fails(capsys, "batch-study", "--device", "cuda")


@pytest.mark.parametrize("sizes, message", [("0,2", "0 is impossible"), ("1,x", "whole numbers"), ("-3", "impossible")])
def test_impossible_batch_sizes(capsys, sizes, message):
    assert message in _fails(capsys, "batch-study", "--batch-sizes", sizes)


def test_malformed_prompt_files(capsys, tmp_path):
    bad_json = tmp_path / "prompts.jsonl"
    bad_json.write_text('{"prompt": "fine"}\n{"prompt": oops}\n')
    assert f"{bad_json}:2" in _fails(capsys, "batch-study", "--prompts", str(bad_json))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    assert "has no prompts" in _fails(capsys, "batch-study", "--prompts", str(empty))
    assert "does not exist" in _fails(capsys, "batch-study", "--prompts", str(tmp_path / "missing.txt"))


def test_bad_choices(capsys):
    assert "--dtype" in _fails(capsys, "generate", "--prompt", "hi", "--dtype", "int3")
    assert "--rng" in _fails(capsys, "generate", "--prompt", "hi", "--rng", "sometimes")
    assert "--fill" in _fails(capsys, "batch-study", "--fill", "random", "--prompts", "1", "--batch-sizes", "1,2")
    assert "built-in set" in _fails(capsys, "batch-study", "--prompts", "99")


@pytest.mark.parametrize("argv,expected", [
    (["--row", "3", "--batch-sizes", "1,2,8"], "does not exist at batch size 2"),
    (["--row", "-1"], "0 or more"),  # the shared whole-number check, at parse time
    (["--row", "1", "--batch-sizes", "1,4", "--mode", "rowwise"], "rowwise"),
])
def test_impossible_studied_row(capsys, monkeypatch, argv, expected):
    import canvaslab.models as models

    # the command imports load_model when it runs: patched where it is looked up
    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("work started before the check"))
    assert expected in _fails(capsys, "batch-study", *argv)
