"""Exact, order-independent fingerprints of one row of a tensor, computed where the tensor lives.

A run at real shapes produces terabytes of activations; holding them is impossible, so every capture
is reduced on the device to integer digests: the raw bits of each element times an odd per-column and
per-row weight, summed in int64 (wrapping). Integer addition is associative, so the digest does not
depend on reduction order, and any single changed element changes it (odd weights are invertible
mod 2^64). Several changes could cancel only by a 2^-64-scale coincidence.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import nn

_BITS_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def row_slice(tensor: torch.Tensor, batch: int, row: int = 0) -> torch.Tensor:
    """Row ``row``'s share of ``tensor``: its ``n // batch`` entries along dim 0 when dim 0 is a multiple of the batch.

    Covers ``(batch, ...)`` tensors and flattened ``(batch * positions, ...)`` ones. Parameters, scalars and
    shared tensors (dim 0 not a multiple, e.g. broadcast position embeddings) are kept whole.
    """
    if isinstance(tensor, nn.Parameter) or tensor.dim() == 0 or tensor.shape[0] % batch:
        return tensor
    share = tensor.shape[0] // batch
    return tensor[row * share:(row + 1) * share]


@lru_cache(maxsize=64)
def _odd_weights(length: int, salt: int, device: torch.device) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0x5EED + salt)
    weights = torch.randint(1, 1 << 30, (length,), generator=generator, dtype=torch.int64) * 2 + 1
    return weights.to(device)


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits as int64, shape ``(rows, last_dim)``."""
    tensor = tensor.detach().contiguous()
    if tensor.dtype == torch.bool:
        tensor = tensor.to(torch.uint8)
    if tensor.dim() == 0:
        tensor = tensor.reshape(1)
    raw = tensor.view(_BITS_VIEW[tensor.element_size()]).to(torch.int64)
    return raw.reshape(-1, raw.shape[-1]) if raw.dim() > 1 else raw.reshape(1, -1)


def digest_rows(tensor: torch.Tensor) -> torch.Tensor:
    """One int64 digest per row of ``tensor`` viewed as ``(rows, last_dim)``."""
    raw = bits(tensor)
    return (raw * _odd_weights(raw.shape[1], 0, raw.device)).sum(dim=1)


def fold(row_digests: torch.Tensor) -> torch.Tensor:
    """Per-row digests folded into one 0-dim int64 tensor (row order matters)."""
    return (row_digests * _odd_weights(row_digests.shape[0], 1, row_digests.device)).sum()


def digest_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The digest as a 0-dim int64 tensor on the tensor's device: no host synchronisation."""
    return fold(digest_rows(tensor))


def digest(tensor: torch.Tensor) -> int:
    return int(digest_tensor(tensor).item())

