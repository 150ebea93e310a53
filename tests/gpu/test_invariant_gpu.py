"""The invariant kernels on a real GPU, in bfloat16 at the 26B model's shapes.

Every checked row of a batched result equals that row computed alone, bit for bit, wherever it lands
in a tile: first, middle and last rows of a tile, and rows after a group boundary for the experts.
Run on the H200: ``python -m pytest -q -m gpu tests/gpu``.
"""

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

ROWS = [0, 1, 63, 64, 127, 128, 255, 299]


def _rand(*shape, seed=0, dtype=torch.bfloat16):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to("cuda", dtype)


@pytest.mark.parametrize("k,n", [(2816, 4096), (4096, 2816), (2816, 262_144), (262_144, 2816)])
def test_matmul_rows_equal_one_row_results(k, n):
    from canvaslab.invariant.triton_kernels import matmul

    a, b = _rand(300, k), _rand(k, n, seed=1) / k ** 0.5
    full = matmul(a, b)
    for row in ROWS:
        assert torch.equal(full[row], matmul(a[row:row + 1], b)[0]), row
    reference = (a.float() @ b.float())
    assert ((full.float() - reference).norm() / reference.norm()).item() < 1e-2  # bf16 output rounding


def test_grouped_linear_rows_equal_alone_at_expert_shapes():
    from canvaslab.invariant.triton_kernels import expert_schedule, grouped_linear

    experts, hidden, inter = 128, 2816, 1408
    counts = torch.randint(0, 40, (experts,), generator=torch.Generator().manual_seed(0)).cuda()
    rows = int(counts.sum())
    x, w = _rand(rows, hidden), _rand(experts, inter, hidden, seed=1) / hidden ** 0.5
    full = grouped_linear(x, w, expert_schedule(counts))
    ends = torch.cumsum(counts, 0).tolist()
    for expert in [0, 5, 64, 127]:
        start, end = ends[expert] - int(counts[expert]), ends[expert]
        for row in {start, (start + end) // 2, end - 1} if end > start else ():
            alone = torch.zeros_like(counts)
            alone[expert] = 1
            assert torch.equal(full[row], grouped_linear(x[row:row + 1], w, expert_schedule(alone))[0]), (expert, row)
            reference = x[row].float() @ w[expert].float().T
            assert ((full[row].float() - reference).norm() / reference.norm()).item() < 1e-2


@pytest.mark.parametrize("kind", ["softmax", "log_softmax", "logsumexp", "sum", "mean"])
@pytest.mark.parametrize("d", [2816, 262_144])
def test_row_reduce_rows_equal_alone(kind, d):
    from canvaslab.invariant.triton_kernels import row_reduce

    x = _rand(300, d, dtype=torch.float32)
    full = row_reduce(x, kind, torch.float32)
    for row in ROWS:
        assert torch.equal(full[row], row_reduce(x[row:row + 1], kind, torch.float32)[0]), row


@pytest.mark.parametrize("head_dim,queries", [(256, 256), (512, 256), (256, 1), (512, 1)])
def test_attention_rows_equal_alone_with_padding(head_dim, queries):
    from canvaslab.invariant.attention import invariant_attention_forward

    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups = False, 2
    batch, keys = 6, 320
    q, k, v = _rand(batch, 8, queries, head_dim), _rand(batch, 4, keys, head_dim, seed=1), _rand(batch, 4, keys, head_dim, seed=2)
    mask = torch.ones(batch, 1, queries, keys, dtype=torch.bool, device="cuda")
    mask[0, ..., :17] = False  # row 0 left-padded by 17 keys
    mask[3, ..., :5] = False
    out, _ = invariant_attention_forward(module, q, k, v, mask, scaling=head_dim ** -0.5)
    alone, _ = invariant_attention_forward(module, q[:1], k[:1, :, 17:], v[:1, :, 17:], None, scaling=head_dim ** -0.5)
    assert torch.equal(out[0], alone[0])
    for row in (1, 5):
        single, _ = invariant_attention_forward(module, q[row:row + 1], k[row:row + 1], v[row:row + 1], None,
                                                scaling=head_dim ** -0.5)
        assert torch.equal(out[row], single[0]), row


def test_library_overrides_route_cuda_ops_and_switch_off():
    from canvaslab.invariant import batch_invariant
    from canvaslab.invariant.triton_kernels import matmul

    a, b = _rand(64, 256), _rand(256, 128, seed=1)
    stock = a @ b
    with batch_invariant("cuda"):
        routed = a @ b
        norm, norm_alone = a.float().pow(2).mean(-1), a[3:4].float().pow(2).mean(-1)
    assert torch.equal(routed, matmul(a, b)) and torch.equal(a @ b, stock)
    assert torch.equal(norm[3], norm_alone[0])


@pytest.mark.parametrize("head_dim", [256, 512])
def test_attention_left_padded_prompts_equal_alone(head_dim):
    """A prompt pass encoded in the batch: rows left-padded by many lengths (padded queries see no key).
    Each row's real queries equal the row alone bit for bit, on the memory-efficient kernel with rows grouped
    by padding; padded queries are zeros."""
    from canvaslab.invariant.attention import invariant_attention_forward

    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups = True, 2
    paddings = [0, 1, 5, 12, 13, 20, 5, 63, 64, 100]
    width = 120
    batch = len(paddings)
    q, k, v = _rand(batch, 8, width, head_dim), _rand(batch, 4, width, head_dim, seed=1), _rand(batch, 4, width, head_dim, seed=2)
    start = torch.tensor(paddings, device="cuda")
    keys_real = torch.arange(width, device="cuda")[None] >= start[:, None]
    mask = (torch.ones(width, width, dtype=torch.bool, device="cuda").tril()[None] & keys_real[:, None, :])[:, None]
    out, _ = invariant_attention_forward(module, q, k, v, mask, scaling=head_dim ** -0.5)
    for row, padding in enumerate(paddings):
        alone, _ = invariant_attention_forward(module, q[row:row + 1, :, padding:], k[row:row + 1, :, padding:],
                                               v[row:row + 1, :, padding:], None, scaling=head_dim ** -0.5)
        assert torch.equal(out[row, padding:], alone[0]), padding
        assert not out[row, :padding].any(), padding
        reference = torch.nn.functional.scaled_dot_product_attention(
            q[row:row + 1, :, padding:].float(), k[row:row + 1, :, padding:].float().repeat_interleave(2, 1),
            v[row:row + 1, :, padding:].float().repeat_interleave(2, 1), is_causal=True, scale=head_dim ** -0.5)
        error = (alone[0].float() - reference[0].transpose(0, 1)).norm() / reference.norm()
        assert error.item() < 1e-2  # bf16 inputs and output
