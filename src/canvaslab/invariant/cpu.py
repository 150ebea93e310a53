"""The CPU's batch-invariant path: batch-sensitive ops computed at shapes that do not depend on the batch.

A CPU BLAS picks its blocking, threading and kernels from the matrix shape, so a row's result can change
with the number of rows around it (the tiny float32 model shows it). Worse, MKL's GEMM result for a row
also depends on the row's position inside the call (seen here for 7 of 300 random shapes at a fixed
M = 64), so fixed-size chunks are not enough for matrix products: each row is its own one-row product,
the same call whatever the batch. Row-wise reductions have no such position effect (tested), so they
run on fixed-size, zero-padded chunks of rows. Slower than one big call, and fine for CI-sized models.
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


def mm(mm_kernel: Callable, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` one row at a time through the stock kernel: every row is the same ``(1, K) @ (K, N)`` call."""
    return torch.cat([mm_kernel(a[row:row + 1], b) for row in range(a.shape[0])])


def row_op(op: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """A last-dimension op (reduction or normalisation) on fixed-size chunks of rows."""
    rows = x.reshape(-1, x.shape[-1])
    out = _chunks(rows.contiguous(), op)
    return out.reshape(*x.shape[:-1], *out.shape[1:])
