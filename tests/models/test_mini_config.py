"""The `mini` architecture: the real model's features at ~15M parameters, a canvas of 128, and an
autoregressive sibling of the same size."""

from __future__ import annotations

import torch
from transformers import DiffusionGemmaForBlockDiffusion, Gemma4ForCausalLM

from canvaslab.models.mini import MINI_CANVAS, ar_sibling_config, mini_config, mini_layer_types


def _parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_mini_has_the_real_architecture_scaled_down():
    config = mini_config()
    text = config.text_config
    assert config.canvas_length == MINI_CANVAS >= 128
    assert {"sliding_attention", "full_attention"} == set(text.layer_types)
    assert text.layer_types[-1] == "full_attention"
    assert text.num_experts == 8 and text.top_k_experts == 2 and text.intermediate_size > 0  # MoE + dense MLP
    assert text.final_logit_softcapping == 30.0
    assert config.vision_config.hidden_size == 16 and config.vision_config.num_hidden_layers == 1
    torch.manual_seed(0)
    model = DiffusionGemmaForBlockDiffusion(config)
    assert model.model.decoder.self_conditioning is not None
    assert 10_000_000 < _parameters(model) <= 20_000_000
    # 1 layer of width 16; most of its 0.34M parameters are the position table (2 x 10240 x 16)
    assert sum(p.numel() for p in model.model.encoder.vision_tower.parameters()) < 400_000


def test_ar_sibling_has_the_same_size_within_ten_percent():
    torch.manual_seed(0)
    diffusion = _parameters(DiffusionGemmaForBlockDiffusion(mini_config()))
    sibling = _parameters(Gemma4ForCausalLM(ar_sibling_config()))
    assert abs(sibling - diffusion) / diffusion < 0.1


def test_layer_pattern():
    assert mini_layer_types(6) == ["sliding_attention", "sliding_attention", "full_attention"] * 2
    assert mini_layer_types(2) == ["sliding_attention", "full_attention"]
