"""The `mini` architecture: DiffusionGemma scaled down to 18M parameters, trainable in minutes.

Everything the real ``google/diffusiongemma-26B-A4B-it`` has, at small sizes: sliding-window layers
with a full-attention layer every third (the real model: every sixth), fewer KV heads and wider heads
on the full layers, a dense MLP beside 8 experts routed top-2 in every layer, self-conditioning, final
logit softcapping at 30, a 1-layer Gemma 4 vision tower (unused by text, but part of the model), and a
canvas of 128 positions (the commit-order study's block tau needs bins up to 64). Encoder and decoder
share their weights, as in the real model. The autoregressive sibling is a Gemma 4 causal LM with the
same text dimensions (``ar_sibling_config``).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer, DiffusionGemmaConfig, Gemma4TextConfig

MINI_CANVAS = 128
MINI_VOCAB = 16384
MINI_LAYERS = 6
MINI_EOS_IDS = [1, 106]  # <eos>, <end_of_turn>

MINI_VISION_CONFIG: dict[str, Any] = {
    "model_type": "gemma4_vision", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
    "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8,
}


def mini_layer_types(layers: int) -> list[str]:
    """Full attention at every third layer (and always the last, as transformers requires)."""
    types = ["full_attention" if (i + 1) % 3 == 0 else "sliding_attention" for i in range(layers)]
    types[-1] = "full_attention"
    return types


def mini_text_config(**overrides: Any) -> dict[str, Any]:
    layers = overrides.pop("num_hidden_layers", MINI_LAYERS)
    text = {
        "vocab_size": MINI_VOCAB, "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "global_head_dim": 128, "num_global_key_value_heads": 1,
        "num_experts": 8, "top_k_experts": 2, "moe_intermediate_size": 256,
        "sliding_window": 256, "layer_types": mini_layer_types(layers), "max_position_embeddings": 4096,
        "final_logit_softcapping": 30.0, "pad_token_id": 0, "eos_token_id": MINI_EOS_IDS, "bos_token_id": 2,
    }
    text.update(overrides)
    return text


def mini_config(canvas_length: int = MINI_CANVAS, **text_overrides: Any) -> DiffusionGemmaConfig:
    """The DiffusionGemma config of `mini` (``text_overrides`` shrink it further for CPU tests)."""
    return DiffusionGemmaConfig(
        text_config=mini_text_config(**text_overrides), vision_config=dict(MINI_VISION_CONFIG),
        canvas_length=canvas_length, boi_token_id=107, eoi_token_id=108, image_token_id=5,
    )


def ar_sibling_config(**text_overrides: Any) -> Gemma4TextConfig:
    """A Gemma 4 causal LM with the same text dimensions: same layers, heads, experts, softcap, vocab.

    ``attention_k_eq_v`` makes its full-attention layers use keys as values, as DiffusionGemma's do;
    per-layer input embeddings (a Gemma 4 E-model feature DiffusionGemma lacks) are switched off.
    """
    text = mini_text_config(**text_overrides)
    global_head_dim = text.pop("global_head_dim")
    global_kv = text.pop("num_global_key_value_heads")
    return Gemma4TextConfig(
        **text, global_head_dim=global_head_dim, num_global_key_value_heads=global_kv, attention_k_eq_v=True,
        enable_moe_block=True, hidden_size_per_layer_input=0, vocab_size_per_layer_input=text["vocab_size"],
    )


def mini_tokenizer_folder() -> Path:
    """The `mini` tokenizer's files (``tokenizer.json``, ``tokenizer_config.json``, ``chat_template.jinja``; no
    weights): what ``canvaslab mini train`` trains on by default and the noise study's ``--tokenizer mini``.
    The trained checkpoints (distributions ``canvaslab-mini`` and ``canvaslab-mini-ar``) hold the same files."""
    return Path(str(resources.files("canvaslab.models.assets").joinpath("mini-tokenizer")))


@lru_cache(maxsize=1)
def load_mini_tokenizer():
    """The `mini` BPE tokenizer that canvaslab ships (``mini_tokenizer_folder``)."""
    return AutoTokenizer.from_pretrained(str(mini_tokenizer_folder()), local_files_only=True)
