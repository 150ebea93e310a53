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


# Moved from the Triton-interpreter tests (tests/invariant): there ``tl.dot`` runs on numpy's BLAS, which
# promises no bitwise result; here the compiled kernels fix the order of every reduction themselves.
@pytest.mark.parametrize("m,k,n,seed", [(40, 150, 140, 0), (128, 64, 128, 1), (300, 64, 128, 2), (7, 1, 1, 3)])
def test_float32_matmul_with_bias_rows_equal_one_row_results(m, k, n, seed):
    from canvaslab.invariant.triton_kernels import matmul

    a, b, bias = _rand(m, k, seed=seed, dtype=torch.float32), _rand(k, n, seed=seed + 1, dtype=torch.float32), \
        _rand(n, seed=seed + 2, dtype=torch.float32)
    full = matmul(a, b, bias=bias)
    for row in sorted({0, 1, 24, m // 2, m - 1} & set(range(m))):
        assert torch.equal(full[row], matmul(a[row:row + 1], b, bias=bias)[0]), row


def test_split_k_and_batched_matmul_rows_equal_one_row_results():
    from canvaslab.invariant.triton_kernels import SPLIT_K_MIN_K, matmul

    a, b = _rand(3, SPLIT_K_MIN_K + 64, dtype=torch.float32), _rand(SPLIT_K_MIN_K + 64, 16, seed=1, dtype=torch.float32)
    full = matmul(a, b)
    assert all(torch.equal(full[row], matmul(a[row:row + 1], b)[0]) for row in range(3))
    a3, b3 = _rand(3, 5, 24, seed=2, dtype=torch.float32), _rand(3, 24, 17, seed=3, dtype=torch.float32)
    assert torch.equal(matmul(a3, b3)[1, 3], matmul(a3[1:2, 3:4], b3[1:2])[0, 0])


@pytest.mark.parametrize("tokens,experts,transposed", [(90, 9, False), (37, 4, True), (1, 2, False)])
def test_float32_grouped_linear_last_row_equals_alone(tokens, experts, transposed):
    from canvaslab.invariant.triton_kernels import expert_schedule, grouped_linear

    gen = torch.Generator().manual_seed(tokens)
    expert_of_row = torch.sort(torch.randint(0, experts, (tokens,), generator=gen)).values
    counts = torch.bincount(expert_of_row, minlength=experts).cuda()
    x, weight = _rand(tokens, 140, seed=1, dtype=torch.float32), _rand(experts, 150, 140, seed=2, dtype=torch.float32)
    stored = weight.transpose(1, 2).contiguous() if transposed else weight
    out = grouped_linear(x, stored, expert_schedule(counts), transposed)
    alone = torch.zeros_like(counts)
    alone[expert_of_row[-1]] = 1
    assert torch.equal(out[-1], grouped_linear(x[-1:], stored, expert_schedule(alone), transposed)[0])


@pytest.mark.parametrize("case", ["mm", "linear_bias", "addmm_scaled", "bmm"])
def test_overridden_matrix_products_are_row_invariant(case):
    from canvaslab.invariant import batch_invariant

    x = _rand(5, 6, 12, seed=7, dtype=torch.float32)
    w = {name: _rand(*shape, seed=seed, dtype=torch.float32) for name, shape, seed in
         [("mm", (12, 7), 1), ("lw", (9, 12), 1), ("lb", (9,), 2), ("ab", (7,), 1), ("am", (12, 7), 2), ("bmm", (5, 12, 5), 1)]}
    op = {"mm": lambda t: (t.reshape(-1, 12) @ w["mm"]).reshape(t.shape[0], -1),
          "linear_bias": lambda t: torch.nn.functional.linear(t, w["lw"], w["lb"]),
          "addmm_scaled": lambda t: torch.addmm(w["ab"], t.reshape(-1, 12), w["am"], beta=0.5, alpha=2.0).reshape(t.shape[0], -1),
          "bmm": lambda t: torch.bmm(t, w["bmm"][-t.shape[0]:])}[case]
    with batch_invariant("cuda"):
        full, alone = op(x), op(x[-1:])
    assert torch.equal(full[-1], alone[0])


@pytest.mark.parametrize("fill", ["copies", "mixed"])
def test_whole_generation_matches_b1_under_the_cuda_overrides(fill):
    from canvaslab.models import load_model
    from canvaslab.prompts import builtin_prompts
    from canvaslab.studies.batch_size import BatchStudySettings, run_batch_study

    tiny = load_model("tiny", device="cuda")
    settings = BatchStudySettings(batch_sizes=[1, 2, 3, 8], fill=fill, mode="invariant", repeat_control="same-process",
                                  generation={"max_denoising_steps": 2})
    summary = run_batch_study(tiny, builtin_prompts(2), settings)["summary"]
    assert summary["diverged"] == 0 and summary["passes_matching"] == summary["passes_total"] > 0


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


def test_long_k_plan_rows_equal_alone_past_its_first_group_of_row_tiles():
    # The self-conditioning product's plan visits row tiles in groups of 8 (1,024 rows): rows in the second
    # and third group, and the last row, equal the row alone.
    from canvaslab.invariant.triton_kernels import matmul

    a, b = _rand(2100, 262_144), _rand(262_144, 2816, seed=1) / 512
    full = matmul(a, b)
    for row in [0, 1030, 2047, 2048, 2099]:
        assert torch.equal(full[row], matmul(a[row:row + 1], b)[0]), row


def test_expert_combine_has_the_bits_of_unpermute_weight_and_add_in_bf16():
    from canvaslab.invariant.experts import combine_in_order
    from canvaslab.invariant.triton_kernels import combine_experts

    tokens, top_k, hidden = 1000, 8, 2816
    gen = torch.Generator().manual_seed(7)
    routed = _rand(tokens * top_k, hidden, seed=3)
    order = torch.randperm(tokens * top_k, generator=gen).cuda()
    slots = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device="cuda")).view(tokens, top_k)
    weights = torch.rand(tokens, top_k, generator=gen).cuda()
    outputs = torch.empty_like(routed)
    outputs[order] = routed
    expected = combine_in_order(outputs.view(tokens, top_k, hidden), weights).to(torch.bfloat16)
    fused = combine_experts(routed, slots, weights)
    assert torch.equal(fused.view(torch.int16), expected.view(torch.int16))
    assert torch.equal(combine_experts(routed, slots[-1:], weights[-1:])[0], fused[-1])


