"""Built-in model presets: random-weight DiffusionGemma configs for CPU tests and GPU studies.

A random-weight model built from a config runs exactly the transformers code paths the real checkpoint
runs (encoder, decoder, router, experts, sampler); only the weights differ. That makes it the honest
offline stand-in for ``google/diffusiongemma-26B-A4B-it`` when studying numerics and batch effects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DiffusionGemmaConfig

# A tiny Gemma 4 vision tower: without it DiffusionGemmaConfig builds the default ~167M-parameter one.
TINY_VISION_CONFIG: dict[str, Any] = {
    "model_type": "gemma4_vision",
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 8,
}

# google/diffusiongemma-26B-A4B-it generation defaults (REFERENCE §1).
REAL_GENERATION_DEFAULTS: dict[str, Any] = {
    "max_denoising_steps": 48,
    "t_min": 0.4,
    "t_max": 0.8,
    "stability_threshold": 1,
    "confidence_threshold": 0.005,
    "entropy_bound": 0.1,
    "max_new_tokens": 256,
    "eos_token_id": [1, 106, 50],
    "pad_token_id": 0,
}


@dataclass(frozen=True)
class Preset:
    """A named random-weight model: its text config, default dtype and generation defaults."""

    name: str
    description: str
    text_config: dict[str, Any]
    default_dtype: torch.dtype
    generation: dict[str, Any] = field(default_factory=dict)

    def build_config(self, layers: int | None = None) -> DiffusionGemmaConfig:
        text = dict(self.text_config)
        if layers is not None:
            text["num_hidden_layers"] = layers
            if "layer_types" in text:
                text["layer_types"] = first_layer_types(text["layer_types"], layers)
        return DiffusionGemmaConfig(text_config=text, vision_config=dict(TINY_VISION_CONFIG), canvas_length=256)


def first_layer_types(layer_types: list[str], layers: int) -> list[str]:
    """The attention types of a model cut to its first ``layers`` layers. DiffusionGemma's last layer is
    always full attention (the config forces it, with a logged notice); said here, so nothing is forced."""
    kept = list(layer_types[:layers])
    return kept[:-1] + ["full_attention"]


def _real_layer_types(num_layers: int) -> list[str]:
    # Full attention at layers 5, 11, 17, 23, 29; sliding elsewhere.
    return ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(num_layers)]


TINY = Preset(
    name="tiny",
    description="random-weight DiffusionGemma, 2 layers, hidden 64, 8 experts top-2, vocab 512 (CPU, seconds)",
    text_config={
        "vocab_size": 512,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "global_head_dim": 32,
        "num_global_key_value_heads": 1,
        "num_experts": 8,
        "top_k_experts": 2,
        "moe_intermediate_size": 32,
        # Wider than prompt + canvas, as the real model's 1024 is for ordinary prompts: padding then
        # cannot move a sliding-window edge (see canvaslab.invariant.padding).
        "sliding_window": 512,
        "layer_types": ["sliding_attention", "full_attention"],
        "max_position_embeddings": 4096,
    },
    # float32: on an x86 CPU the tiny model's results depend on batch size in float32 (a real effect
    # the study can show); in bfloat16 they did not in our checks.
    default_dtype=torch.float32,
    generation={**REAL_GENERATION_DEFAULTS, "max_denoising_steps": 16},
)

REAL_SHAPES = Preset(
    name="real-shapes",
    description="the 26B-A4B shapes with random weights (hidden 2816, 128 experts top-8, vocab 262144); "
    "use --layers N to keep the first N of 30 layers (GPU)",
    text_config={
        "vocab_size": 262_144,
        "hidden_size": 2816,
        "intermediate_size": 2112,
        "num_hidden_layers": 30,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 256,
        "global_head_dim": 512,
        "num_global_key_value_heads": 2,
        "num_experts": 128,
        "top_k_experts": 8,
        "moe_intermediate_size": 704,
        "sliding_window": 1024,
        "layer_types": _real_layer_types(30),
        "final_logit_softcapping": 30.0,
    },
    default_dtype=torch.bfloat16,
    generation=dict(REAL_GENERATION_DEFAULTS),
)

PRESETS: dict[str, Preset] = {preset.name: preset for preset in (TINY, REAL_SHAPES)}
