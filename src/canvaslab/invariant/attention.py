"""Batch-invariant attention through transformers' ``AttentionInterface``.

Two things can make a row's attention depend on its batch:

- **Padding** (semantic). A left-padded row has extra, hidden keys in front; they shift every key
  block the kernel reduces over. Keys that no query of a row may see are dropped, so the row attends
  over exactly the keys it has alone, and a mask that is then all-visible becomes ``None``.
- **Kernel choice** (numeric). FlashAttention may split the KV range across blocks when the batch is
  too small to fill the GPU, a choice that depends on the batch size. On CUDA, attention runs on the
  memory-efficient kernel, which reduces each query block over the whole KV range in one block. The
  CPU kernel divides work by batch x heads, so on the CPU each row gets its own call.

On CUDA, rows that drop the same number of keys and keep the same mask kind share one SDPA call, so a
batch of copies is one call, as in stock. The causal case is always an explicit mask, so a row never switches
between the kernel's causal flag (alone) and a mask (padded in a batch).
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "canvaslab_invariant"


def _visible(mask: torch.Tensor) -> torch.Tensor:
    return mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min


def _explicit_mask(query, key, mask, is_causal):
    """The mask with the causal case made explicit (top-left aligned, like SDPA's ``is_causal``)."""
    if mask is not None or not is_causal or query.shape[2] == 1:
        return mask
    q_len, kv_len = query.shape[2], key.shape[2]
    return torch.ones(q_len, kv_len, dtype=torch.bool, device=query.device).tril()[None, None]


# Every layer of one kind gets the same mask tensor in a forward pass: its grouping is computed once.
# The cache holds the masks themselves, so an id cannot be reused while its entry lives.
_GROUPS_CACHE: dict[int, tuple[torch.Tensor, dict]] = {}


def _row_groups(mask: torch.Tensor | None, batch: int) -> dict[tuple[int, bool], list[int]]:
    if mask is None:
        return {(0, False): list(range(batch))}
    cached = _GROUPS_CACHE.get(id(mask))
    if cached is not None and cached[0] is mask:
        return cached[1]
    groups = _compute_row_groups(mask, batch)
    if len(_GROUPS_CACHE) >= 4:
        _GROUPS_CACHE.pop(next(iter(_GROUPS_CACHE)))
    _GROUPS_CACHE[id(mask)] = (mask, groups)
    return groups


def _compute_row_groups(mask: torch.Tensor, batch: int) -> dict[tuple[int, bool], list[int]]:
    """Rows grouped by (leading hidden keys to drop, mask still needed after the drop). One host sync."""
    visible = _visible(mask).expand(batch, *mask.shape[1:])
    seen = visible.flatten(1, 2).any(dim=1)  # (batch, keys): a key some query of the row may see
    hidden_prefix = (seen.cumsum(-1) == 0).sum(-1)
    keys, per_key = seen.shape[-1], visible.shape[1] * visible.shape[2]
    prefix_only = seen.sum(-1) == keys - hidden_prefix
    all_visible = visible.flatten(1).sum(-1) == per_key * (keys - hidden_prefix)
    # Hidden keys after the front (not padding) are kept and masked: dropping only a prefix keeps the
    # key order, and such a row still matches itself alone.
    groups = defaultdict(list)
    per_row = torch.stack([hidden_prefix, prefix_only, all_visible], 1).tolist()
    for row, (drop, only_prefix, full) in enumerate(per_row):
        groups[(drop, not (full and only_prefix))].append(row)
    return dict(groups)


def _sdpa(query, key, value, mask, scaling):
    if query.is_cuda:
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling)
    # The CPU kernel splits work across threads by batch x heads (and splits the KV range for a single
    # query), so each row gets its own call there.
    def row_mask(b):
        return mask if mask is None or mask.shape[0] == 1 else mask[b:b + 1]

    return torch.cat([F.scaled_dot_product_attention(query[b:b + 1], key[b:b + 1], value[b:b + 1],
                                                     attn_mask=row_mask(b), scale=scaling)
                      for b in range(query.shape[0])])


def invariant_attention_forward(module, query, key, value, attention_mask, scaling=None, is_causal=None, dropout=0.0,
                                **kwargs):
    if dropout or kwargs.get("softcap") is not None:
        raise ValueError("canvaslab's invariant attention is for inference: no dropout, no softcap")
    is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    groups_of_kv = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups_of_kv), repeat_kv(value, groups_of_kv)
    mask = _explicit_mask(query, key, attention_mask, is_causal)
    batch = query.shape[0]
    # A causal mask made here hides no padding: every row keeps every key, nothing to look up.
    groups = _row_groups(mask, batch) if mask is attention_mask else {(0, True): list(range(batch))}
    output = None
    for (drop, masked), rows in groups.items():
        index = rows if len(rows) < batch else slice(None)
        row_mask = (mask if mask.shape[0] == 1 else mask[index])[..., drop:] if masked else None
        out = _sdpa(query[index], key[index][:, :, drop:], value[index][:, :, drop:], row_mask, scaling)
        if index == slice(None):
            output = out
        else:
            output = out.new_empty((batch, *out.shape[1:])) if output is None else output
            output[rows] = out
    return output.transpose(1, 2).contiguous(), None


def register() -> None:
    AttentionInterface.register(NAME, invariant_attention_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
