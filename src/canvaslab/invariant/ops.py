"""``BatchInvariantMode``: the aten ops whose results can depend on batch shape, computed so they cannot.

A ``TorchDispatchMode`` sees every aten call while it is active and leaves on exit, so the switch is one
context manager and turns off cleanly. On CUDA the replaced ops run canvaslab's Triton kernels (fixed
tiles, reduction order fixed by the reduced size); on the CPU they run the stock kernels on fixed-shape
row chunks (``canvaslab.invariant.cpu``). Inside ``__torch_dispatch__`` the mode is not active, so the
stock kernel is reachable there, which is why this is a dispatch mode rather than a ``torch.library``
override of the aten kernels themselves.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from canvaslab.invariant import cpu

aten = torch.ops.aten

# The ops replaced, for the environment fingerprint.
REPLACED_OPS = ("aten.mm", "aten.addmm", "aten.bmm", "aten._softmax", "aten._log_softmax", "aten.logsumexp",
                "aten.sum.dim_IntList", "aten.mean.dim", "aten.topk", "aten.sort")


def _last_dim(x: torch.Tensor, dim) -> bool:
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    return len(dims) == 1 and dims[0] % max(x.dim(), 1) == x.dim() - 1


def _triton():
    from canvaslab.invariant import triton_kernels  # imported lazily: CPU-only installs need no Triton

    return triton_kernels


class BatchInvariantMode(TorchDispatchMode):
    """Routes batch-sensitive aten ops to batch-invariant implementations."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = _HANDLERS.get(func)
        if handler is not None:
            result = handler(func, *args, **kwargs)
            if result is not NotImplemented:
                return result
        return func(*args, **kwargs)


def _float(*tensors: torch.Tensor) -> bool:
    return all(t.is_floating_point() for t in tensors)


def _mm(func, a, b):
    if not _float(a, b) or a.dim() != 2:
        return NotImplemented
    if a.is_cuda:
        return _triton().matmul(a, b)
    return cpu.mm(func, a, b)


def _addmm(func, bias, a, b, beta=1, alpha=1):
    if not _float(a, b) or beta != 1 or alpha != 1 or bias.dim() != 1:
        return NotImplemented
    if a.is_cuda:
        return _triton().matmul(a, b, bias=bias)
    return cpu.mm(aten.mm.default, a, b) + bias


def _bmm(func, a, b):
    if not _float(a, b):
        return NotImplemented
    if a.is_cuda:
        return _triton().matmul(a, b)
    return torch.stack([cpu.mm(aten.mm.default, a[i], b[i]) for i in range(a.shape[0])])


def _softmax_like(kind):
    def handler(func, x, dim, half_to_float):
        if not _last_dim(x, dim) or not x.is_floating_point():
            return NotImplemented
        out_dtype = torch.float32 if half_to_float else x.dtype
        if x.is_cuda:
            return _triton().row_reduce(x, kind, out_dtype)
        return cpu.row_op(lambda rows: func(rows, -1, half_to_float), x)
    return handler


def _logsumexp(func, x, dim, keepdim=False):
    if not _last_dim(x, dim) or not x.is_floating_point():
        return NotImplemented
    out = _triton().row_reduce(x, "logsumexp", x.dtype) if x.is_cuda else cpu.row_op(lambda r: func(r, [-1]), x)
    return out.unsqueeze(-1) if keepdim else out


def _sum_or_mean(kind):
    def handler(func, x, dim, keepdim=False, dtype=None):
        if dim is None or not _last_dim(x, dim) or not x.is_floating_point():
            return NotImplemented
        out_dtype = dtype or x.dtype
        if x.is_cuda:
            out = _triton().row_reduce(x, kind, out_dtype)
        else:
            out = cpu.row_op(lambda r: func(r, [-1], False, dtype=dtype), x)
        return out.unsqueeze(-1) if keepdim else out
    return handler


def _topk(func, x, k, dim=-1, largest=True, sorted=True):
    # A stable sort has exactly one answer, ties included, whatever algorithm runs it; topk's may not.
    values, indices = torch.sort(x, dim=dim, descending=largest, stable=True)
    return values.narrow(dim, 0, k), indices.narrow(dim, 0, k)


def _sort(func, x, dim=-1, descending=False):
    # The sampler sorts entropies: with ties, an unstable sort may order them differently per algorithm,
    # which moves the acceptance cut-off between tied positions. A stable sort has one answer.
    return aten.sort.stable(x, stable=True, dim=dim, descending=descending)


_HANDLERS = {
    aten.sort.default: _sort,
    aten.mm.default: _mm,
    aten.addmm.default: _addmm,
    aten.bmm.default: _bmm,
    aten._softmax.default: _softmax_like("softmax"),
    aten._log_softmax.default: _softmax_like("log_softmax"),
    aten.logsumexp.default: _logsumexp,
    aten.sum.dim_IntList: _sum_or_mean("sum"),
    aten.mean.dim: _sum_or_mean("mean"),
    aten.topk.default: _topk,
}
