"""The model's RMSNorms as one batch-invariant Triton launch each (CUDA).

Stock DiffusionGemma RMSNorm is eight small ops, one of them a mean over the hidden size. The mean alone
is enough for batch invariance (``ops`` replaces it), but each norm then costs nine launches, and the
model runs eleven norms per layer and pass: at B=1, where the host's launch cost sets the pace, that is
most of invariant mode's overhead. ``fused_rms_norms`` points every RMSNorm module of the model at
``triton_kernels.rms_norm`` for the block and restores the modules on exit (their ``forward`` is
replaced on the instances; transformers' files and classes are untouched).
"""

from __future__ import annotations

import contextlib

from torch import nn

from canvaslab.invariant import custom_ops
from canvaslab.models import anatomy


def _fused_forward(module: nn.Module):
    from canvaslab.invariant.triton_kernels import rms_norm  # lazily: CPU-only installs need no Triton

    weight, eps = (module.weight if module.with_scale else None), module.eps  # looked up once, not per call

    def forward(hidden_states):
        return custom_ops.call("rms_norm", rms_norm, hidden_states, weight, eps)
    return forward


@contextlib.contextmanager
def fused_rms_norms(model: nn.Module):
    """Every DiffusionGemma RMSNorm of ``model`` computed by the fused kernel for the block."""
    norms = [module for module in model.modules() if isinstance(module, anatomy.RMS_NORM_CLASS)]
    for module in norms:
        module.forward = _fused_forward(module)
    try:
        yield
    finally:
        for module in norms:
            del module.forward
