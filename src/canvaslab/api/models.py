"""Load a model and generate from Python, with the command line's names, defaults and checks.

    >>> import canvaslab
    >>> out = canvaslab.generate(["The river"], model="tiny", mode="invariant", steps=2)  # doctest: +SKIP
    >>> out.texts  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

from canvaslab import choices
from canvaslab.errors import CanvaslabError


def check_model_options(model: str, dtype: str, layers: Optional[int], model_seed: int,
                        steps: Optional[int] = None, max_new_tokens: Optional[int] = None, *,
                        device: str = "cpu") -> None:
    """``--model`` and its companions, checked as the command line checks them (no torch import): an installed
    model's name is looked up in its package's entry point, so one that is not installed is one line."""
    if not isinstance(model, str) or not model.strip():
        raise CanvaslabError(f"--model {model!r}: give a preset, an installed model, a checkpoint folder or a "
                             "config.json")
    if model not in choices.PRESET_NAMES:
        from canvaslab.models.registry import find_diffusion_model

        choices.checked_path("--model", model)
        find_diffusion_model(model)
    choices.device("--device", device)
    choices.one_of("--dtype", dtype, choices.DTYPES)
    choices.optional_whole_number("--layers", layers, 1)
    choices.whole_number("--model-seed", model_seed, 0, choices.MAX_SEED)
    choices.optional_whole_number("--steps", steps, 1, choices.MAX_STEPS)
    choices.optional_whole_number("--max-new-tokens", max_new_tokens, 1, choices.MAX_NEW_TOKENS)


def model_record(model: str, dtype: str, device: str, layers: Optional[int], seed: int) -> dict[str, Any]:
    """The model as a study's plan records it, with the fingerprint of the trained weights behind the name
    (``canvaslab.models.weights``): a folder resumed with retrained weights is another plan. Random weights have
    none, and their plans stay as before it existed (their folders still resume)."""
    from canvaslab.models.weights import weights_fingerprint

    spec = {"spec": model, "dtype": dtype, "device": device, "layers": layers, "seed": seed}
    weights = weights_fingerprint(model)
    return spec if weights is None else {**spec, "weights": weights}


def load_model(model: str = "tiny", *, dtype: str = "auto", device: str = "cpu", layers: Optional[int] = None,
               model_seed: int = 0):
    """A ready model and tokenizer (``LoadedModel``): a preset (``tiny``, ``real-shapes``: random weights), an
    installed model (``mini``), a local checkpoint folder, or a ``config.json`` (random weights)."""
    model = os.fspath(model) if isinstance(model, os.PathLike) else model
    check_model_options(model, dtype, layers, model_seed, device=device)
    from canvaslab.models import load_model as load

    return load(model, dtype=dtype, device=device, layers=layers, seed=model_seed)


@dataclass(frozen=True)
class GeneratedRow:
    """One prompt's generation.

    ``tokens`` are the answer's token ids, the ones ``text`` decodes: the generated canvas up to, not including, its
    first end-of-sequence token. The canvas goes on after that token, filled with the pad id
    (``Generation.settings["pad_token_id"]``, 0 for the presets and ``mini``); those positions are not part of
    ``tokens``. Without an end-of-sequence token (the budget used up), ``tokens`` is the whole generated canvas."""

    prompt: str
    text: str
    tokens: tuple[int, ...]  # the answer's token ids: no end-of-sequence token, no padding
    stop_passes: tuple[Optional[int], ...]  # per canvas: decoder passes until the stop fired (None: budget used up)
    passes: tuple[int, ...]  # per canvas: the decoder passes that counted for this row
    eos_position: Optional[int]  # where the canvas's first end-of-sequence token is: len(tokens) (None: none)

    @property
    def stop_point(self) -> dict[str, Any]:
        return {"stop_passes": list(self.stop_passes), "eos_position": self.eos_position}


@dataclass(frozen=True)
class Generation:
    """One generate call: a row per prompt, in order, and the generation settings it used (the model's
    defaults with the overrides)."""

    rows: tuple[GeneratedRow, ...]
    settings: dict[str, Any]

    @property
    def texts(self) -> list[str]:
        return [row.text for row in self.rows]

    @property
    def tokens(self) -> list[tuple[int, ...]]:
        """Each row's answer tokens (``GeneratedRow.tokens``: no end-of-sequence token, no padding)."""
        return [row.tokens for row in self.rows]


def generate(prompts: Union[str, Sequence[str]], model: Any = "tiny", *, mode: str = "stock", rng: str = "row",
             seed: int = 0, dtype: str = "auto", device: str = "cpu", layers: Optional[int] = None,
             model_seed: int = 0, steps: Optional[int] = None, max_new_tokens: Optional[int] = None) -> Generation:
    """Generate one row per prompt, batched, with transformers' own DiffusionGemma loop (``canvaslab generate``).

    ``model``: a name or path as for ``load_model``, or a model ``load_model`` returned (reused, so a notebook
    loads it once; ``dtype``, ``device``, ``layers`` and ``model_seed`` then do not apply). ``mode``: stock,
    rowwise or invariant (batch-invariant ops: a row's text does not depend on what shares its batch). A model
    with a chat template (the trained ``mini``) gets each prompt as its user turn."""
    if isinstance(prompts, bytes) or not isinstance(prompts, Iterable):
        raise CanvaslabError(f"--prompt {prompts!r}: give a text or a list of texts")
    prompts = (prompts,) if isinstance(prompts, str) else tuple(prompts)
    wrong = [text for text in prompts if not isinstance(text, str)]
    if wrong:
        raise CanvaslabError(f"--prompt: give texts (str), not {type(wrong[0]).__name__}")
    if not prompts or any(not text.strip() for text in prompts):
        raise CanvaslabError("--prompt must not be empty")
    for text in prompts:
        choices.unicode_text("--prompt", text)
    choices.one_of("--mode", mode, choices.MODES)
    choices.one_of("--rng", rng, choices.RNGS)
    choices.whole_number("--seed", seed, 0, choices.MAX_SEED)
    choices.optional_whole_number("--steps", steps, 1, choices.MAX_STEPS)
    choices.optional_whole_number("--max-new-tokens", max_new_tokens, 1, choices.MAX_NEW_TOKENS)
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    loaded = load_model(model, dtype=dtype, device=device, layers=layers, model_seed=model_seed) \
        if isinstance(model, str) else _loaded(model)
    from canvaslab.generation import generate as generate_rows
    from canvaslab.scoring.prompting import encode_prompt

    ids = [encode_prompt(loaded.tokenizer, text) for text in prompts]
    output = generate_rows(loaded, ids, seed=seed, rng=rng, mode=mode,
                           generation={"max_denoising_steps": steps, "max_new_tokens": max_new_tokens})
    rows = tuple(_generated_row(text, row) for text, row in zip(prompts, output.rows))
    return Generation(rows, dict(output.settings))


def _loaded(model: Any):
    """``model`` if it is a model ``load_model`` returned, else one line saying what ``model`` takes."""
    from canvaslab.models import LoadedModel

    if not isinstance(model, LoadedModel):
        raise CanvaslabError(f"--model {model!r}: give a preset, an installed model, a checkpoint folder, a "
                             "config.json, or a model canvaslab.load_model returned")
    return model


def _generated_row(prompt: str, row: Any) -> GeneratedRow:
    """The runner's row as the API gives it: the tokens cut at the end-of-sequence token (see ``GeneratedRow``)."""
    return GeneratedRow(prompt, row.text, tuple(row.answer_tokens), tuple(row.stop_passes), tuple(row.passes),
                        row.eos_position)
