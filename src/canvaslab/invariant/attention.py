"""Batch-invariant attention through transformers' ``AttentionInterface``.

Each sequence's attention runs as its own SDPA call, so the kernel (and any KV split it makes) is chosen
from that one sequence's shapes, exactly as at batch size 1: no batch-dependent split of the KV range.
Keys that padding hides from every query are dropped first and an all-visible mask becomes ``None``, so
a left-padded row attends over exactly the keys, and through exactly the kernel, it has alone.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "canvaslab_invariant"


def _row(tensor, row: int):
    if tensor is None or not isinstance(tensor, torch.Tensor) or tensor.dim() == 0 or tensor.shape[0] == 1:
        return tensor
    return tensor[row:row + 1]


def _visible(mask: torch.Tensor) -> torch.Tensor:
    return mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min


def _without_padding(key, value, mask):
    """Drop keys no query may see (padding) and turn an all-visible mask into None."""
    if mask is None:
        return key, value, None
    visible = _visible(mask)
    seen = visible.reshape(-1, visible.shape[-1]).any(dim=0)
    if not bool(seen.all()):
        keep = seen.nonzero().flatten()
        key, value, mask, visible = key[:, :, keep], value[:, :, keep], mask[..., keep], visible[..., keep]
    return key, value, (None if bool(visible.all()) else mask)


def invariant_attention_forward(module, query, key, value, attention_mask, **kwargs):
    outputs = []
    for b in range(query.shape[0]):
        row_key, row_value, row_mask = _without_padding(key[b:b + 1], value[b:b + 1], _row(attention_mask, b))
        outputs.append(sdpa_attention_forward(module, query[b:b + 1], row_key, row_value, row_mask, **kwargs)[0])
    return torch.cat(outputs), None


def register() -> None:
    AttentionInterface.register(NAME, invariant_attention_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
