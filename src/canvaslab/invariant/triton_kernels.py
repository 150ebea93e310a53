"""Triton kernels whose reduction order depends only on the reduced size, never on the number of rows.

- ``matmul``: fixed tiles (BLOCK_M x BLOCK_N x BLOCK_K), each tile reduces the whole K range in order;
  when K is very large a split-K plan chosen from (K, N) alone cuts K into a fixed number of slices
  whose fp32 partials are summed in slice order by a second kernel. A row's result is therefore the
  same whether M is 1 or 16,384 (vLLM and batch_invariant_ops use the same idea).
- ``row_reduce``: one program per row over the last dimension, fixed block width, fp32 accumulation:
  logsumexp, softmax, log_softmax, sum and mean.

Both run under ``TRITON_INTERPRET=1`` on the CPU, which is how the tests check their logic without a GPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 64
SPLIT_K_MIN_K = 16_384  # above this K a fixed split-K plan keeps the GPU busy at small M


def split_k_plan(k: int, n: int) -> int:
    """Number of K slices: a function of (K, N) only, so it cannot change with the batch."""
    if k < SPLIT_K_MIN_K:
        return 1
    tiles_n = triton.cdiv(n, BLOCK_N)
    return max(1, min(k // 8192, triton.cdiv(256, tiles_n)))


@triton.jit
def _matmul_kernel(a_ptr, b_ptr, out_ptr, bias_ptr, M, N, K, k_per_split,
                   s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_ob, s_os, s_om, s_on,
                   SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr, FP32_INPUTS: tl.constexpr, K_STEPS: tl.constexpr,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_z = tl.program_id(2)
    batch = pid_z // SPLIT
    split = pid_z % SPLIT
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    k_start = split * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    a_base = a_ptr + batch * s_ab
    b_base = b_ptr + batch * s_bb
    for step in range(0, K_STEPS):  # K blocks in order
        ks = k_start + step * BK + rk
        a = tl.load(a_base + rm[:, None] * s_am + ks[None, :] * s_ak,
                    mask=(rm[:, None] < M) & (ks[None, :] < k_end), other=0.0)
        b = tl.load(b_base + ks[:, None] * s_bk + rn[None, :] * s_bn,
                    mask=(ks[:, None] < k_end) & (rn[None, :] < N), other=0.0)
        if FP32_INPUTS:
            acc += tl.dot(a, b, input_precision="ieee")
        else:
            acc += tl.dot(a, b)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    out = out_ptr + batch * s_ob + split * s_os + rm[:, None] * s_om + rn[None, :] * s_on
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _sum_splits_kernel(part_ptr, bias_ptr, out_ptr, MN, N, s_pb, s_ps, s_ob,
                       SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    batch = tl.program_id(1)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT):  # fixed slice order
        acc += tl.load(part_ptr + batch * s_pb + s * s_ps + offs, mask=mask, other=0.0)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs % N, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + batch * s_ob + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``a @ b (+ bias)`` for 2-D ``(M, K) @ (K, N)`` or batched 3-D ``(Z, M, K) @ (Z, K, N)``."""
    batched = a.dim() == 3
    a3, b3 = (a, b) if batched else (a[None], b[None])
    z, m, k = a3.shape
    n = b3.shape[2]
    out = torch.empty((z, m, n), device=a.device, dtype=a.dtype)
    split = split_k_plan(k, n)
    k_per_split = triton.cdiv(triton.cdiv(k, split), BLOCK_K) * BLOCK_K
    k_steps = k_per_split // BLOCK_K  # a compile-time loop count: one specialisation per (K, N) plan
    grid = (triton.cdiv(m, BLOCK_M), triton.cdiv(n, BLOCK_N), z * split)
    fp32 = a.dtype == torch.float32
    if split == 1:
        _matmul_kernel[grid](a3, b3, out, bias if bias is not None else out, m, n, k, k_per_split,
                             a3.stride(0), a3.stride(1), a3.stride(2), b3.stride(0), b3.stride(1), b3.stride(2),
                             out.stride(0), 0, out.stride(1), out.stride(2),
                             SPLIT=1, HAS_BIAS=bias is not None, FP32_INPUTS=fp32, K_STEPS=k_steps, BM=BLOCK_M, BN=BLOCK_N, BK=BLOCK_K)
        return out if batched else out[0]
    partial = torch.empty((z, split, m, n), device=a.device, dtype=torch.float32)
    _matmul_kernel[grid](a3, b3, partial, out, m, n, k, k_per_split,
                         a3.stride(0), a3.stride(1), a3.stride(2), b3.stride(0), b3.stride(1), b3.stride(2),
                         partial.stride(0), partial.stride(1), partial.stride(2), partial.stride(3),
                         SPLIT=split, HAS_BIAS=False, FP32_INPUTS=fp32, K_STEPS=k_steps, BM=BLOCK_M, BN=BLOCK_N, BK=BLOCK_K)
    block = 1024
    _sum_splits_kernel[(triton.cdiv(m * n, block), z)](
        partial, bias if bias is not None else out, out, m * n, n, partial.stride(0), partial.stride(1),
        out.stride(0), SPLIT=split, HAS_BIAS=bias is not None, BLOCK=block)
    return out if batched else out[0]


