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
    ]
    return cases


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
