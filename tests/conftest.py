"""Shared fixtures: one tiny random-weight model per test session (building it takes ~0.1 s, but
sharing it keeps the suite's CPU time down), and the GPU marker's skip."""

from __future__ import annotations

import os
import shutil

# Without a GPU, Triton kernels run in Triton's CPU interpreter. Triton reads this when first imported,
# so it is set before anything imports torch or transformers.
if shutil.which("nvidia-smi") is None:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from canvaslab.models import load_model  # noqa: E402
from suite_guard import SuiteGuard  # noqa: E402

SHORT = {"max_denoising_steps": 4}


def pytest_configure(config):
    # a suite that stops early (an internal error, an interrupt, -x) says so in its last line
    config.pluginmanager.register(SuiteGuard(), "canvaslab-suite-guard")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (run on the GPU machine: pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny():
    return load_model("tiny")


@pytest.fixture(scope="session")
def prompt_ids(tiny):
    return tiny.tokenizer("the man said that the water in the river was cold")["input_ids"]


@pytest.fixture(scope="session")
def tiny_short_canvas(tmp_path_factory):
    """The tiny preset with a 32-token canvas (random weights, float32): several canvases per generation
    stay fast."""
    from canvaslab.models.presets import PRESETS

    config = PRESETS["tiny"].build_config()
    config.canvas_length = 32
    path = tmp_path_factory.mktemp("tiny_short_canvas") / "config.json"
    path.write_text(config.to_json_string())
    return load_model(str(path), dtype="float32")
