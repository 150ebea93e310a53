"""The routers' work after their projection as one Triton launch each (CUDA, eager).

Stock, each DiffusionGemma router follows its projection with a float32 softmax, a top-k, a sum, a division,
an index and a product: with invariant mode's kernels in their place (``row_reduce``, ``topk_rows``), six or
seven launches per layer and pass. ``fused_routers`` points every router module's ``forward`` at transformers'
own steps up to the projection followed by ``triton_kernels.route``, which computes the rest in one launch
with the operations and tile plan of those kernels: the same experts, probabilities and weights that may differ
from theirs in the last bits, each row's the same in any batch (``docs/invariant-generation.md``, "What invariant mode
replaces").
Compiled code keeps transformers' forward (its ops map onto ``canvaslab::`` ops, ``canvaslab.invariant.compiled``).
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from canvaslab.invariant.shadowing import all_shadowed
from canvaslab.models import anatomy

# Off by default: on an H100 the kernel took about 96 us a launch at B=1 (16 programs for 256 tokens), slower than
# the launches it replaces, and its probabilities and weights differ from theirs in the last bits (the same experts);
# ``docs/invariant-generation.md``, "The routing kernels on the same H100". Probes and tests switch it on.
FUSE_ROUTERS = False


def _fused_forward(module: nn.Module):
    from canvaslab.invariant.triton_kernels import route  # lazily: CPU-only installs need no Triton

    stock, top_k = type(module).forward.__get__(module), module.config.top_k_experts

    def forward(hidden_states):
        if torch.compiler.is_compiling():
            return stock(hidden_states)
        states = module.norm(hidden_states) * module.scale * module.scalar_root_size  # as transformers rounds
        return route(module.proj(states), module.per_expert_scale, top_k)
    return forward


def _fits(module: nn.Module) -> bool:
    from canvaslab.invariant.triton_kernels import TOPK_MAX_K, TOPK_MAX_WIDTH

    experts = module.per_expert_scale.numel()
    return experts <= TOPK_MAX_WIDTH and 0 < module.config.top_k_experts <= min(experts, TOPK_MAX_K)


@contextlib.contextmanager
def fused_routers(model: nn.Module):
    """With ``FUSE_ROUTERS``, every DiffusionGemma router of ``model`` (of a size the kernel takes) computing its
    softmax, top-k, renormalisation and scales in one launch for the block; the modules restored on exit."""
    routers = [module for module in model.modules()
               if FUSE_ROUTERS and isinstance(module, anatomy.ROUTER_CLASS) and _fits(module)]
    with all_shadowed((module, "forward", _fused_forward(module)) for module in routers):
        yield
