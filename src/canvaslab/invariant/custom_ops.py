"""Every batch-invariant kernel as a PyTorch custom op (namespace ``canvaslab``), opaque to the compiler.

``torch.compile`` traces Python down to aten ops and lets Inductor generate the kernels: it would
replace a batch-invariant Triton matmul by cuBLAS or its own tuned template, fuse RMSNorm's mean into a
reduction whose block plan depends on the number of rows, and so on. A ``torch.library.custom_op`` is a
black box to Dynamo, Inductor and CUDA-graph capture: they call it as it is, with the arguments it was
given, and never look inside, re-tune or fuse it. Each op here has

- a fake (meta) implementation (``register_fake``): the output's shape and dtype, all tracing needs;
- a CUDA implementation: the Triton kernels of ``canvaslab.invariant.triton_kernels`` (the same
  functions eager invariant mode runs, so compiled and eager share every reduction's arithmetic);
- a CPU implementation: the CPU's invariant path (``canvaslab.invariant.cpu``: stock kernels at shapes
  that do not depend on the batch), or, for kernels with no CPU counterpart (RMSNorm, the vocabulary
  pass), the same Triton kernel, which runs on the CPU under ``TRITON_INTERPRET=1`` (CI).

``canvaslab.invariant.compiled`` maps the batch-sensitive aten ops onto these ops while Inductor traces.
The model-level pieces (attention, experts, norms, the fused step) call ``call(name, ...)``: the op when
Dynamo is tracing, the plain function otherwise (eager mode keeps its call cost: at B=1 the host's
launch work sets the pace).
"""

from __future__ import annotations

from typing import Callable

import torch

from canvaslab.invariant import cpu

aten = torch.ops.aten
NAMESPACE = "canvaslab"


def _triton():
    from canvaslab.invariant import triton_kernels  # lazily: CPU-only installs need no Triton

    return triton_kernels


# --- matmul: mm, addmm (bias), bmm -------------------------------------------------------------------


@torch.library.custom_op("canvaslab::matmul", mutates_args=(), device_types="cuda")
def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``a @ b (+ bias)``, 2-D or batched 3-D, batch-invariant: cuBLAS in whole-block calls for shapes checked
    invariant, else the Triton kernel, whose reduction order is fixed by K (``canvaslab.invariant.cublas``)."""
    from canvaslab.invariant import cublas

    return cublas.matmul(a, b, bias=bias)


@matmul.register_kernel("cpu")
def _matmul_cpu(a, b, bias=None):
    if a.dim() == 3:
        out = torch.stack([cpu.mm(aten.mm.default, a[i], b[i]) for i in range(a.shape[0])])
    else:
        out = cpu.mm(aten.mm.default, a, b)
    return out if bias is None else out + bias


@matmul.register_fake
def _matmul_fake(a, b, bias=None):
    return a.new_empty((*a.shape[:-1], b.shape[-1]))


# --- row reductions over the last dimension ---------------------------------------------------------

ELEMENTWISE = ("softmax", "log_softmax")


@torch.library.custom_op("canvaslab::row_reduce", mutates_args=(), device_types="cuda")
def row_reduce(x: torch.Tensor, kind: str, out_dtype: torch.dtype) -> torch.Tensor:
    """softmax, log_softmax, logsumexp, sum or mean over the last dimension, one fixed plan per row length."""
    return _triton().row_reduce(x, kind, out_dtype)


def _cpu_row(kind: str, out_dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    def compute(rows: torch.Tensor) -> torch.Tensor:
        if kind in ELEMENTWISE:
            op = aten._softmax.default if kind == "softmax" else aten._log_softmax.default
            wide = rows if rows.dtype == out_dtype else rows.to(torch.float32)
            return op(wide, -1, False).to(out_dtype)
        if kind == "logsumexp":
            return aten.logsumexp.default(rows, [-1]).to(out_dtype)
        op = aten.sum.dim_IntList if kind == "sum" else aten.mean.dim
        return op(rows, [-1], False, dtype=out_dtype)
    return compute


@row_reduce.register_kernel("cpu")
def _row_reduce_cpu(x, kind, out_dtype):
    return cpu.row_op(_cpu_row(kind, out_dtype), x)


@row_reduce.register_fake
def _row_reduce_fake(x, kind, out_dtype):
    return x.new_empty(x.shape if kind in ELEMENTWISE else x.shape[:-1], dtype=out_dtype)


# --- a stable sort: one answer, ties included --------------------------------------------------------


@torch.library.custom_op("canvaslab::sort", mutates_args=())
def sort(x: torch.Tensor, dim: int, descending: bool) -> tuple[torch.Tensor, torch.Tensor]:
    values, indices = aten.sort.stable(x, stable=True, dim=dim, descending=descending)
    return values.contiguous(), indices.contiguous()


@sort.register_fake
def _sort_fake(x, dim, descending):
    return torch.empty_like(x), torch.empty_like(x, dtype=torch.int64)


# --- RMSNorm in one launch ---------------------------------------------------------------------------


@torch.library.custom_op("canvaslab::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    return _triton().rms_norm(x, weight, eps)


@rms_norm.register_fake
def _rms_norm_fake(x, weight, eps):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("canvaslab::rms_norm_rope", mutates_args=())
def rms_norm_rope(x: torch.Tensor, weight: torch.Tensor | None, eps: float, cos: torch.Tensor,
                  sin: torch.Tensor) -> torch.Tensor:
    """RMSNorm over the last dim of ``(..., heads, D)``, then the rotary embedding (one angle row per position)."""
    return _triton().rms_norm(x, weight, eps, rope=(cos, sin))


@rms_norm_rope.register_fake
def _rms_norm_rope_fake(x, weight, eps, cos, sin):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


# --- lm_head one canvas per GEMM call ---------------------------------------------------------------


@torch.library.custom_op("canvaslab::canvas_linear", mutates_args=())
def canvas_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``F.linear(x, weight)`` for ``x`` of shape (canvases, length, K), one GEMM call per canvas
    (``canvaslab.invariant.vocabulary``)."""
    from canvaslab.invariant.vocabulary import canvas_linear as compute

    return compute(x, weight)


