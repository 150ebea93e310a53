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

from canvaslab.invariant.shadowing import all_shadowed
from canvaslab.models import anatomy


PAD_ATTRIBUTE = "_canvaslab_left_padding"


def _shift_by_padding(module, args):
    """One hook function for every rotary module, reading the padding from the module: compiled code, which
    traces hooks once and does not guard on them, then sees the same hook on every call."""
    pad = getattr(module, PAD_ATTRIBUTE, None)
    if pad is None:
        return None
    x, position_ids, *rest = args
    if torch.compiler.is_compiling():
        per_row = position_ids.expand(pad.shape[0], -1) - pad[:, None].to(position_ids.dtype)
    else:
        with torch._C.DisableTorchFunction():
            per_row = position_ids.expand(pad.shape[0], -1) - pad[:, None].to(position_ids.dtype)
    return (x, per_row, *rest)


@contextlib.contextmanager
def per_row_positions(model, attention_mask: torch.Tensor, always: bool = False):
    """Shift each row's rotary positions by its left padding (zeros at the start of ``attention_mask``).

    ``always`` installs the shift even when no row is padded (a shift by zero, exact): compiled code must
    see the same hooks on every call, whatever the batch's padding."""
    with torch._C.DisableTorchFunction():  # canvaslab's bookkeeping, not the model's computation
        pad = (attention_mask.cumsum(dim=-1) == 0).sum(dim=-1)
    if not always and not bool((pad > 0).any()):
        yield
        return
    rotaries = anatomy.rotary_embeddings(model)
    with all_shadowed((rotary, PAD_ATTRIBUTE, pad) for rotary in rotaries):
        handles = [rotary.register_forward_pre_hook(_shift_by_padding) for rotary in rotaries]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
