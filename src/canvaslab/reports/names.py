"""Compact names for terminal tables: DiffusionGemma's module paths and pass labels, shortened the same
way in every table so that the tables fit 80 columns. The JSON results keep the full names."""

from __future__ import annotations

import re

# Applied in order; each a whole path component (or the op separator), so names stay unambiguous.
_PATH_PARTS = (
    (r"^model\.encoder\.language_model\.", "enc."),
    (r"^model\.encoder\.", "enc."),
    (r"^model\.decoder\.", "dec."),
    (r"^model\.", ""),
    (r"(^|\.)layers\.(\d+)(?=\.|$|::)", r"\1L\2"),
    (r"(^|\.)self_attn(?=\.|$|::)", r"\1attn"),
    (r"(^|\.)input_layernorm(?=\.|$|::)", r"\1in_ln"),
    (r"(^|\.)post_attention_layernorm(?=\.|$|::)", r"\1post_attn_ln"),
    (r"(^|\.)pre_feedforward_layernorm(?=\.|$|::)", r"\1pre_ffn_ln"),
    (r"(^|\.)post_feedforward_layernorm(?=\.|$|::)", r"\1post_ffn_ln"),
    (r"(^|\.)self_conditioning(?=\.|$|::)", r"\1selfcond"),
    (r"(^|\.)rotary_emb(?=\.|$|::)", r"\1rope"),
    (r"::", ":"),
)


def compact_module_path(name: str) -> str:
    """``model.encoder.language_model.layers.0.self_attn.q_proj::mm`` -> ``enc.L0.attn.q_proj:mm``."""
    for pattern, replacement in _PATH_PARTS:
        name = re.sub(pattern, replacement, name)
    return name


def compact_pass(label: str) -> str:
    """``canvas 0 pass 3`` -> ``c0 p3``; ``canvas 0 encoder`` -> ``c0 enc``; the B=1 prompt cache -> ``cache``."""
    if label.startswith("prompt cache"):
        return "cache"
    return label.replace("canvas ", "c").replace(" pass ", " p").replace(" encoder", " enc")


def compact_location(pass_label: str, call: str) -> str:
    """Where in a run: ``c0 p3 dec.L0.router.proj``; in the encoder pass the module already says it,
    so ``canvas 0 encoder`` + ``model.encoder....q_proj`` -> ``c0 enc.L0.attn.q_proj``."""
    where, path = compact_pass(pass_label), compact_module_path(call)
    if where.endswith(" enc") and path.startswith("enc."):
        where = where[: -len(" enc")]
    return f"{where} {path}"
