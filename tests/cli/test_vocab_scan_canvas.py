"""``canvaslab vocab-scan`` counts unused tokens per canvas of the model the tokenizer belongs to: mini's 128,
the presets' 256, a checkpoint folder's ``canvas_length``; a tokenizer of no model gets DiffusionGemma's 256, and
the output says where the length came from. ``--canvas-length`` overrides all of them."""

from __future__ import annotations

import json
import shutil

import pytest

from canvaslab.cli.main import main
from canvaslab.models.mini import mini_tokenizer_folder


def _scan(capsys, tmp_path, *args: str) -> tuple[dict, str]:
    out = tmp_path / "scan"
    main(["vocab-scan", *args, "--out", str(out)])
    printed = capsys.readouterr().out
    return json.loads((out / "vocab_scan.json").read_text()), " ".join(printed.split())


def _expected(report: dict, length: int) -> float:
    return length * report["unused_count"] / report["vocab_size"]


def test_mini_is_scanned_at_minis_canvas(capsys, tmp_path):
    pytest.importorskip("canvaslab_mini")
    report, printed = _scan(capsys, tmp_path, "--tokenizer", "mini")
    assert report["canvas_length"] == 128 and report["expected_unused_per_canvas"] == _expected(report, 128)
    assert "expected per canvas of 128" in printed and "canvas of 128 tokens: mini's" in printed, printed


@pytest.mark.parametrize("preset", ["tiny", "real-shapes"])
def test_a_preset_is_scanned_at_its_models_canvas(capsys, tmp_path, preset):
    report, printed = _scan(capsys, tmp_path, "--tokenizer", preset)
    assert report["canvas_length"] == 256 and f"canvas of 256 tokens: the {preset} model's" in printed, printed


def test_a_checkpoint_folder_gives_its_canvas_length(capsys, tmp_path):
    folder = shutil.copytree(mini_tokenizer_folder(), tmp_path / "checkpoint")
    (folder / "config.json").write_text(json.dumps({"model_type": "diffusion_gemma", "canvas_length": 64}))
    report, printed = _scan(capsys, tmp_path, "--tokenizer", str(folder))
    assert report["canvas_length"] == 64 and report["expected_unused_per_canvas"] == _expected(report, 64)
    assert report["canvas_length_source"] == f"canvas_length of {folder / 'config.json'}" and "canvas of 64" in printed


def test_a_tokenizer_of_no_model_says_what_the_256_is(capsys, tmp_path):
    report, printed = _scan(capsys, tmp_path, "--tokenizer", str(mini_tokenizer_folder()))
    assert report["canvas_length"] == 256
    assert "DiffusionGemma's" in printed and "--canvas-length" in printed, printed


def test_the_option_overrides_the_models_canvas(capsys, tmp_path):
    report, printed = _scan(capsys, tmp_path, "--tokenizer", "mini", "--canvas-length", "32")
    assert report["canvas_length"] == 32 and "canvas of 32 tokens: --canvas-length" in printed, printed
