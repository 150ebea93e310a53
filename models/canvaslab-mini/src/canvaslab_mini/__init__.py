"""``mini``, a DiffusionGemma scaled down to 18M parameters and trained from scratch, for canvaslab's ``--model mini``.

The checkpoint folder (``checkpoint/``: config, generation config, weights in safetensors shards, tokenizer)
is package data; ``preset`` is the entry point canvaslab's model registry calls (group ``canvaslab.models``).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__version__ = "1.1.0"

NAME = "mini"


def checkpoint_folder() -> Path:
    """The installed checkpoint: an ordinary transformers folder (``from_pretrained`` loads it)."""
    return Path(str(resources.files(__name__).joinpath("checkpoint")))


def preset() -> dict:
    """What canvaslab needs to know of this model (the ``canvaslab.models`` entry-point contract)."""
    return {
        "folder": checkpoint_folder(),
        "kind": "diffusion",
        "baseline": "mini-ar",
        "description": "a DiffusionGemma of 18M parameters trained from scratch (canvas of 128 positions)",
    }
