"""The aten ops whose results can depend on batch shape, computed so they cannot.

One switch, two installations, chosen by device:

- **CUDA**: ``library_overrides()`` registers Python kernels for the replaced aten ops at the CUDA
  dispatch key with ``torch.library`` (removed again on exit). Only these ops leave C++, and each runs
  a Triton kernel (fixed tiles, reduction order fixed by the reduced size). These kernels handle every
  case of their op (any reduced dims, any dtype), since the stock CUDA kernel is hidden while they are
  registered.
- **CPU**: ``BatchInvariantMode``, a ``TorchDispatchMode``. The CPU path computes with the *stock*
  kernels at batch-independent shapes (``canvaslab.invariant.cpu``); inside ``__torch_dispatch__`` the
  mode is off, so the stock kernel is reachable there, which an override of the CPU kernel would hide.

Library overrides are process-wide while active; a dispatch mode is per thread.
"""

from __future__ import annotations

import contextlib
import warnings

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
        return _dense_matmul(a, b)
    return cpu.mm(func, a, b)


def _addmm(func, bias, a, b, beta=1, alpha=1):
    if not _float(a, b) or beta != 1 or alpha != 1 or bias.dim() != 1:
        return NotImplemented
    if a.is_cuda:
        return _dense_matmul(a, b, bias=bias)
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


# --- CUDA: torch.library overrides --------------------------------------------------------------------


def _reduced_last(x: torch.Tensor, dims) -> tuple[torch.Tensor, list[int]]:
    """``x`` with the reduced dims moved last and flattened into one: ``(*kept, D)``, and the reduced dims."""
    dims = sorted({d % max(x.dim(), 1) for d in dims}) if dims else list(range(x.dim()))
    kept = [d for d in range(x.dim()) if d not in dims]
    return x.permute(*kept, *dims).reshape(*[x.shape[d] for d in kept], -1), dims


def _restore_dims(out: torch.Tensor, dims: list[int], keepdim: bool) -> torch.Tensor:
    for d in dims if keepdim else []:
        out = out.unsqueeze(d)
    return out


def _reduce(x: torch.Tensor, dims, keepdim: bool, kind: str, out_dtype: torch.dtype) -> torch.Tensor:
    last_dim_only = dims is not None and len(dims) == 1 and dims[0] in (-1, x.dim() - 1)
    if x.dim() and x.numel() and last_dim_only:  # the usual case, kept short
        return _triton().row_reduce(x, kind, out_dtype, keepdim)
    rows, dims = _reduced_last(x, dims)
    if rows.numel() == 0 or rows.shape[-1] == 0:
        empty = {"sum": 0.0, "mean": float("nan"), "logsumexp": float("-inf")}[kind]
        out = torch.full(rows.shape[:-1], empty, dtype=out_dtype, device=x.device)
    else:
        out = _triton().row_reduce(rows, kind, out_dtype)
    return _restore_dims(out, dims, keepdim)


def _cuda_sum(x, dim=None, keepdim=False, *, dtype=None):
    if x.is_floating_point() or (dtype is not None and dtype.is_floating_point):
        return _reduce(x if x.is_floating_point() else x.to(dtype), dim, keepdim, "sum", dtype or x.dtype)
    # Integer sums are exact in any order; a cumulative sum's last entry is one without aten.sum.
    rows, dims = _reduced_last(x, dim)
    out_dtype = dtype or torch.int64
    if rows.shape[-1] == 0:
        out = torch.zeros(rows.shape[:-1], dtype=out_dtype, device=x.device)
    else:
        out = torch.cumsum(rows, dim=-1, dtype=out_dtype)[..., -1]
    return _restore_dims(out, dims, keepdim)


def _cuda_mean(x, dim=None, keepdim=False, *, dtype=None):
    if not (x.is_floating_point() or (dtype is not None and dtype.is_floating_point)):
        raise RuntimeError(f"mean(): could not infer output dtype; input dtype {x.dtype} is not floating point")
    return _reduce(x if x.is_floating_point() else x.to(dtype), dim, keepdim, "mean", dtype or x.dtype)


def _cuda_logsumexp(x, dim, keepdim=False):
    x = x if x.is_floating_point() else x.to(torch.get_default_dtype())
    return _reduce(x, dim, keepdim, "logsumexp", x.dtype)


def _cuda_normalise(kind):
    def kernel(x, dim, half_to_float):
        out_dtype = torch.float32 if half_to_float else x.dtype
        if x.numel() == 0:
            return torch.empty_like(x, dtype=out_dtype)
        moved = x.movedim(dim, -1)
        return _triton().row_reduce(moved, kind, out_dtype).movedim(-1, dim).contiguous()
    return kernel


def _dense_matmul(a, b, bias=None):
    from canvaslab.invariant import cublas  # cuBLAS where a per-shape check finds it invariant, else Triton

    return cublas.matmul(a, b, bias=bias)


def _cuda_mm(a, b):
    return _dense_matmul(a, b)


def _cuda_addmm(bias, a, b, *, beta=1, alpha=1):
    if beta == 1 and alpha == 1 and bias.dim() == 1:
        return _dense_matmul(a, b, bias=bias)
    out = _dense_matmul(a, b)
    out = out if alpha == 1 else out * alpha
    return out if beta == 0 else out + (bias if beta == 1 else bias * beta)


def _cuda_bmm(a, b):
    return _triton().matmul(a, b)


def _cuda_topk(x, k, dim=-1, largest=True, sorted=True):
    return tuple(t.contiguous() for t in _topk(None, x, k, dim, largest, sorted))


def _cuda_sort(x, dim=-1, descending=False):
    return _sort(None, x, dim, descending)


_LIBRARY_KERNELS = {
    "sort": _cuda_sort,
    "mm": _cuda_mm,
    "addmm": _cuda_addmm,
    "bmm": _cuda_bmm,
    "_softmax": _cuda_normalise("softmax"),
    "_log_softmax": _cuda_normalise("log_softmax"),
    "logsumexp": _cuda_logsumexp,
    "sum.dim_IntList": _cuda_sum,
    "mean.dim": _cuda_mean,
    "topk": _cuda_topk,
}


@contextlib.contextmanager
def library_overrides(dispatch_key: str = "CUDA"):
    """The replaced aten ops' ``dispatch_key`` kernels swapped for the Triton ones, for the block.

    Tests pass ``"CPU"`` to run the very same overrides through Triton's interpreter.
    """
    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel": that is the point
        for name, kernel in _LIBRARY_KERNELS.items():
            library.impl(name, kernel, dispatch_key)
    try:
        yield
    finally:
        library._destroy()
