"""lm_head one canvas per GEMM call (CUDA): the vocabulary-sized product at cuBLAS speed, batch-invariant by
construction.

lm_head multiplies each canvas position's hidden state (K = 2,816) by the vocabulary matrix (N = 262,144).
cuBLAS is faster there than the Triton matmul (H200, ``benchmarks/results/h200_s11/`` at commit cfcbda3: 39.4 ms
per pass at B=64 one canvas per call
against 45.1 batched in Triton; 19.7 against 20.8 at B=32; 0.58 against 0.72 at B=1), but batched cuBLAS picks
its kernel from the whole shape, so a row's bits may change with the batch. One call per canvas removes the
batch from the call: every call has the same shape (canvas length x K x N) and holds that canvas alone, and
cuBLAS computes a given call bit for bit the same on one GPU architecture (its documented reproducibility;
on the H200 each canvas's bits equalled the call on a copy of it alone at B = 1, 8, 32, 64). One canvas's
256 x 262,144 outputs fill the GPU: per canvas, the calls are as fast as one batched Triton call or faster. ``per_canvas_lm_head`` points the model's lm_head at it for the block, on the instance, so its
hooks (the capture recorder's) still fire.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from canvaslab.invariant import custom_ops
from canvaslab.invariant.shadowing import shadowed
from canvaslab.models import anatomy


def canvas_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``F.linear(x, weight)`` for ``x`` of shape (canvases, length, K): one GEMM call per canvas (inference:
    out= GEMMs take no gradient)."""
    from canvaslab.invariant.cublas import stock_mm

    out = x.new_empty((*x.shape[:-1], weight.shape[0]))
    for canvas in range(x.shape[0]):
        stock_mm(x[canvas], weight.t(), out[canvas])
    return out


@contextlib.contextmanager
def per_canvas_lm_head(model: nn.Module):
    """The model's lm_head computed one canvas per GEMM call for the block (a bias-free lm_head, as
    DiffusionGemma's; any other is left as it is)."""
    head = anatomy.lm_head(model)
    if getattr(head, "bias", None) is not None:
        yield
        return
    weight = head.weight
    # Always the op, even eagerly: an observer of torch functions (the capture recorder) then sees one product
    # whatever the batch, not one per canvas.
    with shadowed(head, "forward", lambda hidden: custom_ops.canvas_linear(hidden, weight)):
        yield
