"""DiffusionGemma's module tree, known in one place: where its parts sit and which classes they are.

transformers' ``DiffusionGemmaForBlockDiffusion`` holds ``model.encoder`` (a vision tower beside the text
encoder ``language_model``), ``model.decoder`` (its own layers, ``self_conditioning`` and the embedding
the self-conditioning matmul multiplies by) and ``lm_head``. Every layer, encoder or decoder, has
``self_attn``, a dense ``mlp`` beside the ``router`` and ``experts``, and four RMSNorms around them.
Capture, the invariant modes, the prompt cache, training and the report tables all reach these parts;
they do it through this module, so a change in transformers' tree is one edit here.

Paths are ``named_modules()`` paths: the names recorded in result files (``model.decoder.layers.0``,
``...router.proj``, ``lm_head``) are these, so they must not change. Where transformers has a class for
a part, code that meets modules matches it by class (``EXPERTS``, ``RMS_NORM``, ...), as transformers'
own ``_can_record_outputs`` does. The classes are imported on first use: the paths and name tests serve
the report tables, which must not pay for importing torch and transformers.
"""

from __future__ import annotations

import re
from typing import Any

# ------------------------------------------------------------------------------------------------ paths
BACKBONE = "model"
ENCODER = "model.encoder"
ENCODER_TEXT = "model.encoder.language_model"  # the text encoder (the vision tower sits beside it)
DECODER = "model.decoder"
LAYERS = "layers"  # under ENCODER_TEXT and DECODER
LM_HEAD = "lm_head"

# Parts of a layer (encoder and decoder alike), and of the text encoder and decoder.
ATTENTION = "self_attn"
DENSE_MLP = "mlp"  # the shared dense MLP beside the experts
ROUTER = "router"
ROUTER_PROJECTION = "router.proj"  # the router's scores: a linear layer over the hidden state
EXPERTS = "experts"
INPUT_NORM = "input_layernorm"
POST_ATTENTION_NORM = "post_attention_layernorm"
PRE_FEEDFORWARD_NORM = "pre_feedforward_layernorm"
POST_FEEDFORWARD_NORM = "post_feedforward_layernorm"
ROTARY = "rotary_emb"
EMBEDDING = "embed_tokens"  # the decoder's: self-conditioning multiplies the previous pass's probabilities by it
SELF_CONDITIONING = "self_conditioning"  # under DECODER

# A decoder layer's recorded name ends with ``decoder.layers.N``.
_DECODER_LAYER_NAME = re.compile(r"(^|\.)" + re.escape(f"{DECODER.split('.')[-1]}.{LAYERS}") + r"\.(\d+)$")

# ---------------------------------------------------------------------------------------------- classes
_CLASSES = {
    "ENCODER_LAYER_CLASS": "DiffusionGemmaEncoderTextLayer",
    "DECODER_LAYER_CLASS": "DiffusionGemmaDecoderTextLayer",
    "ENCODER_ATTENTION_CLASS": "DiffusionGemmaEncoderTextAttention",
    "DECODER_ATTENTION_CLASS": "DiffusionGemmaDecoderTextAttention",
    "ROUTER_CLASS": "DiffusionGemmaTextRouter",
    "EXPERTS_CLASS": "DiffusionGemmaTextExperts",
    "DENSE_MLP_CLASS": "DiffusionGemmaText4MLP",
    "RMS_NORM_CLASS": "DiffusionGemmaRMSNorm",
    "SELF_CONDITIONING_CLASS": "DiffusionGemmaSelfConditioning",
    "ROTARY_CLASS": "DiffusionGemmaTextRotaryEmbedding",
}


def __getattr__(name: str) -> Any:
    """transformers' class of a part (``EXPERTS_CLASS``, ``RMS_NORM_CLASS``, ...), imported on first use."""
    if name not in _CLASSES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from transformers.models.diffusion_gemma import modeling_diffusion_gemma

    return getattr(modeling_diffusion_gemma, _CLASSES[name])


# ------------------------------------------------------------------------------------- parts of a model
def encoder(model):
    return model.get_submodule(ENCODER)


def decoder(model):
    return model.get_submodule(DECODER)


def encoder_layers(model) -> list:
    return list(model.get_submodule(f"{ENCODER_TEXT}.{LAYERS}"))


def decoder_layers(model) -> list:
    return list(model.get_submodule(f"{DECODER}.{LAYERS}"))


def decoder_router_projections(model) -> list:
    """Each decoder layer's router projection (the linear layer that scores the experts)."""
    return [layer.get_submodule(ROUTER_PROJECTION) for layer in decoder_layers(model)]


def self_conditioning_embedding(model):
    """The weight the self-conditioning matmul multiplies the previous pass's probabilities by."""
    return decoder(model).get_submodule(EMBEDDING).weight


def rotary_embeddings(model) -> list:
    """The text encoder's and the decoder's rotary embeddings (each run once per attention type)."""
    return [model.get_submodule(f"{ENCODER_TEXT}.{ROTARY}"), model.get_submodule(f"{DECODER}.{ROTARY}")]


def lm_head(model):
    return model.get_submodule(LM_HEAD)


def rms_norm_epsilon(norm) -> float:
    """An RMSNorm module's epsilon: transformers 5.24 names it ``eps``, 5.25 ``variance_epsilon``."""
    for name in ("variance_epsilon", "eps"):
        if isinstance(value := getattr(norm, name, None), (int, float)) and not isinstance(value, bool):
            return float(value)
    raise AttributeError(f"{type(norm).__name__} has neither 'variance_epsilon' nor 'eps': "
                         "transformers changed its RMSNorm")


# ------------------------------------------------------------------------------- recorded call names
def decoder_layer_index(name: str) -> int | None:
    """The layer number of a recorded decoder layer call (``model.decoder.layers.3`` -> 3), else None."""
    match = _DECODER_LAYER_NAME.search(name)
    return int(match.group(2)) if match else None


def is_router_projection(name: str) -> bool:
    return name.endswith(ROUTER_PROJECTION)


def is_lm_head(name: str) -> bool:
    return name.endswith(LM_HEAD)
