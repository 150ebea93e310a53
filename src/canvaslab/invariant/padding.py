"""Remove padding's semantic effect: per-row positions for left-padded rows.

transformers' DiffusionGemma generate gives every row the same position ids, so a row left-padded to the
batch's longest prompt sees its prompt and canvas at shifted positions: a semantic batch dependence, not
a numeric one. In invariant mode each row's rotary positions are shifted back by its padding, so a row
sees the positions it has alone (the invariant attention also drops its padded keys). Exact while the
prompt and canvas fit in the sliding window; beyond it the window edges still move with the padding.
"""

from __future__ import annotations

import contextlib

import torch

from canvaslab.models import anatomy


def _shift(pad: torch.Tensor):
    def hook(module, args):
        x, position_ids, *rest = args
        with torch._C.DisableTorchFunction():
            per_row = position_ids.expand(pad.shape[0], -1) - pad[:, None].to(position_ids.dtype)
        return (x, per_row, *rest)
    return hook


@contextlib.contextmanager
def per_row_positions(model, attention_mask: torch.Tensor):
    """Shift each row's rotary positions by its left padding (zeros at the start of ``attention_mask``)."""
    with torch._C.DisableTorchFunction():  # canvaslab's bookkeeping, not the model's computation
        pad = (attention_mask.cumsum(dim=-1) == 0).sum(dim=-1)
    if not bool((pad > 0).any()):
        yield
        return
    rotaries = anatomy.rotary_embeddings(model)
    handles = [rotary.register_forward_pre_hook(_shift(pad)) for rotary in rotaries]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
