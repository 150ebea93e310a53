"""Shared pieces of the invariant-mode tests."""

import pytest
import torch


@pytest.fixture
def tiny_experts():
    """The tiny preset's experts module with random weights: (text config, module, the generator that drew them,
    for the test's next draws)."""
    from transformers.models.diffusion_gemma.modeling_diffusion_gemma import DiffusionGemmaTextExperts

    from canvaslab.models.presets import TINY

    config = TINY.build_config().text_config
    module = DiffusionGemmaTextExperts(config)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        module.gate_up_proj.normal_(generator=gen)
        module.down_proj.normal_(generator=gen)
    return config, module, gen
