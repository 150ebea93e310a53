"""What the noise-study plan needs to know about a model, read without building its weights.

A plan is written before anything runs, often on a machine that could not hold the model (a laptop
registering a GPU study). It needs only the vocabulary (which ids are ``<unusedN>``, which are special),
the canvas length and the generation defaults. Presets and ``config.json`` specs go through
``load_model`` on the ``meta`` device (no memory, no compute); a checkpoint directory is read for its
config and tokenizer only, since ``load_model`` would load every weight.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer, DiffusionGemmaConfig, PreTrainedTokenizerBase

from canvaslab.errors import CanvaslabError
from canvaslab.models.weights import weights_fingerprint
from canvaslab.models import load_model


@dataclass
class ModelFacts:
    """The model as the plan records it: how to load it and the facts the design depends on."""

    spec: str
    layers: int | None
    model_seed: int
    vocab_size: int
    canvas_length: int
    generation_defaults: dict[str, Any]
    # canvaslab.models.weights: which trained weights ``spec`` named when the plan was registered (None for
    # random weights, and in plans registered before it was recorded)
    weights: str | None = None


def _checkpoint_facts(path: Path) -> tuple[DiffusionGemmaConfig, PreTrainedTokenizerBase]:
    try:
        config = DiffusionGemmaConfig.from_pretrained(path, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as error:
        raise CanvaslabError(f"cannot read the config and tokenizer of {path}: {str(error).splitlines()[0]}") from None
    return config, tokenizer


def read_model_facts(spec: str, layers: int | None = None,
                     model_seed: int = 0) -> tuple[ModelFacts, PreTrainedTokenizerBase]:
    """The plan's model facts and the model's tokenizer, without loading weights."""
    path = Path(spec).expanduser()
    if path.is_dir():
        config, tokenizer = _checkpoint_facts(path)
        defaults: dict[str, Any] = {}  # a checkpoint's own generation_config.json applies at run time
    else:
        loaded = load_model(spec, device="meta", layers=layers, seed=model_seed)
        config, tokenizer, defaults = loaded.model.config, loaded.tokenizer, loaded.generation_defaults
    facts = ModelFacts(spec=spec, layers=layers, model_seed=model_seed, vocab_size=config.text_config.vocab_size,
                       canvas_length=config.canvas_length, generation_defaults=dict(defaults),
                       weights=weights_fingerprint(spec))
    return facts, tokenizer