def test_grouped_linear_gather_has_the_bits_of_indexed_rows():
    from canvaslab.invariant.triton_kernels import expert_schedule, grouped_linear

    experts, hidden, inter = 128, 2816, 1408
    gen = torch.Generator().manual_seed(9)
    x, w = _rand(700, hidden), _rand(experts, inter, hidden, seed=1) / hidden ** 0.5
    rows = torch.randint(0, 700, (5600,), generator=gen).cuda()
    schedule = expert_schedule(torch.bincount(torch.randint(0, experts, (5600,), generator=gen), minlength=experts).cuda())
    assert torch.equal(grouped_linear(x, w, schedule, rows=rows), grouped_linear(x[rows], w, schedule))


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_lm_head_per_canvas_rows_equal_the_canvas_alone_at_any_position(batch):
    from canvaslab.invariant.vocabulary import canvas_linear

    head = _rand(262_144, 2816, seed=1) / 2816 ** 0.5
    needle = _rand(1, 256, 2816, seed=2)
    alone = canvas_linear(needle, head)
    for position in range(batch):
        canvases = _rand(batch, 256, 2816, seed=3)
        canvases[position] = needle[0]
        assert torch.equal(canvas_linear(canvases, head)[position], alone[0]), position
    reference = needle[0].float() @ head.float().t()
    assert ((alone[0].float() - reference).norm() / reference.norm()).item() < 1e-2  # bf16 output rounding
