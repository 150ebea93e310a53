"""The dense layers' products on cuBLAS where it is batch-invariant (CUDA), the Triton matmul elsewhere.

cuBLAS is 20-50% faster than the Triton matmul on the layers' products at the real shapes (H200,
``benchmarks/results/h200_kernels_s6/`` at commit cfcbda3: e.g. K = 2,816, N = 2,112 at M = 8,192: 0.154
against 0.215 ms), but it picks its kernel from the whole shape: at small row counts (1-100 rows, H200,
``benchmarks/results/h200_s8_call2/`` at commit cfcbda3) it picks kernels that give a row other bits, so a
row's bits then depend on how many rows share its call. At whole blocks of 256 rows it did not: every canvas-aligned block
of 256 x B rows (B = 1..128) gave the bits of the same rows in one product over all of them, for every
layer shape but the router's (N = 128; ``benchmarks/results/h200-invariant/NOTES.md``). So here a product goes
to cuBLAS only

- in calls of whole 256-row blocks and at most ``MAX_ROWS`` rows: a longer product is cut into such calls,
  and a last partial block is padded with zero rows (a canvas is 256 positions: the decoder's products
  need neither);
- for a (K, N, dtype, layout) whose every call size ``256 x j`` (j = 1..``MAX_ROWS`` / 256) gave, on this
  GPU, in this process, the bits of the same rows of one ``MAX_ROWS``-row product (random inputs; also
  rows at an offset inside a call): ``verdict`` checks that at the shape's first use and keeps the answer.
  A shape that fails, a bias, a batched product, K above ``MAX_K`` (the long-K self-conditioning product,
  whose 256-row blocks differed in ``h200_s8_call2/``) stay on the Triton kernel.

Every call a row can meet then computes it with the same arithmetic, whatever the batch; the proofs
(``canvaslab batch-study``, ``benchmarks/needle.py``) check the whole model on the GPU.
"""

from __future__ import annotations

import torch

ROWS = 256  # calls hold whole blocks of this many rows
MAX_ROWS = 8192  # and at most this many: every call size up to it is checked
MAX_K = 16_384

_VERDICTS: dict[tuple, bool] = {}


def _layout(b: torch.Tensor) -> str | None:
    if b.stride(1) == 1 and b.stride(0) == b.shape[1]:
        return "kn"
    if b.stride(0) == 1 and b.stride(1) == b.shape[0]:
        return "nk"  # a linear layer's weight, transposed
    return None


def stock_mm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    # aten.mm's out= overload: cuBLAS as stock runs it (invariant mode replaces the default overload only)
    return torch.mm(a, b, out=out)


def call_sizes(m: int) -> list[tuple[int, int]]:
    """(first row, rows) of each call for an ``m``-row product: whole ``MAX_ROWS`` calls, then one call of the
    remaining whole blocks, then the partial block (padded to ``ROWS`` when computed)."""
    calls, start = [], 0
    while m - start >= MAX_ROWS:
        calls.append((start, MAX_ROWS))
        start += MAX_ROWS
    whole = (m - start) // ROWS * ROWS
    if whole:
        calls.append((start, whole))
        start += whole
    if start < m:
        calls.append((start, m - start))
    return calls


def blocks_product(a: torch.Tensor, b: torch.Tensor, mm=stock_mm) -> torch.Tensor:
    """``a @ b`` through ``mm(a_part, b, out)`` calls of whole ``ROWS``-row blocks, at most ``MAX_ROWS`` each."""
    out = a.new_empty((a.shape[0], b.shape[1]))
    for start, rows in call_sizes(a.shape[0]):
        if rows % ROWS == 0:
            mm(a[start:start + rows], b, out[start:start + rows])
        else:  # the last partial block, padded with zero rows
            padded = a.new_zeros((ROWS, a.shape[1]))
            padded[:rows] = a[start:]
            out[start:] = mm(padded, b, a.new_empty((ROWS, b.shape[1])))[:rows]
    return out


def _check(k: int, n: int, dtype: torch.dtype, layout: str, device: torch.device) -> bool:
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(MAX_ROWS, k, device=device, generator=generator, dtype=torch.float32).to(dtype)
    shape = (k, n) if layout == "kn" else (n, k)
    b = (torch.randn(*shape, device=device, generator=generator) * k ** -0.5).to(dtype)
    b = b if layout == "kn" else b.t()
    full = stock_mm(a, b, a.new_empty((MAX_ROWS, n)))
    for rows in range(ROWS, MAX_ROWS, ROWS):
        if not torch.equal(stock_mm(a[:rows], b, a.new_empty((rows, n))), full[:rows]):
            return False
    offset = 5  # a row's bits do not depend on where in the call it sits either
    return torch.equal(stock_mm(a[offset:offset + ROWS], b, a.new_empty((ROWS, n))), full[offset:offset + ROWS])


def verdict(k: int, n: int, dtype: torch.dtype, layout: str, device: torch.device) -> bool:
    """Whether (K, N, dtype, layout) goes to cuBLAS on ``device``: checked once per process (see the module)."""
    key = (k, n, dtype, layout, device.index)
    if key not in _VERDICTS:
        if torch.cuda.is_current_stream_capturing():  # the check waits for the GPU: not inside a graph capture
            raise RuntimeError(f"canvaslab: cuBLAS check for K={k} N={n} would run inside a CUDA graph capture")
        _VERDICTS[key] = _check(k, n, dtype, layout, device)
    return _VERDICTS[key]


def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``a @ b (+ bias)``, batch-invariant: cuBLAS in whole-block calls where ``verdict`` allows, else the
    Triton matmul (``triton_kernels.matmul``)."""
    from canvaslab.invariant import triton_kernels  # lazily: CPU-only installs need no Triton

    if bias is None and a.dim() == b.dim() == 2 and a.is_cuda and a.shape[1] <= MAX_K and a.stride(1) == 1 \
            and a.shape[0] > 0 and a.dtype == b.dtype:
        layout = _layout(b)
        if layout is not None and verdict(a.shape[1], b.shape[1], a.dtype, layout, a.device):
            return blocks_product(a if a.stride(0) == a.shape[1] else a.contiguous(), b)
    return triton_kernels.matmul(a, b, bias=bias)