@canvas_linear.register_fake
def _canvas_linear_fake(x, weight):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


# --- the experts' projections, rows grouped by expert ------------------------------------------------


@torch.library.custom_op("canvaslab::grouped_linear", mutates_args=(), device_types="cuda")
def grouped_linear(x: torch.Tensor, weight: torch.Tensor, counts: torch.Tensor, transposed: bool) -> torch.Tensor:
    """Each row times its expert's matrix (rows grouped by expert, ``counts`` rows per expert)."""
    kernels = _triton()
    return kernels.grouped_linear(x, weight, kernels.expert_schedule(counts), transposed)


@grouped_linear.register_kernel("cpu")
def _grouped_linear_cpu(x, weight, counts, transposed):
    outputs, start = [], 0
    for expert, count in enumerate(counts.tolist()):
        if count:
            matrix = weight[expert] if transposed else weight[expert].t()
            outputs.append(cpu.mm(aten.mm.default, x[start:start + count], matrix))
            start += count
    n = weight.shape[2] if transposed else weight.shape[1]
    return torch.cat(outputs) if outputs else x.new_empty((0, n))


@grouped_linear.register_fake
def _grouped_linear_fake(x, weight, counts, transposed):
    return x.new_empty((x.shape[0], weight.shape[2] if transposed else weight.shape[1]))


# --- the sampler's pass over the vocabulary ----------------------------------------------------------


# Functional (it returns the scaled logits in a new tensor instead of writing them over ``logits``): compiled
# code then needs no functionalisation and re-inplacing of a vocabulary-sized buffer. (It was made functional
# on the suspicion that the in-place form caused the compiled path's departure from the eager one; the H200
# refuted that: the cause was Inductor's float32 between bf16 ops, see compiled.invariant_backend. Peak memory
# of the compiled path was the same both ways: 31.0 GiB at B=32, 51.3 at B=64.)
@torch.library.custom_op("canvaslab::vocab_sample", mutates_args=())
def vocab_sample(logits: torch.Tensor, seeds: torch.Tensor, temperature: torch.Tensor,
                 softcap: float | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``triton_kernels.vocab_sample``: (scaled logits in ``logits``' dtype, entropy, argmax, draw)."""
    return _triton().vocab_sample(logits, seeds, temperature, softcap)


@vocab_sample.register_fake
def _vocab_sample_fake(logits, seeds, temperature, softcap):
    b, length, _ = logits.shape
    return (torch.empty_like(logits, memory_format=torch.contiguous_format),
            logits.new_empty((b, length), dtype=torch.float32), logits.new_empty((b, length), dtype=torch.int64),
            logits.new_empty((b, length), dtype=torch.int64))


# --- attention ---------------------------------------------------------------------------------------


@torch.library.custom_op("canvaslab::attention", mutates_args=())
def attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None,
              scale: float | None) -> torch.Tensor:
    """``canvaslab.invariant.attention``'s computation: every row over its own real queries and keys."""
    from canvaslab.invariant.attention import rows_attention

    # Compiled code lays out what follows from the fake's (contiguous) strides; the memory-efficient kernel
    # returns another layout.
    return rows_attention(query, key, value, attn_mask, scale).contiguous()


@attention.register_fake
def _attention_fake(query, key, value, attn_mask, scale):
    return query.new_empty((*query.shape[:-1], value.shape[-1]))


OPS = {"matmul": matmul, "row_reduce": row_reduce, "sort": sort, "rms_norm": rms_norm, "rms_norm_rope": rms_norm_rope,
       "canvas_linear": canvas_linear,
       "grouped_linear": grouped_linear, "vocab_sample": vocab_sample, "attention": attention}
NAMES = tuple(f"{NAMESPACE}::{name}" for name in OPS)


def call(name: str, plain: Callable, *args):
    """The custom op ``name`` while Dynamo traces (so the compiled graph holds it, unopened); ``plain``
    otherwise (the same computation without the op's dispatch cost)."""
    if torch.compiler.is_compiling():
        return OPS[name](*args)
    return plain(*args)
