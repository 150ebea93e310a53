"""The model's RMSNorms as one batch-invariant Triton launch each (CUDA).

Stock DiffusionGemma RMSNorm is eight small ops, one of them a mean over the hidden size. The mean alone
is enough for batch invariance (``ops`` replaces it), but each norm then costs nine launches, and the
model runs eleven norms per layer and pass: at B=1, where the host's launch cost sets the pace, that is
most of invariant mode's overhead. ``fused_rms_norms`` points every RMSNorm module of the model at
``triton_kernels.rms_norm`` for the block and restores the modules on exit (their ``forward`` is
replaced on the instances; transformers' files and classes are untouched).

The query and key norms are followed by the rotary embedding: five more elementwise passes over the
queries and keys (two products, a negation, a concatenation, a sum), ~40% of a layer's elementwise memory
traffic at B=32. Each attention module's ``forward`` is therefore replaced too, by transformers' own steps
with the query and key norms and their rotary embedding in one launch (``rms_norm(..., rope=(cos, sin))``).
It rounds where the eager ops round, except that on a GPU the compiler contracts the rotary sum and its
second product into one bf16 fma (``benchmarks/triton_rounding_probe.py`` at commit cfcbda3): within one bf16
unit in the last place of the eager ops (H200: in 5-23% of the elements,
``benchmarks/results/h200-invariant/NOTES.md``), the same in every batch. On the 30-layer model at B=32 it took a pass from 7.54 to 6.71 ms per row
(``benchmarks/results/h200_s11/NOTES.md`` at commit cfcbda3). ``FUSE_ROTARY`` switches it off.
"""

from __future__ import annotations

import contextlib

from torch import nn

from canvaslab.invariant import custom_ops
from canvaslab.invariant.shadowing import all_shadowed
from canvaslab.models import anatomy

FUSE_ROTARY = True  # the query/key norms and their rotary embedding in one launch; probes compare with it off


def _fused_forward(module: nn.Module):
    from canvaslab.invariant.triton_kernels import rms_norm  # lazily: CPU-only installs need no Triton

    # looked up once, not per call
    weight, eps = (module.weight if module.with_scale else None), anatomy.rms_norm_epsilon(module)

    def forward(hidden_states):
        return custom_ops.call("rms_norm", rms_norm, hidden_states, weight, eps)
    return forward


def _rms_norm_rope(states, weight, eps, cos, sin):
    from canvaslab.invariant.triton_kernels import rms_norm  # lazily: CPU-only installs need no Triton

    return rms_norm(states, weight, eps, rope=(cos, sin))


def _normed_and_rotated(norm: nn.Module, eps: float, states, cos, sin):
    weight = norm.weight if norm.with_scale else None
    return custom_ops.call("rms_norm_rope", _rms_norm_rope, states, weight, eps, cos, sin)


def _fused_attention_forward(module: nn.Module):
    """transformers' DiffusionGemma attention ``forward`` (encoder or decoder: they differ only in how they
    meet the cache) with each of the query and key norms and its rotary embedding as one launch."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    writes_cache = not hasattr(module, "append_to_cache")  # the encoder fills the cache; the decoder reads it
    q_eps, k_eps = (anatomy.rms_norm_epsilon(norm) for norm in (module.q_norm, module.k_norm))  # once, not per call

    def forward(hidden_states, position_embeddings, attention_mask, cache=None, **kwargs):
        hidden_shape = (*hidden_states.shape[:-1], -1, module.head_dim)
        cos, sin = position_embeddings
        query = _normed_and_rotated(module.q_norm, q_eps, module.q_proj(hidden_states).view(hidden_shape), cos, sin)
        query = query.transpose(1, 2)
        key = module.k_proj(hidden_states).view(hidden_shape)
        value = module.v_proj(hidden_states).view(hidden_shape) if module.v_proj is not None else key
        key = _normed_and_rotated(module.k_norm, k_eps, key, cos, sin).transpose(1, 2)
        value = module.v_norm(value).transpose(1, 2)
        if cache is not None and writes_cache:
            key, value = cache.update(key, value, module.layer_idx, kwargs=kwargs)
        elif cache is not None:
            key, value = module.append_to_cache(cache, key, value)
        attention = ALL_ATTENTION_FUNCTIONS[module.config._attn_implementation]
        output, weights = attention(module, query, key, value, attention_mask,
                                    dropout=module.attention_dropout if module.training else 0.0,
                                    scaling=module.scaling, sliding_window=module.sliding_window,
                                    is_causal=module.is_causal, **kwargs)
        output = output.reshape(*hidden_states.shape[:-1], -1).contiguous()
        return module.o_proj(output), weights
    return forward


@contextlib.contextmanager
def fused_rms_norms(model: nn.Module):
    """Every DiffusionGemma RMSNorm of ``model`` computed by the fused kernel for the block, the query and key
    norms together with their rotary embedding (the attention modules' ``forward``)."""
    norms = [module for module in model.modules() if isinstance(module, anatomy.RMS_NORM_CLASS)]
    attentions = [module for module in model.modules() if FUSE_ROTARY
                  and isinstance(module, (anatomy.ENCODER_ATTENTION_CLASS, anatomy.DECODER_ATTENTION_CLASS))]
    forwards = [*((module, "forward", _fused_forward(module)) for module in norms),
                *((module, "forward", _fused_attention_forward(module)) for module in attentions)]
    with all_shadowed(forwards):
        yield
