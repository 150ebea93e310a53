"""The aten ops whose results can depend on batch shape, computed so they cannot: one table, ``TABLE``.

Each batch-sensitive aten op is one row (``InvariantOp``): the op, its CUDA kernel (``<op>_batch_invariant``),
its CPU path (``<op>_batch_invariant_cpu``), the ``canvaslab::`` custom op compiled code runs in its place and
the compiler's decomposition onto it (``<op>_decomposition``), and the op-scan case that runs it at the model's
shapes. Everything else is computed from the table: the CUDA overrides (``library_overrides``), the CPU dispatch
(``BatchInvariantMode``), the compiled backend's decompositions (``DECOMPOSITIONS``, used by
``canvaslab.invariant.compiled``) and the environment fingerprint's list (``REPLACED_OPS``). Adding an op is
adding a row (docs/invariant-generation.md, "How to add an invariant op").

One switch (``batch_invariant``), two installations, chosen by device:

- **CUDA**: ``library_overrides()`` registers each row's CUDA kernel over the aten op's at the CUDA dispatch
  key with ``torch.library`` (removed again on exit). Only these ops leave C++, and each runs a Triton kernel
  (fixed tiles, reduction order fixed by the reduced size) or a cuBLAS call checked invariant. These kernels
  handle every case of their op (any reduced dims, any dtype), since the stock CUDA kernel is hidden while
  they are registered.
- **CPU**: ``BatchInvariantMode``, a ``TorchDispatchMode`` that sends each row's op to its CPU path. The CPU
  path computes with the *stock* kernels at batch-independent shapes (``canvaslab.invariant.cpu``); inside
  ``__torch_dispatch__`` the mode is off, so the stock kernel is reachable there, which an override of the
  CPU kernel would hide. A CPU path returns ``NotImplemented`` for the cases it leaves to stock (integer
  sums, reductions over other dims).

Library overrides are process-wide while active; a dispatch mode is per thread.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from canvaslab.errors import CanvaslabError
from canvaslab.invariant import cpu, custom_ops

aten = torch.ops.aten


def _last_dim(x: torch.Tensor, dim) -> bool:
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    return len(dims) == 1 and dims[0] % max(x.dim(), 1) == x.dim() - 1


def _float(*tensors: torch.Tensor) -> bool:
    return all(t.is_floating_point() for t in tensors)


def _triton():
    from canvaslab.invariant import triton_kernels  # imported lazily: CPU-only installs need no Triton

    return triton_kernels


def _dense_matmul(a, b, bias=None):
    from canvaslab.invariant import cublas  # cuBLAS where a per-shape check finds it invariant, else Triton

    return cublas.matmul(a, b, bias=bias)


def _reduced_last(x: torch.Tensor, dims) -> tuple[torch.Tensor, list[int]]:
    """``x`` with the reduced dims moved last and flattened into one: ``(*kept, D)``, and the reduced dims."""
    dims = sorted({d % max(x.dim(), 1) for d in dims}) if dims else list(range(x.dim()))
    kept = [d for d in range(x.dim()) if d not in dims]
    return x.permute(*kept, *dims).reshape(*[x.shape[d] for d in kept], -1), dims


def _restore_dims(out: torch.Tensor, dims: list[int], keepdim: bool) -> torch.Tensor:
    for d in dims if keepdim else []:
        out = out.unsqueeze(d)
    return out


def _reduce_on_cuda(x: torch.Tensor, dims, keepdim: bool, kind: str, out_dtype: torch.dtype) -> torch.Tensor:
    """A reduction over any dims by the Triton row reduction (the CUDA kernels' shared part)."""
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


def _reduce_as_op(x, dims, keepdim, kind, out_dtype):
    """A reduction over any dims as ``canvaslab::row_reduce`` (the decompositions' shared part)."""
    if dims is not None and len(dims) == 1 and dims[0] % max(x.dim(), 1) == x.dim() - 1:
        out = custom_ops.row_reduce(x, kind, out_dtype)
        return out.unsqueeze(-1) if keepdim else out
    rows, dims = _reduced_last(x, dims)
    return _restore_dims(custom_ops.row_reduce(rows, kind, out_dtype), dims, keepdim)


# --- each op: its CUDA kernel, its CPU path (``func`` first: the stock kernel), its compiler decomposition ---

# mm


def mm_batch_invariant(a, b):
    return _dense_matmul(a, b)


def mm_batch_invariant_cpu(func, a, b):
    if not _float(a, b) or a.dim() != 2:
        return NotImplemented
    if a.is_cuda:
        return _dense_matmul(a, b)
    return cpu.mm(func, a, b)


def mm_decomposition(a, b):
    return custom_ops.matmul(a, b, None) if _float(a, b) else NotImplemented


# addmm


def addmm_batch_invariant(bias, a, b, *, beta=1, alpha=1):
    if beta == 1 and alpha == 1 and bias.dim() == 1:
        return _dense_matmul(a, b, bias=bias)
    out = _dense_matmul(a, b)
    out = out if alpha == 1 else out * alpha
    return out if beta == 0 else out + (bias if beta == 1 else bias * beta)


def addmm_batch_invariant_cpu(func, bias, a, b, beta=1, alpha=1):
    if not _float(a, b) or beta != 1 or alpha != 1 or bias.dim() != 1:
        return NotImplemented
    if a.is_cuda:
        return _dense_matmul(a, b, bias=bias)
    return cpu.mm(aten.mm.default, a, b) + bias


def addmm_decomposition(bias, a, b, *, beta=1, alpha=1):
    if not _float(a, b):
        return NotImplemented
    if beta == 1 and alpha == 1 and bias.dim() == 1:
        return custom_ops.matmul(a, b, bias)
    out = custom_ops.matmul(a, b, None)
    out = out if alpha == 1 else out * alpha
    return out if beta == 0 else out + (bias if beta == 1 else bias * beta)


# bmm


def bmm_batch_invariant(a, b):
    return _triton().matmul(a, b)


def bmm_batch_invariant_cpu(func, a, b):
    if not _float(a, b):
        return NotImplemented
    if a.is_cuda:
        return _triton().matmul(a, b)
    return torch.stack([cpu.mm(aten.mm.default, a[i], b[i]) for i in range(a.shape[0])])


def bmm_decomposition(a, b):
    return custom_ops.matmul(a, b, None) if _float(a, b) else NotImplemented  # the op takes batched operands too


# _softmax and _log_softmax: a normalisation over one dim


def _normalise_on_cuda(x, dim, half_to_float, kind):
    out_dtype = torch.float32 if half_to_float else x.dtype
    if x.numel() == 0:
        return torch.empty_like(x, dtype=out_dtype)
    moved = x.movedim(dim, -1)
    return _triton().row_reduce(moved, kind, out_dtype).movedim(-1, dim).contiguous()


def _normalise_on_cpu(func, x, dim, half_to_float, kind):
    if not _last_dim(x, dim) or not x.is_floating_point():
        return NotImplemented
    out_dtype = torch.float32 if half_to_float else x.dtype
    if x.is_cuda:
        return _triton().row_reduce(x, kind, out_dtype)
    return cpu.row_op(lambda rows: func(rows, -1, half_to_float), x)


def _normalise_as_op(x, dim, half_to_float, kind):
    out_dtype = torch.float32 if half_to_float else x.dtype
    return custom_ops.row_reduce(x.movedim(dim, -1), kind, out_dtype).movedim(-1, dim)


def softmax_batch_invariant(x, dim, half_to_float):
    return _normalise_on_cuda(x, dim, half_to_float, "softmax")


def softmax_batch_invariant_cpu(func, x, dim, half_to_float):
    return _normalise_on_cpu(func, x, dim, half_to_float, "softmax")


def softmax_decomposition(x, dim, half_to_float):
    return _normalise_as_op(x, dim, half_to_float, "softmax")


def log_softmax_batch_invariant(x, dim, half_to_float):
    return _normalise_on_cuda(x, dim, half_to_float, "log_softmax")


def log_softmax_batch_invariant_cpu(func, x, dim, half_to_float):
    return _normalise_on_cpu(func, x, dim, half_to_float, "log_softmax")


def log_softmax_decomposition(x, dim, half_to_float):
    return _normalise_as_op(x, dim, half_to_float, "log_softmax")


# logsumexp


def logsumexp_batch_invariant(x, dim, keepdim=False):
    x = x if x.is_floating_point() else x.to(torch.get_default_dtype())
    return _reduce_on_cuda(x, dim, keepdim, "logsumexp", x.dtype)


def logsumexp_batch_invariant_cpu(func, x, dim, keepdim=False):
    if not _last_dim(x, dim) or not x.is_floating_point():
        return NotImplemented
    out = _triton().row_reduce(x, "logsumexp", x.dtype) if x.is_cuda else cpu.row_op(lambda r: func(r, [-1]), x)
    return out.unsqueeze(-1) if keepdim else out


def logsumexp_decomposition(x, dim, keepdim=False):
    return _reduce_as_op(x, dim, keepdim, "logsumexp", x.dtype) if x.is_floating_point() and x.dim() else NotImplemented


# sum and mean over dims (and, compiled, over the whole tensor)


def _sum_or_mean_on_cpu(func, x, dim, keepdim, dtype, kind):
    if dim is None or not _last_dim(x, dim) or not x.is_floating_point():
        return NotImplemented
    out_dtype = dtype or x.dtype
    if x.is_cuda:
        out = _triton().row_reduce(x, kind, out_dtype)
    else:
        out = cpu.row_op(lambda r: func(r, [-1], False, dtype=dtype), x)
    return out.unsqueeze(-1) if keepdim else out


def _sum_or_mean_as_op(x, dim, keepdim, dtype, kind):
    if not x.is_floating_point() or x.dim() == 0:  # integer sums are exact in any order
        return NotImplemented
    return _reduce_as_op(x, dim or None, keepdim, kind, dtype or x.dtype)


def sum_batch_invariant(x, dim=None, keepdim=False, *, dtype=None):
    if x.is_floating_point() or (dtype is not None and dtype.is_floating_point):
        return _reduce_on_cuda(x if x.is_floating_point() else x.to(dtype), dim, keepdim, "sum", dtype or x.dtype)
    # Integer sums are exact in any order; a cumulative sum's last entry is one without aten.sum.
    rows, dims = _reduced_last(x, dim)
    out_dtype = dtype or torch.int64
    if rows.shape[-1] == 0:
        out = torch.zeros(rows.shape[:-1], dtype=out_dtype, device=x.device)
    else:
        out = torch.cumsum(rows, dim=-1, dtype=out_dtype)[..., -1]
    return _restore_dims(out, dims, keepdim)


def sum_batch_invariant_cpu(func, x, dim, keepdim=False, dtype=None):
    return _sum_or_mean_on_cpu(func, x, dim, keepdim, dtype, "sum")


def sum_decomposition(x, dim=None, keepdim=False, *, dtype=None):
    return _sum_or_mean_as_op(x, dim, keepdim, dtype, "sum")


def sum_whole_decomposition(x, *, dtype=None):
    return sum_decomposition(x, None, False, dtype=dtype)


def mean_batch_invariant(x, dim=None, keepdim=False, *, dtype=None):
    if not (x.is_floating_point() or (dtype is not None and dtype.is_floating_point)):
        raise RuntimeError(f"mean(): could not infer output dtype; input dtype {x.dtype} is not floating point")
    return _reduce_on_cuda(x if x.is_floating_point() else x.to(dtype), dim, keepdim, "mean", dtype or x.dtype)


def mean_batch_invariant_cpu(func, x, dim, keepdim=False, dtype=None):
    return _sum_or_mean_on_cpu(func, x, dim, keepdim, dtype, "mean")


def mean_decomposition(x, dim=None, keepdim=False, *, dtype=None):
    return _sum_or_mean_as_op(x, dim, keepdim, dtype, "mean")


def mean_whole_decomposition(x, *, dtype=None):
    return mean_decomposition(x, None, False, dtype=dtype)


# topk and sort: a stable sort has exactly one answer, ties included, whatever algorithm runs it


def topk_batch_invariant_cpu(func, x, k, dim=-1, largest=True, sorted=True):
    # topk's answer among ties may depend on the algorithm; the stable sort's may not.
    values, indices = torch.sort(x, dim=dim, descending=largest, stable=True)
    return values.narrow(dim, 0, k), indices.narrow(dim, 0, k)


def topk_batch_invariant(x, k, dim=-1, largest=True, sorted=True):
    if _topk_kernel_fits(x, k, dim, largest):  # the routers' top-k over the experts: a few passes over each row
        return _triton().topk_rows(x, k)
    return tuple(t.contiguous() for t in topk_batch_invariant_cpu(None, x, k, dim, largest, sorted))


def _topk_kernel_fits(x, k, dim, largest) -> bool:
    kernels = _triton()
    return (largest and dim in (-1, x.dim() - 1) and x.dtype in (torch.float16, torch.bfloat16, torch.float32)
            and 0 < k <= min(x.shape[-1], kernels.TOPK_MAX_K) and x.shape[-1] <= kernels.TOPK_MAX_WIDTH)


def topk_decomposition(x, k, dim=-1, largest=True, sorted=True):
    values, indices = custom_ops.sort(x, dim, largest)
    return values.narrow(dim, 0, k), indices.narrow(dim, 0, k)


def sort_batch_invariant_cpu(func, x, dim=-1, descending=False):
    # The sampler sorts entropies: with ties, an unstable sort may order them differently per algorithm,
    # which moves the acceptance cut-off between tied positions. A stable sort has one answer.
    return aten.sort.stable(x, stable=True, dim=dim, descending=descending)


def sort_batch_invariant(x, dim=-1, descending=False):
    return sort_batch_invariant_cpu(None, x, dim, descending)


def sort_decomposition(x, dim=-1, descending=False):
    return custom_ops.sort(x, dim, descending)


def sort_stable_decomposition(x, *, stable=None, dim=-1, descending=False):
    return custom_ops.sort(x, dim, descending)


# --- the table ----------------------------------------------------------------------------------------


def _overload(name: str) -> torch._ops.OpOverload:
    """``"mm"`` -> ``aten.mm.default``, ``"sum.dim_IntList"`` -> ``aten.sum.dim_IntList``."""
    packet, _, overload = name.partition(".")
    return getattr(getattr(aten, packet), overload or "default")


@dataclass(frozen=True)
class InvariantOp:
    """One batch-sensitive aten op and everything that replaces it: a row of ``TABLE``."""

    aten: str  # the overload replaced, as ``torch.library`` names it: "mm", "sum.dim_IntList"
    cuda: Callable  # its kernel at the CUDA dispatch key (``library_overrides``), called with the op's arguments
    cpu: Callable  # its CPU path under ``BatchInvariantMode``: ``(func, *args)``, NotImplemented leaves a case to stock
    custom_op: Callable  # the ``canvaslab::`` op (``canvaslab.invariant.custom_ops``) compiled code runs in its place
    decomposition: Callable  # the compiler's mapping of the op onto ``custom_op`` (``canvaslab.invariant.compiled``)
    scan: str  # the op-scan case that runs it at the model's real shapes (``canvaslab.invariant.op_scan``)
    variants: tuple[tuple[str, Callable], ...] = ()  # the op's other overloads the compiler maps too, and how

    @property
    def overload(self) -> torch._ops.OpOverload:
        return _overload(self.aten)

    @property
    def fingerprint(self) -> str:
        """Its name in the environment fingerprint (``canvaslab.invariant.replaced_ops``)."""
        return f"aten.{self.aten}"

    def decompositions(self) -> dict:
        return {self.overload: self.decomposition, **{_overload(name): fn for name, fn in self.variants}}


TABLE = (
    InvariantOp("mm", mm_batch_invariant, mm_batch_invariant_cpu, custom_ops.matmul, mm_decomposition,
                scan="encoder k_proj, last prompt token"),
    InvariantOp("addmm", addmm_batch_invariant, addmm_batch_invariant_cpu, custom_ops.matmul, addmm_decomposition,
                scan="decoder q_proj with bias (addmm)"),
    InvariantOp("bmm", bmm_batch_invariant, bmm_batch_invariant_cpu, custom_ops.matmul, bmm_decomposition,
                scan="attention scores (bmm)"),
    InvariantOp("_softmax", softmax_batch_invariant, softmax_batch_invariant_cpu, custom_ops.row_reduce,
                softmax_decomposition, scan="softmax fp32 over vocab"),
    InvariantOp("_log_softmax", log_softmax_batch_invariant, log_softmax_batch_invariant_cpu, custom_ops.row_reduce,
                log_softmax_decomposition, scan="log_softmax fp32 over vocab"),
    InvariantOp("logsumexp", logsumexp_batch_invariant, logsumexp_batch_invariant_cpu, custom_ops.row_reduce,
                logsumexp_decomposition, scan="sampler entropy (logsumexp)"),
    InvariantOp("sum.dim_IntList", sum_batch_invariant, sum_batch_invariant_cpu, custom_ops.row_reduce,
                sum_decomposition, scan="sampler entropy (logsumexp)", variants=(("sum", sum_whole_decomposition),)),
    InvariantOp("mean.dim", mean_batch_invariant, mean_batch_invariant_cpu, custom_ops.row_reduce,
                mean_decomposition, scan="RMSNorm", variants=(("mean", mean_whole_decomposition),)),
    InvariantOp("topk", topk_batch_invariant, topk_batch_invariant_cpu, custom_ops.sort, topk_decomposition,
                scan="router top-k"),
    InvariantOp("sort", sort_batch_invariant, sort_batch_invariant_cpu, custom_ops.sort, sort_decomposition,
                scan="sampler sort", variants=(("sort.stable", sort_stable_decomposition),)),
)

# --- computed from the table ---------------------------------------------------------------------------

REPLACED_OPS = tuple(op.fingerprint for op in TABLE)  # the environment fingerprint's list
DECOMPOSITIONS = {overload: fn for op in TABLE for overload, fn in op.decompositions().items()}


class BatchInvariantMode(TorchDispatchMode):
    """Routes the table's ops to their CPU paths (the CPU installation)."""

    _HANDLERS = {op.overload: op.cpu for op in TABLE}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = self._HANDLERS.get(func)
        if handler is not None:
            result = handler(func, *args, **kwargs)
            if result is not NotImplemented:
                return result
        return func(*args, **kwargs)


@contextlib.contextmanager
def library_overrides(dispatch_key: str = "CUDA"):
    """The table's aten ops' ``dispatch_key`` kernels swapped for their CUDA kernels, for the block (the CUDA
    installation: one ``impl`` per row).

    Tests pass ``"CPU"`` to run the very same overrides through Triton's interpreter.
    """
    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel": that is the point
        for op in TABLE:
            library.impl(op.aten, op.cuda, dispatch_key)
    try:
        yield
    finally:
        library._destroy()


def installed_sides(device: str | torch.device | None) -> tuple[str, ...]:
    """Which installations ``batch_invariant(device)`` enters: ``("cuda", "cpu")`` for None, else the device's
    type (``"cuda:1"`` and ``torch.device("cuda", 1)`` are ``"cuda"``: the overrides are process-wide). Any other
    value is refused in one line: entering the block and installing nothing would run stock ops unnoticed."""
    if device is None:
        return ("cuda", "cpu")
    try:
        kind = torch.device(device).type if isinstance(device, (str, torch.device)) else None
    except RuntimeError:
        kind = None
    if kind not in ("cuda", "cpu") or (isinstance(device, str) and device != device.strip()):
        raise CanvaslabError(f"batch_invariant({device!r}): give \"cuda\" (or \"cuda:N\", a torch.device of type "
                             "cuda), \"cpu\", or None for both")
    return (kind,)


def batch_invariant(device: str | torch.device | None = None) -> contextlib.AbstractContextManager:
    """Batch-invariant aten ops for the duration of the block (matmuls, softmax family, reductions, top-k).

    ``device="cuda"`` (or ``"cuda:N"``, a CUDA ``torch.device``) installs only the CUDA overrides (the fast path
    for a GPU model: ops that are not replaced never enter Python); ``"cpu"`` only the CPU dispatch mode;
    ``None`` both. Anything else is a ``CanvaslabError``, raised by the call, before anything is installed.
    """
    return _installed(installed_sides(device))


@contextlib.contextmanager
def _installed(sides: tuple[str, ...]):
    with contextlib.ExitStack() as stack:
        if "cuda" in sides:
            stack.enter_context(library_overrides("CUDA"))
        if "cpu" in sides:
            stack.enter_context(BatchInvariantMode())
            stack.enter_context(cpu.one_thread())  # element-wise kernels split between threads by batch size
        yield
