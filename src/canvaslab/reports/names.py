"""Compact names for terminal tables: DiffusionGemma's module paths and pass labels, shortened the same
way in every table so that the tables fit 80 columns (the parts' names come from
``canvaslab.models.anatomy``). The JSON results keep the full names.

``cell`` makes any value a table cell that rich shows as it is: control characters escaped (the value may come
from a prompt file, a model or a study folder) and no ``[...]`` read as markup."""

from __future__ import annotations

import re

from rich.text import Text

from canvaslab.models import anatomy
from canvaslab.terminal import printable


def cell(value: object) -> Text:
    """``value`` as rich text: every control character escaped, brackets shown literally (never markup)."""
    return Text(printable(value))


def plain(text: str) -> Text:
    """Text composed here (its outside parts already passed through ``printable``), newlines kept: brackets
    shown literally (never markup)."""
    return Text(text)


def _component(name: str, short: str) -> tuple[str, str]:
    """Rename ``name`` where it is a whole path component (or ends before the op separator)."""
    return rf"(^|\.){re.escape(name)}(?=\.|$|::)", rf"\1{short}"


# Applied in order; each a whole path component (or the op separator), so names stay unambiguous.
_PATH_PARTS = (
    (rf"^{re.escape(anatomy.ENCODER_TEXT)}\.", "enc."),
    (rf"^{re.escape(anatomy.ENCODER)}\.", "enc."),
    (rf"^{re.escape(anatomy.DECODER)}\.", "dec."),
    (rf"^{re.escape(anatomy.BACKBONE)}\.", ""),
    (rf"(^|\.){re.escape(anatomy.LAYERS)}\.(\d+)(?=\.|$|::)", r"\1L\2"),
    _component(anatomy.ATTENTION, "attn"),
    _component(anatomy.INPUT_NORM, "in_ln"),
    _component(anatomy.POST_ATTENTION_NORM, "post_attn_ln"),
    _component(anatomy.PRE_FEEDFORWARD_NORM, "pre_ffn_ln"),
    _component(anatomy.POST_FEEDFORWARD_NORM, "post_ffn_ln"),
    _component(anatomy.SELF_CONDITIONING, "selfcond"),
    _component(anatomy.ROTARY, "rope"),
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
