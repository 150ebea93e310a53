"""Arguments of the Python API that no command line could give (objects, devices torch knows but canvaslab does not
run on, text that is not Unicode, names the system cannot hold): each is a ``CanvaslabError`` before any work."""

from __future__ import annotations

import os

import pytest

import canvaslab
from canvaslab import BatchSizeStudy, CanvaslabError, CommitOrderStudy, NoiseStudy, OpScan, generate, open_results


@pytest.fixture
def no_loading(monkeypatch):
    import canvaslab.models as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("work started before the check"))


@pytest.mark.parametrize("model", [123, None, 1.5, b"tiny", object()])
def test_generate_refuses_a_model_that_is_neither_a_name_nor_a_loaded_model(model, no_loading):
    with pytest.raises(CanvaslabError, match=r"^--model .*: give a preset, an installed model, a checkpoint folder"):
        generate("The river", model=model)


@pytest.mark.parametrize("device", ["meta", "mps", "CPU", "cuda:", " cpu", 0])
def test_a_device_canvaslab_does_not_run_on_is_refused_before_loading(device, no_loading):
    with pytest.raises(CanvaslabError, match=r"^--device .*: must be auto, cpu, cuda or cuda:N"):
        generate("The river", device=device)
    with pytest.raises(CanvaslabError, match=r"^--device "):
        canvaslab.load_model("tiny", device=device)


@pytest.mark.parametrize("plan_type", [BatchSizeStudy, OpScan, CommitOrderStudy, NoiseStudy])
def test_every_plan_refuses_such_a_device(plan_type):
    with pytest.raises(CanvaslabError, match=r"^--device 'meta'"):
        plan_type(device="meta")


def test_a_prompt_that_is_not_unicode_is_refused(no_loading):
    with pytest.raises(CanvaslabError, match=r"^--prompt: character 7 is not Unicode text"):
        generate(["fine", os.fsdecode(b"river \xff")])


@pytest.mark.parametrize("name", ["a" * 256, "é" * 128])
def test_a_path_component_over_255_bytes_is_one_line(name, tmp_path, no_loading):
    with pytest.raises(CanvaslabError, match="255 bytes"):
        open_results(tmp_path / name)
    with pytest.raises(CanvaslabError, match="255 bytes"):
        canvaslab.export(tmp_path / name)
    with pytest.raises(CanvaslabError, match="255 bytes"):
        canvaslab.report([tmp_path / name])
    with pytest.raises(CanvaslabError, match="255 bytes"):
        generate("The river", model=str(tmp_path / name / "config.json"))
    with pytest.raises(CanvaslabError, match="255 bytes"):
        BatchSizeStudy(model=str(tmp_path / name))


def test_the_loader_itself_refuses_such_a_path(tmp_path):
    from canvaslab.models import load_model

    with pytest.raises(CanvaslabError, match="255 bytes"):
        load_model(str(tmp_path / ("a" * 256)))


def test_prompts_that_are_not_texts_are_named_so(no_loading):
    with pytest.raises(CanvaslabError, match=r"^--prompt: give texts \(str\), not bytes$"):
        generate(["fine", b"river"])
    with pytest.raises(CanvaslabError, match=r"^prompts: character 1 is not Unicode text"):
        BatchSizeStudy(prompts=["fine", os.fsdecode(b"\xff river")])
