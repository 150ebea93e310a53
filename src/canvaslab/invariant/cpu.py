"""The CPU's batch-invariant path: batch-sensitive ops computed on fixed-shape chunks of rows.

A CPU BLAS picks its blocking, threading and kernels from the matrix shape, so a row's result can change
with the number of rows around it (the tiny float32 model shows it). Splitting the rows into chunks of
a fixed size, zero-padding the last one, and calling the stock kernel chunk by chunk means the kernel
always sees the same shape; GEMM and row-wise reductions never mix rows, so a row's bits then depend
only on its own data (and on its position inside a chunk, which the tests show does not matter). Slower
than one big call, and fine for CI-sized models.
"""

from __future__ import annotations

from typing import Callable

import torch

CHUNK_ROWS = 64


def _chunks(rows: torch.Tensor, compute: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Apply ``compute`` to ``CHUNK_ROWS``-row chunks of ``rows`` (zero-padded), concatenating the results."""
    total = rows.shape[0]
    padded = -(-total // CHUNK_ROWS) * CHUNK_ROWS
    if padded != total:
        rows = torch.cat([rows, rows.new_zeros((padded - total, *rows.shape[1:]))])
    parts = [compute(rows[start:start + CHUNK_ROWS]) for start in range(0, padded, CHUNK_ROWS)]
    return torch.cat(parts)[:total]


def mm(bmm: Callable, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` through the stock batched-GEMM kernel, one fixed-size row chunk at a time."""
    return _chunks(a, lambda chunk: bmm(chunk[None], b[None])[0])


def row_op(op: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """A last-dimension op (reduction or normalisation) on fixed-size chunks of rows."""
    rows = x.reshape(-1, x.shape[-1])
    out = _chunks(rows.contiguous(), op)
    return out.reshape(*x.shape[:-1], *out.shape[1:])
