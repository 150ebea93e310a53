"""Batch-invariant attention through transformers' ``AttentionInterface``.

Three things can make a row's attention depend on its batch:

- **Padded keys** (semantic). A left-padded row has extra, hidden keys in front; they shift every key
  block the kernel reduces over. Keys that no query of a row may see are dropped, so the row attends
  over exactly the keys it has alone, and a mask that is then all-visible becomes ``None``. The same holds
  at the back: a static cache's empty slots after the canvas are hidden keys, and dropping them makes the
  compiled static-cache path attend over the keys the dynamic cache holds, in the same kernel call.
- **Padded queries** (numeric). When a left-padded prompt is encoded, its padded positions are queries
  that see no key at all. PyTorch's CPU kernel changes a real query's result when such fully-masked
  queries share its call, so a row's leading queries that see no key are dropped too; their outputs
  are zeros (nothing real reads them: their keys are hidden from every real query).
- **Kernel choice** (numeric). FlashAttention may split the KV range across blocks when the batch is
  too small to fill the GPU, a choice that depends on the batch size. On CUDA, attention runs on the
  memory-efficient kernel, which reduces each query block over the whole KV range in one block. The
  CPU kernel divides work by batch x heads, so on the CPU each row gets its own call.

So every row is computed over its real queries and keys only, at the shapes it has alone. On CUDA, rows
that drop the same numbers of queries and keys and keep the same mask kind share one SDPA call (a batch of
copies is one call, as in stock). The causal case is always an explicit mask, so a row never switches
between the kernel's causal flag (alone) and a mask (padded in a batch).

The whole computation is one function that takes part in PyTorch's ``__torch_function__`` protocol:
a ``TorchFunctionMode`` (canvaslab's capture) sees one attention call over the whole batch, named like
stock's, and none of the per-row calls and padding bookkeeping inside it, which are not a row's data.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import NamedTuple

import torch
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.overrides import handle_torch_function, has_torch_function_variadic
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from canvaslab.invariant import custom_ops

NAME = "canvaslab_invariant"


class RowGroup(NamedTuple):
    """Rows computed alike: leading queries and keys dropped, trailing keys dropped, and whether a mask is
    still needed."""

    queries_dropped: int
    keys_dropped: int
    masked: bool
    keys_dropped_at_end: int = 0


def _visible(mask: torch.Tensor) -> torch.Tensor:
    return mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min


def _explicit_mask(query, key, mask, is_causal):
    """The mask with the causal case made explicit (top-left aligned, like SDPA's ``is_causal``)."""
    if mask is not None or not is_causal or query.shape[2] == 1:
        return mask
    return _causal_mask(query.shape[2], key.shape[2], query.device)


class MaskCaches:
    """What invariant attention keeps between calls, for the mode's lifetime (``mask_caches``).

    ``causal``: one causal mask per shape, so its row grouping is looked up once per pass, like transformers'
    masks (at most 8). ``groups``: every layer of one kind gets the same mask in a forward pass, so its grouping
    is computed once (at most 4). A mask is known by where its values live and their version (compiled code
    hands the op a fresh view of the same mask on every call); the cache holds the mask itself, so its memory
    cannot be reused while the entry lives, and the caches go with the mode, so nothing outlives it.
    """

    def __init__(self):
        self.causal: dict[tuple, torch.Tensor] = {}
        self.groups: dict[tuple, tuple[torch.Tensor, dict]] = {}


_caches: MaskCaches | None = None  # set while invariant mode is on (``mask_caches``)


@contextlib.contextmanager
def mask_caches():
    """Causal masks and row groupings kept for the block (invariant mode's lifetime; a nested block shares the
    outer one's) and dropped on exit. Outside such a block nothing is kept: each call computes its own."""
    global _caches
    outer = _caches
    _caches = outer if outer is not None else MaskCaches()
    try:
        yield _caches
    finally:
        _caches = outer


def _causal_mask(q_len: int, kv_len: int, device: torch.device) -> torch.Tensor:
    if torch.compiler.is_compiling():  # compiled code makes it in its graph (nothing of the host's to keep)
        return _new_causal_mask(q_len, kv_len, device)
    caches = _caches
    if caches is None:
        return _new_causal_mask(q_len, kv_len, device)
    key = (q_len, kv_len, device)
    mask = caches.causal.get(key)
    if mask is None:
        if len(caches.causal) >= 8:
            caches.causal.pop(next(iter(caches.causal)))
        mask = caches.causal[key] = _new_causal_mask(q_len, kv_len, device)
    return mask


def _new_causal_mask(q_len: int, kv_len: int, device: torch.device) -> torch.Tensor:
    return torch.ones(q_len, kv_len, dtype=torch.bool, device=device).tril()[None, None]


def _mask_key(mask: torch.Tensor) -> tuple:
    return (mask.device, mask.data_ptr(), mask.storage_offset(), tuple(mask.shape), mask.stride(), mask.dtype,
            mask._version)


def _grouped_rows(mask: torch.Tensor) -> dict[RowGroup, torch.Tensor]:
    return {group: torch.tensor(rows, device=mask.device) for group, rows in _compute_row_groups(mask).items()}


def _row_groups(mask: torch.Tensor | None, batch: int) -> dict[RowGroup, torch.Tensor]:
    """Each group's rows as an index tensor on the mask's device: indexing with it needs no copy from the host,
    so a pass can be captured in a CUDA graph once its groups are cached."""
    if mask is None:
        return {RowGroup(0, 0, False): None}
    caches = _caches
    if caches is None:
        cached = (mask, _grouped_rows(mask))
    else:
        key = _mask_key(mask)
        cached = caches.groups.get(key)
        if cached is None:
            if len(caches.groups) >= 4:
                caches.groups.pop(next(iter(caches.groups)))
            cached = caches.groups[key] = (mask, _grouped_rows(mask))
    if mask.shape[0] == 1:  # one mask shared by every row
        return dict.fromkeys(cached[1], None)
    return cached[1]


def _hidden_prefix(seen: torch.Tensor) -> torch.Tensor:
    """Per row, how many leading entries of a ``(batch, n)`` boolean are False."""
    return (seen.cumsum(-1) == 0).sum(-1)


def _hidden_suffix(seen: torch.Tensor) -> torch.Tensor:
    """Per row, how many trailing entries of a ``(batch, n)`` boolean are False (a row with none True: all of
    them, like its prefix; such a row has no real query and is never computed)."""
    return _hidden_prefix(seen.flip(-1))


def _compute_row_groups(mask: torch.Tensor) -> dict[RowGroup, list[int]]:
    """Rows grouped by (leading queries that see no key, leading keys no query sees, mask still needed
    after dropping both). One host sync."""
    visible = _visible(mask)
    queries, keys = visible.shape[-2], visible.shape[-1]
    query_drop = _hidden_prefix(visible.any(dim=-1).any(dim=1))
    seen_keys = visible.any(dim=-2).any(dim=1)
    key_drop, key_drop_end = _hidden_prefix(seen_keys), _hidden_suffix(seen_keys)
    key_drop_end = torch.where(key_drop == keys, 0, key_drop_end)  # a row that sees no key: dropped whole once
    # Dropped queries see nothing and dropped keys are seen by nothing, so the rest is all visible exactly
    # when the count of visible pairs fills it. Hidden keys between visible ones are kept and masked:
    # dropping only a prefix and a suffix keeps the key order, and such a row still matches itself alone.
    full = visible.shape[1] * (queries - query_drop) * (keys - key_drop - key_drop_end)
    all_visible = visible.flatten(1).sum(-1) == full
    groups = defaultdict(list)
    per_row = torch.stack([query_drop, key_drop, all_visible, key_drop_end], 1).tolist()
    for row, (q_drop, k_drop, whole, k_drop_end) in enumerate(per_row):
        groups[RowGroup(q_drop, k_drop, not whole, k_drop_end)].append(row)
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


def _group_output(group: RowGroup, rows, query, key, value, mask, scaling) -> torch.Tensor | None:
    """The group's attention over its real queries and keys; None when it has no real query."""
    if group.queries_dropped == query.shape[2] or group.keys_dropped == key.shape[2]:
        return None
    q_part = slice(group.queries_dropped, None)
    k_part = slice(group.keys_dropped, key.shape[2] - group.keys_dropped_at_end)
    row_mask = (mask if mask.shape[0] == 1 else mask[rows])[..., q_part, k_part] if group.masked else None
    return _sdpa(query[rows][:, :, q_part], key[rows][:, :, k_part], value[rows][:, :, k_part], row_mask, scaling)


def scaled_dot_product_attention(query, key, value, attn_mask=None, scale=None):
    """Attention whose every row equals that row computed alone (``attn_mask`` explicit, or None for full).

    Named and shaped like ``F.scaled_dot_product_attention``, which it replaces in invariant mode.
    """
    if has_torch_function_variadic(query, key, value, attn_mask):
        return handle_torch_function(scaled_dot_product_attention, (query, key, value, attn_mask),
                                     query, key, value, attn_mask, scale=scale)
    return custom_ops.call("attention", rows_attention, query, key, value, attn_mask, scale)


def rows_attention(query, key, value, attn_mask=None, scale=None):
    """The computation (``canvaslab::attention``): it may read the mask on the host once per mask (row
    grouping), so compiled code keeps it as one opaque op."""
    batch = query.shape[0]
    groups = _row_groups(attn_mask, batch)
    only = next(iter(groups)) if len(groups) == 1 else None
    if only is not None and only.queries_dropped == only.keys_dropped == only.keys_dropped_at_end == 0:  # one call, as stock
        return _sdpa(query, key, value, attn_mask if only.masked else None, scale)
    output = query.new_zeros((*query.shape[:-1], value.shape[-1]))
    for group, rows in groups.items():  # rows None: every row
        rows = slice(None) if rows is None or len(rows) == batch else rows
        out = _group_output(group, rows, query, key, value, attn_mask, scale)
        if out is not None:
            output[rows, :, group.queries_dropped:] = out
    return output


def invariant_attention_forward(module, query, key, value, attention_mask, scaling=None, is_causal=None, dropout=0.0,
                                **kwargs):
    if dropout or kwargs.get("softcap") is not None:
        raise ValueError("canvaslab's invariant attention is for inference: no dropout, no softcap")
    is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    groups_of_kv = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups_of_kv), repeat_kv(value, groups_of_kv)
    mask = _explicit_mask(query, key, attention_mask, is_causal)
    output = scaled_dot_product_attention(query, key, value, mask, scale=scaling)
    return output.transpose(1, 2).contiguous(), None


def register() -> None:
    AttentionInterface.register(NAME, invariant_attention_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
