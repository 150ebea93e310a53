"""How a probe's text becomes the token ids a model is given, the same way for every model of the study.

Instruction-tuned checkpoints (``google/diffusiongemma-26B-A4B-it``, and the Gemma 4 baseline) expect
their chat template: without it they answer a different question than the one asked. The synthetic
tokenizers of the random-weight presets have no template, so their prompts are encoded as plain text.
Using one function for the diffusion model and the autoregressive baseline keeps the two comparable.
"""

from __future__ import annotations

from canvaslab.errors import CanvaslabError


def uses_chat_template(tokenizer) -> bool:
    """Whether ``encode_prompt`` wraps prompts in the tokenizer's chat template (recorded in results)."""
    return bool(getattr(tokenizer, "chat_template", None))


def encode_prompt(tokenizer, text: str) -> list[int]:
    """One user turn plus the generation prompt when the tokenizer has a chat template, else plain ids."""
    if uses_chat_template(tokenizer):
        encoded = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, return_dict=True
        )
        ids = list(encoded["input_ids"])
    else:
        ids = list(tokenizer(text)["input_ids"])
    if not ids:
        raise CanvaslabError(f"prompt {text[:40]!r} encodes to no tokens")
    return ids
