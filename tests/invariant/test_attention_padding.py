"""Invariant attention with left-padded rows: every real query of a row gets, bit for bit, what it gets
alone, whatever the padding (1..20 and around the prompt's own length), with padded keys and padded
queries (a prompt encoded inside the batch) dropped; padded queries' outputs are zeros.

The grouped path (rows sharing a padding length in one call, as on CUDA) is run on the CPU too: there
it is checked for structure and closeness only, since the CPU kernel promises nothing about one row's
result inside a multi-row call (the GPU tests check it bit for bit on the memory-efficient kernel).
"""

import pytest
import torch
from torch.nn import functional as F

from canvaslab.invariant import attention

WIDTH = 40
# Left padding of each row: 1..20, around the row's own length (20 pads + 20 tokens), and nearly all of it.
PADDINGS = [*range(1, 21), 21, 26, 38, 39]
PROMPT = 13


def _module(causal=True):
    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups = causal, 2
    return module


def _rand(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _batch(lengths, head_dim=16, seed=0):
    """Prompts of ``lengths`` left-padded to the longest; returns q, k, v and the (B, 1, W, W) bool mask."""
    width, batch = max(lengths), len(lengths)
    q = _rand(batch, 4, width, head_dim, seed=seed)
    k, v = _rand(batch, 2, width, head_dim, seed=seed + 1), _rand(batch, 2, width, head_dim, seed=seed + 2)
    start = torch.tensor([width - n for n in lengths])
    key_real = torch.arange(width)[None] >= start[:, None]
    mask = torch.ones(width, width, dtype=torch.bool).tril()[None] & key_real[:, None, :]
    return q, k, v, mask[:, None]


def _alone(q, k, v, row, length):
    out, _ = attention.invariant_attention_forward(_module(), q[row:row + 1, :, -length:], k[row:row + 1, :, -length:],
                                                   v[row:row + 1, :, -length:], None, scaling=0.25)
    return out[0]


@pytest.mark.parametrize("head_dim", [16, 32])
def test_left_padded_rows_equal_themselves_alone(head_dim):
    lengths = [WIDTH - padding for padding in [0, *PADDINGS]]
    q, k, v, mask = _batch(lengths, head_dim)
    out, _ = attention.invariant_attention_forward(_module(), q, k, v, mask, scaling=0.25)
    for row, length in enumerate(lengths):
        assert torch.equal(out[row, -length:], _alone(q, k, v, row, length)), f"padding {WIDTH - length}"
        assert not out[row, :WIDTH - length].any(), f"padding {WIDTH - length}"


def test_grouped_call_handles_padded_queries(monkeypatch):
    """The CUDA grouping (one call per padding length), run on the CPU: padded queries zero, real ones
    close to each row alone, one kernel call per distinct padding."""
    calls = []

    def one_call(query, key, value, mask, scaling):
        calls.append(query.shape)
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling)

    lengths = [PROMPT, PROMPT + 7, PROMPT, PROMPT + 20, PROMPT + 7]
    q, k, v, mask = _batch(lengths, 32)
    monkeypatch.setattr(attention, "_sdpa", one_call)
    out, _ = attention.invariant_attention_forward(_module(), q, k, v, mask, scaling=0.25)
    width = max(lengths)
    assert sorted(shape[0] for shape in calls) == [1, 2, 2]  # rows grouped by padding: 20, 13 (x2), 0 (x2)
    for row, length in enumerate(lengths):
        torch.testing.assert_close(out[row, -length:], _alone(q, k, v, row, length), rtol=1e-5, atol=1e-6)
        assert not out[row, :width - length].any()


def test_a_batch_without_padding_is_one_call(monkeypatch):
    calls = []
    original = attention._sdpa
    monkeypatch.setattr(attention, "_sdpa", lambda *args: calls.append(1) or original(*args))
    q, k, v, mask = _batch([PROMPT] * 3)
    attention.invariant_attention_forward(_module(), q, k, v, mask, scaling=0.25)
    attention.invariant_attention_forward(_module(), q, k, v, None, scaling=0.25)
    assert calls == [1, 1]


@pytest.mark.parametrize("empty", [1, 7, 40])
def test_empty_slots_after_the_keys_are_dropped_like_padding(empty):
    """A static cache's empty slots after the prompt and canvas (hidden from every query) leave each row the
    bits of the same keys without them and without a mask (the dynamic cache's call), also in a batch whose
    rows have different numbers of empty slots and left padding."""
    q, k, v, _ = _batch([WIDTH, WIDTH - 5])
    bidirectional = _module(causal=False)
    expected, _ = attention.invariant_attention_forward(bidirectional, q[:1], k[:1], v[:1], None, scaling=0.25)
    slots = torch.zeros(2, 2, empty + 3, 16)
    slots[1, :, :3] = _rand(2, 3, 16, seed=9)  # row 1's last 3 keys: real, so it has 3 fewer empty slots
    padded_k, padded_v = torch.cat([k, slots], 2), torch.cat([v, slots], 2)
    mask = torch.ones(2, 1, WIDTH, WIDTH + empty + 3, dtype=torch.bool)
    mask[0, ..., WIDTH:] = False  # row 0: `empty + 3` empty slots at the back
    mask[1, ..., :5] = False  # row 1: 5 padded keys in front, then its keys, then `empty` empty slots
    mask[1, ..., WIDTH + 3:] = False
    out, _ = attention.invariant_attention_forward(bidirectional, q, padded_k, padded_v, mask, scaling=0.25)
    assert torch.equal(out[0], expected[0])
    row1, _ = attention.invariant_attention_forward(bidirectional, q[1:], padded_k[1:, :, 5:WIDTH + 3],
                                                    padded_v[1:, :, 5:WIDTH + 3], None, scaling=0.25)
    assert torch.equal(out[1], row1[0])
