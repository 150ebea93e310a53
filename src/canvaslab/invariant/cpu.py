"""The CPU's batch-invariant path: batch-sensitive ops computed at shapes that do not depend on the batch.

A CPU BLAS picks its blocking, threading and kernels from the matrix shape, so a row's result can change
with the number of rows around it (the tiny float32 model shows it). Worse, MKL's GEMM result for a row
also depends on the row's position inside the call (seen here for 7 of 300 random shapes at a fixed
M = 64), so fixed-size chunks are not enough for matrix products: each row is its own one-row product,
the same call whatever the batch. Row-wise reductions have no such position effect (tested), so they
run on fixed-size, zero-padded chunks of rows. Slower than one big call, and fine for CI-sized models.

Element-wise ops need one more rule. PyTorch's CPU kernels compute a vectorized body and a scalar remainder,
and for transcendental functions (GELU's tanh, exp, ...) the two can round differently. With several threads a
tensor is split between them at ``ceil(numel / threads)``, so where the split falls, and with it which elements
take the scalar path, depends on the batch: a row of 32 GELU inputs came out differently in a (547, 32) tensor
than alone. On one thread the only remainder is the tensor's end, which the model's shapes (multiples of the
vector width per row) never leave: ``one_thread`` holds the block to one intra-op thread.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

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


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run the block on one intra-op thread (see the module docstring); the previous count is restored."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