REDUCTIONS = {"logsumexp": 0, "softmax": 1, "log_softmax": 2, "sum": 3, "mean": 4}


@triton.jit
def _row_kernel(x_ptr, out_ptr, D, s_x, s_o, KIND: tl.constexpr, BLOCK: tl.constexpr, N_BLOCKS: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * s_x
    offs = tl.arange(0, BLOCK)
    if KIND >= 3:  # sum, mean
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for i in range(0, N_BLOCKS):
            d0 = i * BLOCK
            acc += tl.load(x_row + d0 + offs, mask=d0 + offs < D, other=0.0).to(tl.float32)
        total = tl.sum(acc, axis=0)
        if KIND == 4:
            total = total / D
        tl.store(out_ptr + row, total.to(out_ptr.dtype.element_ty))
    else:
        peak = tl.full((BLOCK,), float("-inf"), dtype=tl.float32)
        for i in range(0, N_BLOCKS):
            d0 = i * BLOCK
            peak = tl.maximum(peak, tl.load(x_row + d0 + offs, mask=d0 + offs < D, other=float("-inf")).to(tl.float32))
        top = tl.max(peak, axis=0)
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for i in range(0, N_BLOCKS):
            d0 = i * BLOCK
            x = tl.load(x_row + d0 + offs, mask=d0 + offs < D, other=float("-inf")).to(tl.float32)
            acc += tl.exp(x - top)
        total = tl.sum(acc, axis=0)
        if KIND == 0:
            tl.store(out_ptr + row, (top + tl.log(total)).to(out_ptr.dtype.element_ty))
        else:
            log_total = tl.log(total)
            for i in range(0, N_BLOCKS):
                d0 = i * BLOCK
                x = tl.load(x_row + d0 + offs, mask=d0 + offs < D, other=0.0).to(tl.float32)
                if KIND == 1:
                    y = tl.exp(x - top) / total
                else:
                    y = x - top - log_total
                tl.store(out_ptr + row * s_o + d0 + offs, y.to(out_ptr.dtype.element_ty), mask=d0 + offs < D)


def row_reduce(x: torch.Tensor, kind: str, out_dtype: torch.dtype) -> torch.Tensor:
    """Reduce (or normalise) the last dimension of ``x`` row by row; returns ``(rows,)`` or ``x``'s shape."""
    d = x.shape[-1]
    rows = x.reshape(-1, d)
    if not rows.is_contiguous():
        rows = rows.contiguous()
    elementwise = kind in ("softmax", "log_softmax")
    out = torch.empty(rows.shape if elementwise else rows.shape[:1], device=x.device, dtype=out_dtype)
    block = min(4096, triton.next_power_of_2(d))
    _row_kernel[(rows.shape[0],)](rows, out, d, rows.stride(0), out.stride(0) if elementwise else 1,
                                  KIND=REDUCTIONS[kind], BLOCK=block, N_BLOCKS=triton.cdiv(d, block))
    return out.reshape(x.shape) if elementwise else out.reshape(x.shape[:-1])
