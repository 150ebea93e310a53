"""The seeds' diagnostic fix, kept as a faithful baseline: two operations computed one sequence at a time.

Seed 002: every decoder router projection and the self-conditioning ``softmax -> bf16 -> matmul`` run
row by row. It made B=4 match B=1 on an H100 and serialises the batch, which is why the maintainers would
not take it; canvaslab keeps it to compare against the batch-invariant mode.
"""

from __future__ import annotations

import contextlib

import torch
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

from canvaslab.invariant.shadowing import all_shadowed
from canvaslab.models import anatomy


class _RowwiseSelfConditioning(TorchFunctionMode):
    """``torch.matmul(probs, embedding_weight)`` one batch row at a time."""

    def __init__(self, embedding_weight: torch.Tensor):
        super().__init__()
        self.embedding_weight = embedding_weight

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.matmul and len(args) == 2 and args[1] is self.embedding_weight and args[0].dim() == 3:
            return torch.cat([torch.matmul(args[0][b:b + 1], args[1]) for b in range(args[0].shape[0])])
        return func(*args, **kwargs)


def _rowwise_linear(module, rows_per_sequence: int):
    def forward(hidden_states):
        return torch.cat([F.linear(chunk, module.weight, module.bias)
                          for chunk in hidden_states.split(rows_per_sequence)])
    return forward


@contextlib.contextmanager
def rowwise(model):
    """Apply the seeds' two row-by-row computations to ``model`` for the duration of the block."""
    canvas = model.config.canvas_length
    routers = [(proj, "forward", _rowwise_linear(proj, canvas)) for proj in anatomy.decoder_router_projections(model)]
    with all_shadowed(routers), _RowwiseSelfConditioning(anatomy.self_conditioning_embedding(model)):
        yield
