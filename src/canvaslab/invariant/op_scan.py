"""The batch-sensitive ops of a DiffusionGemma model, each at its real shapes, as runnable cases.

Each case draws its inputs once for the largest batch; the batch of size B is the first B rows, so row 0
is the same data at every B. The op scan study (``canvaslab.studies.op_scan``) runs them over a grid of
batch sizes and groups the sizes whose row 0 agrees bit for bit (like REFERENCE §2's H200 table).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from canvaslab.models import anatomy

PROMPT_TOKENS = 64


@dataclass
class OpCase:
    name: str
    shape: str  # the per-sequence shape, for the report
    make_input: Callable[[int, torch.Generator], object]  # (max batch, generator) -> inputs
    run: Callable[[object, int], torch.Tensor]  # (inputs, batch) -> output whose dim 0 splits per sequence


def _randn(shape, generator, device, dtype):
    return torch.randn(shape, generator=generator, dtype=torch.float32).to(device=device, dtype=dtype)


def _linear_case(name, module, rows, device, dtype) -> OpCase:
    return OpCase(name, f"({rows}, {module.in_features}) x ({module.in_features}, {module.out_features})",
                  lambda b, g: _randn((b, rows, module.in_features), g, device, dtype),
                  lambda x, b: module(x[:b]))


def op_cases(model) -> list[OpCase]:
    """The batch-sensitive ops of a DiffusionGemma model at its real shapes."""
    text = model.config.text_config
    canvas, hidden, vocab = model.config.canvas_length, text.hidden_size, text.vocab_size
    device, dtype = model.device, model.dtype
    layer, encoder_layer = anatomy.decoder_layers(model)[0], anatomy.encoder_layers(model)[0]
    attn, encoder_attn = layer.self_attn, encoder_layer.self_attn
    cases = [
        _linear_case("encoder k_proj, last prompt token", encoder_attn.k_proj, 1, device, dtype),
        _linear_case("encoder k_proj, prompt", encoder_attn.k_proj, PROMPT_TOKENS, device, dtype),
        *[_linear_case(f"decoder {n}", getattr(attn, n), canvas, device, dtype) for n in ("q_proj", "k_proj", "o_proj")],
        *[_linear_case(f"decoder mlp.{n}", getattr(layer.mlp, n), canvas, device, dtype)
          for n in ("gate_proj", "down_proj")],
        _linear_case("decoder router.proj", layer.router.proj, canvas, device, dtype),
        _linear_case("lm_head", anatomy.lm_head(model), canvas, device, dtype),
        OpCase("self-conditioning matmul", f"({canvas}, {vocab}) x ({vocab}, {hidden})",
               lambda b, g: _randn((b, canvas, vocab), g, device, torch.float32),
               lambda x, b: torch.matmul(x[:b].softmax(-1, dtype=torch.float32).to(dtype), anatomy.self_conditioning_embedding(model))),
        OpCase("softmax fp32 over vocab", f"({canvas}, {vocab})", lambda b, g: _randn((b, canvas, vocab), g, device, torch.float32),
               lambda x, b: torch.softmax(x[:b], dim=-1, dtype=torch.float32)),
        OpCase("sampler entropy (logsumexp)", f"({canvas}, {vocab})", lambda b, g: _randn((b, canvas, vocab), g, device, torch.float32),
               lambda x, b: torch.distributions.Categorical(logits=x[:b]).entropy()),
        OpCase("sampler sort", f"({canvas},)", lambda b, g: torch.randint(0, 4, (b, canvas), generator=g).float().to(device),
               lambda x, b: torch.sort(x[:b], dim=-1)[1]),
        OpCase("RMSNorm", f"({canvas}, {hidden})", lambda b, g: _randn((b, canvas, hidden), g, device, dtype),
               lambda x, b: layer.input_layernorm(x[:b])),
        OpCase("router top-k", f"({canvas}, {text.num_experts})",
               lambda b, g: _randn((b * canvas, text.num_experts), g, device, torch.float32).softmax(-1),
               lambda x, b: torch.topk(x[: b * canvas], text.top_k_experts, dim=-1)[1]),
        OpCase("experts", f"({canvas}, {hidden}), top-{text.top_k_experts} of {text.num_experts}",
               lambda b, g: _randn((b * canvas, hidden), g, device, dtype),
               lambda x, b: layer.experts(x[: b * canvas], *reversed(layer.router(x[: b * canvas])[1:]))),
        _attention_case(model, attn, canvas, device, dtype),
        # The next three run the table's ops that a generation reaches only through other code (a Linear
        # with bias, eager attention, a log-probability), at the shapes that code would give them.
        _addmm_case(attn.q_proj, canvas, device, dtype),
        _attention_scores_case(model, attn, canvas, device, dtype),
        OpCase("log_softmax fp32 over vocab", f"({canvas}, {vocab})",
               lambda b, g: _randn((b, canvas, vocab), g, device, torch.float32),
               lambda x, b: torch.log_softmax(x[:b], dim=-1, dtype=torch.float32)),
    ]
    return cases


def _addmm_case(module, rows, device, dtype) -> OpCase:
    """``module``'s weight as a Linear with bias: ``torch.addmm(bias, x, W.T)`` over the batch's rows."""
    weight, (out_features, in_features) = module.weight, module.weight.shape

    def make_input(batch, generator):
        return (_randn((batch, rows, in_features), generator, device, dtype),
                _randn((out_features,), generator, device, dtype))

    def run(inputs, batch):
        x, bias = inputs
        return torch.addmm(bias, x[:batch].reshape(-1, in_features), weight.T).view(batch, rows, out_features)

    return OpCase("decoder q_proj with bias (addmm)",
                  f"({rows}, {in_features}) x ({in_features}, {out_features}) + ({out_features},)", make_input, run)


def _attention_scores_case(model, attn, canvas, device, dtype) -> OpCase:
    """Eager attention's scores, one ``(canvas, head_dim) x (head_dim, keys)`` product per head, as ``bmm``."""
    heads = model.config.text_config.num_attention_heads
    groups, head_dim, keys = attn.num_key_value_groups, attn.head_dim, PROMPT_TOKENS + canvas

    def make_input(batch, generator):
        return (_randn((batch, heads, canvas, head_dim), generator, device, dtype),
                _randn((batch, heads // groups, keys, head_dim), generator, device, dtype))

    def run(inputs, batch):
        query, key = inputs
        key = key[:batch].repeat_interleave(groups, dim=1)  # each key/value head serves ``groups`` query heads
        scores = torch.bmm(query[:batch].reshape(-1, canvas, head_dim), key.reshape(-1, keys, head_dim).transpose(1, 2))
        return scores.view(batch, heads, canvas, keys)

    return OpCase("attention scores (bmm)", f"{heads} x ({canvas}, {head_dim}) x ({head_dim}, {keys})",
                  make_input, run)


def _attention_case(model, attn, canvas, device, dtype) -> OpCase:
    heads = model.config.text_config.num_attention_heads
    kv_heads, keys = heads // attn.num_key_value_groups, PROMPT_TOKENS + canvas

    def make_input(batch, generator):
        return (_randn((batch, heads, canvas, attn.head_dim), generator, device, dtype),
                _randn((batch, kv_heads, keys, attn.head_dim), generator, device, dtype))

    def run(inputs, batch):
        attention = ALL_ATTENTION_FUNCTIONS.get_interface(model.config.text_config._attn_implementation, None)
        query, key_value = inputs
        return attention(attn, query[:batch], key_value[:batch], key_value[:batch], None, scaling=1.0, dropout=0.0)[0]

    return OpCase("attention (decoder canvas over prompt + canvas)",
                  f"q ({heads}, {canvas}, {attn.head_dim}), kv ({kv_heads}, {keys}, {attn.head_dim})", make_input, run)
