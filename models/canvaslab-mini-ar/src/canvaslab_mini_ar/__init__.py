"""``mini-ar``, the autoregressive sibling of canvaslab's ``mini`` (a Gemma 4 causal LM of the same size).

The checkpoint folder (``checkpoint/``: config, generation config, weights in safetensors shards, tokenizer)
is package data; ``preset`` is the entry point canvaslab's model registry calls (group ``canvaslab.models``).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__version__ = "1.0.0"

NAME = "mini-ar"


def checkpoint_folder() -> Path:
    """The installed checkpoint: an ordinary transformers folder (``from_pretrained`` loads it)."""
    return Path(str(resources.files(__name__).joinpath("checkpoint")))


def preset() -> dict:
    """What canvaslab needs to know of this model (the ``canvaslab.models`` entry-point contract)."""
    return {
        "folder": checkpoint_folder(),
        "kind": "causal",
        "baseline": None,
        "description": "mini's autoregressive sibling: a Gemma 4 causal LM of its size, trained on the same examples",
    }
