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


# ---- files and arguments from elsewhere ------------------------------------------------------------------

def _preset_config(tmp_path, name: str, **text_config) -> str:
    from canvaslab.models.presets import PRESETS

    config = PRESETS["tiny"].build_config(None).to_dict()
    config["text_config"].update(text_config)
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return str(path)


@pytest.mark.parametrize("command", [["generate", "--prompt", "hi"], ["serve"]])
def test_a_config_nested_100000_deep_is_one_line(capsys, tmp_path, command):
    deep = tmp_path / "config.json"
    deep.write_text('{"model_type": "diffusion_gemma", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert "nests arrays and objects more than 100 deep" in _fails(capsys, *command, "--model", str(deep))


@pytest.mark.parametrize("field, value", [("vocab_size", -5), ("hidden_size", 0), ("num_attention_heads", 2.5),
                                          ("vocab_size", True)])
def test_a_config_with_an_impossible_size_is_one_line(capsys, tmp_path, field, value):
    config = _preset_config(tmp_path, "config.json", **{field: value})
    assert f"text_config.{field} is {value!r}; it must be a whole number of at least 1" in _fails(
        capsys, "generate", "--prompt", "hi", "--model", config)


def test_a_layer_of_impossible_size_is_one_line(capsys, tmp_path):
    config = _preset_config(tmp_path, "config.json", per_layer_config={"1": {"head_dim": -32}})
    assert "text_config.per_layer_config.1.head_dim is -32" in _fails(
        capsys, "generate", "--prompt", "hi", "--model", config)


def test_a_prompt_that_is_not_utf8_is_one_line(capsys, monkeypatch):
    import os

    import canvaslab.models as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("work started before the check"))
    prompt = os.fsdecode(b"caf\xe9 \xff")  # how the system passes an argument that is not UTF-8
    assert "--prompt: character 4 is not Unicode text" in _fails(capsys, "generate", "--prompt", prompt)


@pytest.mark.parametrize("device", ["meta", "CPU", "mps", "cuda:x"])
def test_a_device_canvaslab_does_not_run_on_is_refused_at_parse_time(capsys, monkeypatch, device):
    import canvaslab.models as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("work started before the check"))
    assert f"--device {device!r}: must be auto, cpu, cuda or cuda:N" in _fails(
        capsys, "generate", "--prompt", "hi", "--device", device)


def test_a_name_too_long_for_the_system_reaching_it_unchecked_is_one_line(capsys, tmp_path):
    import typer
    from typer.testing import CliRunner

    from canvaslab.cli.app import CanvaslabGroup

    probe = typer.Typer(cls=CanvaslabGroup)

    @probe.command()
    def read(path: str) -> None:
        open(path).close()

    @probe.command()
    def other() -> None:
        pass

    result = CliRunner().invoke(probe, ["read", str(tmp_path / ("a" * 256))])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "a name in this path is over 255 bytes" in result.output and len(result.output.strip().splitlines()) == 1


def test_an_error_line_is_cut_to_a_bounded_length(capsys):
    from canvaslab.cli.app import print_error
    from canvaslab.errors import LINE_LIMIT

    print_error("start " + "x" * 10_000_000 + "\n" * 3 + " the fix")
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("error: start ") and err.rstrip().endswith("the fix")
    assert len(err) <= LINE_LIMIT + len("error: \n")


@pytest.mark.parametrize("name", ["generation_config.json", "tokenizer_config.json"])
def test_a_checkpoint_file_nested_100000_deep_is_one_line(capsys, tmp_path, tiny, name):
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    (tmp_path / name).write_text('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    capsys.readouterr()  # save_pretrained's progress bar
    assert f"{name} nests arrays and objects more than 100 deep" in _fails(
        capsys, "generate", "--prompt", "hi", "--model", str(tmp_path))


def test_a_tokenizer_folder_file_nested_100000_deep_is_one_line(capsys, tmp_path, tiny):
    tiny.tokenizer.save_pretrained(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert "tokenizer_config.json nests arrays and objects more than 100 deep" in _fails(
        capsys, "vocab-scan", "--tokenizer", str(tmp_path), "--out", str(tmp_path / "out"))


def test_a_config_whose_weights_cannot_be_allocated_is_one_line(capsys, tmp_path):
    config = _preset_config(tmp_path, "config.json", vocab_size=10**13)  # 1.3 PB: over any address space
    assert "its weights do not fit in cpu's memory" in _fails(capsys, "generate", "--prompt", "hi", "--model", config)
