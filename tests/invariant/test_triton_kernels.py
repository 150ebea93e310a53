"""The Triton kernels' logic, run on the CPU by Triton's interpreter (TRITON_INTERPRET=1).

Results must stay close to the stock op (float32 inputs within 1e-5 relative: IEEE fp32 dot products in
another order). What is checked bit for bit here is only what holds on any x86 CPU:

- Kernels built on ``tl.dot`` (matmul, grouped linear): the interpreter computes each tile's product
  with numpy's ``matmul``, i.e. numpy's BLAS (OpenBLAS in numpy's wheels). BLAS promises no bitwise
  result: on an AMD EPYC, OpenBLAS 0.3.31 gives a row of a 128x64 @ 64x128 tile other bits at position 24
  than at position 0, and nothing promises either that a row's bits ignore the other rows of its tile.
  So a batched row equal to the one-row result is checked on the compiled kernels, in ``tests/gpu``.
- Row reductions and the fused RMSNorm use no BLAS: ``tl.sum``/``tl.max`` are numpy reductions along
  each row of the tile, the same code over the same bytes whatever the row's neighbours, so the row
  check stays here.
"""

import os

import pytest
import torch
from hypothesis import given, settings, strategies as st

triton_kernels = pytest.importorskip("canvaslab.invariant.triton_kernels")

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available(),
                                reason="Triton needs a GPU or TRITON_INTERPRET=1")
DEVICE = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"


@settings(max_examples=6, deadline=None)
@given(m=st.integers(1, 40), k=st.integers(1, 150), n=st.integers(1, 140), row=st.integers(0, 39), seed=st.integers(0, 99))
def test_matmul_matches_stock(m, k, n, row, seed):
    # the row's bits against the one-row call: tests/gpu (tl.dot runs on numpy's BLAS here, see above)
    row = row % m
    gen = torch.Generator().manual_seed(seed)
    a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
    bias = torch.randn(n, generator=gen)
    full = triton_kernels.matmul(a.to(DEVICE), b.to(DEVICE), bias=bias.to(DEVICE)).cpu()
    alone = triton_kernels.matmul(a[row:row + 1].to(DEVICE), b.to(DEVICE), bias=bias.to(DEVICE)).cpu()
    torch.testing.assert_close(full, a @ b + bias, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(alone[0], full[row], rtol=1e-5, atol=1e-4)


def test_split_k_plan_depends_on_k_and_n_only_and_reduces_in_order():
    assert triton_kernels.split_k_plan(262_144, 2816) > 1
    assert triton_kernels.split_k_plan(2816, 128) == 1
    gen = torch.Generator().manual_seed(0)
    k = triton_kernels.SPLIT_K_MIN_K + 64
    a, b = torch.randn(3, k, generator=gen).to(DEVICE), torch.randn(k, 16, generator=gen).to(DEVICE)
    full = triton_kernels.matmul(a, b)
    torch.testing.assert_close(full, a @ b, rtol=1e-4, atol=1e-3)  # rows alone, bit for bit: tests/gpu


def test_batched_matmul():
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(3, 5, 24, generator=gen).to(DEVICE), torch.randn(3, 24, 17, generator=gen).to(DEVICE)
    out = triton_kernels.matmul(a, b)
    torch.testing.assert_close(out, torch.bmm(a, b), rtol=1e-5, atol=1e-5)  # rows alone: tests/gpu


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 9), d=st.integers(1, 5000), kind=st.sampled_from(sorted(triton_kernels.REDUCTIONS)),
       seed=st.integers(0, 99))
def test_row_reductions_row_equals_one_row_result(rows, d, kind, seed):
    # No BLAS involved (numpy reductions along the row): the row's bits hold on any x86 CPU.
    x = (torch.randn(rows, d, generator=torch.Generator().manual_seed(seed)) * 4).to(DEVICE)
    full = triton_kernels.row_reduce(x, kind, torch.float32)
    alone = triton_kernels.row_reduce(x[-1:], kind, torch.float32)
    assert torch.equal(full[-1], alone[0])
    stock = {"logsumexp": lambda t: t.logsumexp(-1), "softmax": lambda t: t.softmax(-1),
             "log_softmax": lambda t: t.log_softmax(-1), "sum": lambda t: t.sum(-1), "mean": lambda t: t.mean(-1)}[kind]
    torch.testing.assert_close(full, stock(x), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("d", [300, 20_000])  # a short-row and a long-row plan
def test_softmax_family_handles_masked_logits_like_stock(d):
    x = torch.randn(4, d, generator=torch.Generator().manual_seed(5))
    x[0, ::3] = float("-inf")  # masked tokens
    x[1, : d - 1] = float("-inf")  # a single visible token
    x[2] = float("-inf")  # nothing visible
    x = x.to(DEVICE)
    for kind, stock in (("logsumexp", x.logsumexp(-1)), ("softmax", x.softmax(-1)), ("log_softmax", x.log_softmax(-1))):
        torch.testing.assert_close(triton_kernels.row_reduce(x, kind, torch.float32), stock, rtol=1e-5, atol=1e-5,
                                   equal_nan=True)


def _routed(tokens, experts, top_k, hidden, seed):
    gen = torch.Generator().manual_seed(seed)
    choice = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)])
    flat = choice.reshape(-1)
    order = torch.sort(flat, stable=True).indices
    x = torch.randn(tokens, hidden, generator=gen)[order // top_k]
    return x, torch.bincount(flat, minlength=experts), flat[order]


@settings(max_examples=5, deadline=None)
@given(tokens=st.integers(1, 90), experts=st.integers(2, 9), n=st.integers(1, 150), k=st.integers(1, 140),
       transposed=st.booleans(), seed=st.integers(0, 99))
def test_grouped_linear_matches_float64(tokens, experts, n, k, transposed, seed):
    # the last row against its one-row call, bit for bit: tests/gpu (tl.dot runs on numpy's BLAS here)
    top_k = min(2, experts)
    x, counts, expert_of_row = _routed(tokens, experts, top_k, k, seed)
    weight = torch.randn(experts, n, k, generator=torch.Generator().manual_seed(seed + 1))
    stored = weight.transpose(1, 2).contiguous() if transposed else weight
    schedule = triton_kernels.expert_schedule(counts.to(DEVICE))
    out = triton_kernels.grouped_linear(x.to(DEVICE), stored.to(DEVICE), schedule, transposed).cpu()
    reference = torch.einsum("sk,snk->sn", x.double(), weight[expert_of_row].double())
    torch.testing.assert_close(out.double(), reference, rtol=1e-5, atol=1e-4)


def test_grouped_linear_gathers_its_rows_like_indexing():
    gen = torch.Generator().manual_seed(8)
    experts, k, n = 5, 48, 40
    x = torch.randn(23, k, generator=gen)
    rows = torch.randint(0, 23, (70,), generator=gen)
    counts = torch.tensor([0, 31, 2, 37, 0])
    weight = torch.randn(experts, n, k, generator=gen)
    schedule = triton_kernels.expert_schedule(counts.to(DEVICE))
    gathered = triton_kernels.grouped_linear(x.to(DEVICE), weight.to(DEVICE), schedule, rows=rows.to(DEVICE)).cpu()
    indexed = triton_kernels.grouped_linear(x[rows].to(DEVICE), weight.to(DEVICE), schedule).cpu()
    assert gathered.shape == (70, n)
    torch.testing.assert_close(gathered, indexed, rtol=1e-6, atol=1e-6)  # bit for bit on the GPU: tests/gpu


def test_invariant_experts_grouped_path_matches_per_expert_path(tiny_experts):
    from canvaslab.invariant import experts as invariant_experts

    config, module, gen = tiny_experts
    module.to(DEVICE)
    x, counts, _ = _routed(40, config.num_experts, config.top_k_experts, config.hidden_size, seed=4)
    x, counts = x.to(DEVICE), counts.to(DEVICE)
    with torch.no_grad():
        grouped = invariant_experts._grouped_on_cuda(module, x, triton_kernels.expert_schedule(counts))
        per_expert = invariant_experts._per_expert_on_cpu(module, x, counts)
    assert ((grouped - per_expert).norm() / per_expert.norm()).item() < 1e-6  # fp32, other summation order


@settings(max_examples=6, deadline=None)
@given(tokens=st.integers(1, 13), top_k=st.integers(1, 8), h=st.sampled_from([1, 64, 100, 2816]),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]), seed=st.integers(0, 99))
def test_expert_combine_matches_unpermute_weight_and_add(tokens, top_k, h, dtype, seed):
    # float32: elementwise products and adds in a fixed order, no BLAS: the interpreter's numpy computes them
    # IEEE-exactly, so the bits must equal the torch ops the kernel replaces (compiled for a GPU, the compiler
    # may contract a product and a sum into one fma: close there; H200 session 12). bfloat16: the interpreter
    # truncates float32 -> bfloat16 where the GPU rounds to nearest, so only closeness holds here (the
    # bits are checked on the GPU, tests/gpu). A token's result is its own either way.
    from canvaslab.invariant.experts import combine_in_order

    gen = torch.Generator().manual_seed(seed)
    routed = (torch.randn(tokens * top_k, h, generator=gen) * 3).to(dtype)
    routed[0, 0] = -0.0  # a -0.0 product must survive as in the stock sum
    order = torch.randperm(tokens * top_k, generator=gen)
    slots = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel())).view(tokens, top_k)
    weights = torch.rand(tokens, top_k, generator=gen)
    outputs = torch.empty_like(routed)
    outputs[order] = routed
    expected = combine_in_order(outputs.view(tokens, top_k, h), weights).to(dtype)
    fused = triton_kernels.combine_experts(routed.to(DEVICE), slots.to(DEVICE), weights.to(DEVICE)).cpu()
    if dtype == torch.float32 and DEVICE == "cpu":
        assert torch.equal(fused.view(torch.int32), expected.view(torch.int32))  # signs of zeros too
    elif dtype == torch.float32:  # compiled, a weight's product and the running sum may become one fma
        zeros = expected == 0
        assert torch.equal(torch.signbit(fused[zeros]), torch.signbit(expected[zeros]))
        torch.testing.assert_close(fused, expected, rtol=1e-6, atol=1e-6)
    else:
        scale = combine_in_order(outputs.abs().view(tokens, top_k, h), weights)  # the terms' magnitudes
        assert ((fused.float() - expected.float()).abs() <= 2 ** -5 * scale).all()  # an ulp per rounding (4)
    last = triton_kernels.combine_experts(routed.to(DEVICE), slots[-1:].to(DEVICE), weights[-1:].to(DEVICE)).cpu()
    assert torch.equal(last[0], fused[-1])


def test_grouped_tile_order_writes_every_tile_once(monkeypatch):
    # The wide plan's tile order (groups of GROUP_M row tiles) at toy tiles: M spans two full groups and a
    # partial one, N a partial column tile; the output starts as NaN, so a tile never written shows.
    plan = {"split": 1, "BM": 16, "BN": 16, "BK": 16, "GROUP_M": 2, "num_warps": 4, "num_stages": 3}
    monkeypatch.setattr(triton_kernels, "matmul_plan", lambda k, n, fp32=False: plan)
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: real_empty(*a, **k).fill_(float("nan")))
    gen = torch.Generator().manual_seed(5)
    a, b = torch.randn(83, 40, generator=gen), torch.randn(40, 37, generator=gen)
    out = triton_kernels.matmul(a.to(DEVICE), b.to(DEVICE)).cpu()
    torch.testing.assert_close(out, a @ b, rtol=1e-5, atol=1e-4)


def test_matmul_plan_is_wide_and_grouped_only_for_long_k_in_16_bits():
    long_k = triton_kernels.matmul_plan(262_144, 2816)
    assert (long_k["BN"], long_k["GROUP_M"], long_k["split"]) == (256, 8, triton_kernels.split_k_plan(262_144, 2816))
    assert triton_kernels.matmul_plan(262_144, 2816, fp32=True)["BN"] == triton_kernels.BLOCK_N
    assert triton_kernels.matmul_plan(2816, 262_144)["GROUP_M"] == 0


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 9), d=st.sampled_from([1, 16, 100, 256, 2816, 5000]), with_scale=st.booleans(),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]), seed=st.integers(0, 99))
def test_fused_rms_norm_matches_the_model_norm_and_row_equals_one_row_result(rows, d, with_scale, dtype, seed):
    from transformers.models.diffusion_gemma.modeling_diffusion_gemma import DiffusionGemmaRMSNorm
    from canvaslab.models import anatomy

    gen = torch.Generator().manual_seed(seed)
    norm = DiffusionGemmaRMSNorm(d, eps=1e-6, with_scale=with_scale)
    if with_scale:
        with torch.no_grad():
            norm.weight.normal_(generator=gen)
    norm.to(DEVICE)
    x = (torch.randn(rows, 3, d, generator=gen) * 3).to(DEVICE, dtype)
    weight = norm.weight if with_scale else None
    eps = anatomy.rms_norm_epsilon(norm)
    full = triton_kernels.rms_norm(x, weight, eps)
    assert full.dtype == dtype and full.shape == x.shape
    assert torch.equal(full[-1], triton_kernels.rms_norm(x[-1:], weight, eps)[0])
    tolerance = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2}[dtype]  # bf16: torch's default bf16 tolerance
    with torch.no_grad():
        torch.testing.assert_close(full.float(), norm(x).float(), rtol=tolerance, atol=tolerance)


def test_fused_rms_norms_swap_every_norm_and_restore_them():
    from transformers.models.diffusion_gemma.modeling_diffusion_gemma import DiffusionGemmaRMSNorm

    from canvaslab.invariant.norms import fused_rms_norms
    from canvaslab.models import load_model

    model = load_model("tiny", device=DEVICE).model
    norms = [m for m in model.modules() if isinstance(m, DiffusionGemmaRMSNorm)]
    x = torch.randn(2, 5, model.config.text_config.hidden_size, device=DEVICE)
    norm = next(m for m in norms if m.with_scale and m.weight.shape[0] == x.shape[-1])
    stock = norm(x)
    with fused_rms_norms(model):
        assert len(norms) > 10 and all("forward" in vars(m) for m in norms)
        fused = norm(x)
    assert not any("forward" in vars(m) for m in norms)
    assert torch.equal(norm(x), stock)
    torch.testing.assert_close(fused, stock, rtol=1e-5, atol=1e-5)


def _norm_then_eager_rotary(x, weight, eps, cos, sin):
    from transformers.models.diffusion_gemma.modeling_diffusion_gemma import apply_rotary_pos_emb

    return apply_rotary_pos_emb(triton_kernels.rms_norm(x, weight, eps), cos, sin, unsqueeze_dim=2)


@settings(max_examples=6, deadline=None)
@given(batch=st.integers(1, 3), length=st.integers(1, 9), heads=st.integers(1, 4), d=st.sampled_from([2, 16, 64, 256]),
       with_scale=st.booleans(), dtype=st.sampled_from([torch.float32, torch.bfloat16]), seed=st.integers(0, 99))
def test_rms_norm_with_rope_is_the_norm_then_the_eager_rotary_ops(batch, length, heads, d, with_scale, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(batch, length, heads, d, generator=gen) * 3).to(DEVICE, dtype)
    weight = torch.randn(d, generator=gen).to(DEVICE, dtype) if with_scale else None
    angles = torch.randn(batch, length, d, generator=gen) * 4
    cos, sin = angles.cos().to(DEVICE, dtype), angles.sin().to(DEVICE, dtype)
    fused = triton_kernels.rms_norm(x, weight, 1e-6, rope=(cos, sin))
    expected = _norm_then_eager_rotary(x, weight, 1e-6, cos, sin)
    if dtype == torch.float32 and DEVICE == "cpu":
        assert torch.equal(fused, expected)  # every rounding where the eager ops round
    else:  # compiled, the kernel may contract a product and a sum into one fma, and its layout may order the
        # norm's sum differently from the norm-only kernel; the interpreter rounds to bfloat16 its own way
        step = 2 ** -6 if dtype == torch.bfloat16 else 1e-6
        torch.testing.assert_close(fused.float(), expected.float(), rtol=step, atol=step)
    assert torch.equal(fused[-1], triton_kernels.rms_norm(x[-1:], weight, 1e-6, rope=(cos[-1:], sin[-1:]))[0])


def test_fused_attention_forward_is_transformers_forward_with_the_norms_fused(monkeypatch):
    """The attention modules' replaced ``forward`` (norm and rotary in one launch) returns, in float32, the bits of
    transformers' own forward with only the norms fused (on the CPU; close to them on a GPU), for encoder and
    decoder attention, sliding and full."""
    from canvaslab.generation import generate
    from canvaslab.invariant import norms
    from canvaslab.invariant.modes import Invariant
    from canvaslab.models import anatomy, load_model

    loaded = load_model("tiny", device=DEVICE)
    attentions = {name: module for name, module in loaded.model.named_modules()
                  if isinstance(module, (anatomy.ENCODER_ATTENTION_CLASS, anatomy.DECODER_ATTENTION_CLASS))}
    monkeypatch.setattr(Invariant, "swaps_cuda_modules", lambda self, model: True)
    prompts = [loaded.tokenizer("the water in the river")["input_ids"], loaded.tokenizer("cold")["input_ids"]]

    def attention_outputs():
        seen = {name: [] for name in attentions}
        handles = [module.register_forward_hook(lambda m, a, out, name=name: seen[name].append(out[0].clone()))
                   for name, module in attentions.items()]
        try:
            generate(loaded, prompts, generation={"max_denoising_steps": 2}, mode="invariant")
        finally:
            for handle in handles:
                handle.remove()
        return seen

    fused = attention_outputs()
    monkeypatch.setattr(norms, "_fused_attention_forward", lambda module: lambda *a, **k: type(module).forward(module, *a, **k))
    stock_forward = attention_outputs()
    assert len(attentions) == 4 and all(fused.values())  # the encoder once, the decoder at every pass
    for name in attentions:
        assert [o.shape for o in fused[name]] == [o.shape for o in stock_forward[name]]
        for a, b in zip(fused[name], stock_forward[name]):
            if DEVICE == "cpu":  # the interpreter rounds where the eager ops round
                assert torch.equal(a, b), name
            else:  # compiled, the kernel may contract a product and a sum into one fma (benchmarks/rotary_probe.py at commit cfcbda3)
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=name)


def _stock_scaled(raw: torch.Tensor, softcap: float, temperature: float) -> torch.Tensor:
    return torch.tanh(raw.float() / softcap) * softcap / temperature


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_vocab_sample_matches_the_stock_chain(dtype):
    gen = torch.Generator().manual_seed(3)
    raw = (torch.randn(2, 3, 700, generator=gen) * 20).to(dtype)
    seeds = torch.tensor([5, 2 ** 62 + 7], dtype=torch.int64)
    scaled, entropy, argmax, sample = triton_kernels.vocab_sample(raw.to(DEVICE), seeds.to(DEVICE), 0.6, softcap=30.0,
                                                                  out=torch.empty(2, 3, 700, device=DEVICE))
    reference = _stock_scaled(raw, 30.0, 0.6)
    torch.testing.assert_close(scaled.cpu(), reference, rtol=1e-5, atol=1e-5)
    stock_entropy = torch.distributions.Categorical(logits=reference).entropy()
    torch.testing.assert_close(entropy.cpu(), stock_entropy, rtol=1e-4, atol=1e-5)
    assert torch.equal(argmax.cpu(), scaled.cpu().argmax(-1))
    assert ((sample >= 0) & (sample < 700)).all()


def test_vocab_sample_entropy_of_a_near_certain_row_keeps_its_digits():
    logits = torch.full((1, 1, 512), -40.0)
    logits[0, 0, 17] = 40.0  # one token holds all but ~e^-80 of the mass
    logits[0, 0, 3] = 30.0
    _, entropy, argmax, sample = triton_kernels.vocab_sample(logits.to(DEVICE), torch.tensor([1], device=DEVICE), 1.0)
    stock = torch.distributions.Categorical(logits=logits.double()).entropy().float()
    torch.testing.assert_close(entropy.cpu(), stock, rtol=1e-3, atol=1e-12)
    assert argmax.item() == sample.item() == 17


def test_vocab_sample_ties_go_to_the_first_index_like_torch_argmax():
    logits = torch.zeros(1, 2, 5000)
    logits[0, 0, [7, 4000, 4999]] = 3.0
    logits[0, 1, [2048, 2049]] = 3.0  # the same lane in consecutive blocks, and neighbours
    _, _, argmax, _ = triton_kernels.vocab_sample(logits.to(DEVICE), torch.tensor([1], device=DEVICE), 1.0)
    assert argmax.cpu().tolist() == [[7, 2048]]


@settings(max_examples=5, deadline=None)
@given(batch=st.integers(2, 4), length=st.integers(1, 5), v=st.sampled_from([3, 64, 300, 5000]), seed=st.integers(0, 99))
def test_vocab_sample_row_equals_the_row_alone_and_is_in_place_safe(batch, length, v, seed):
    gen = torch.Generator().manual_seed(seed)
    raw = (torch.randn(batch, length, v, generator=gen) * 5).to(torch.bfloat16).to(DEVICE)
    seeds = torch.randint(0, 2 ** 62, (batch,), generator=gen).to(DEVICE)
    full = triton_kernels.vocab_sample(raw, seeds, 0.8, softcap=30.0)
    row = batch - 1
    alone = triton_kernels.vocab_sample(raw[row:].clone(), seeds[row:], 0.8, softcap=30.0)
    for batched, single in zip(full, alone):
        assert torch.equal(batched[row], single[0])
    in_place = raw.clone()
    triton_kernels.vocab_sample(in_place, seeds, 0.8, softcap=30.0, out=in_place)
    assert torch.equal(in_place, full[0])


def test_vocab_sample_draws_follow_the_softmax_across_quarters_and_blocks():
    # One Philox call serves four tokens, a quarter-block apart: candidates placed in different quarters, in
    # the ragged last block and past the first block must each be drawn at their softmax rate.
    from scipy.stats import chisquare

    v, places = 4100, [3, 1030, 2050, 3000, 4099]
    row = torch.full((v,), -40.0)
    row[places] = torch.tensor([0.0, 1.0, 2.0, 0.5, 1.5])
    logits = row.expand(1, 400, v).contiguous()
    _, _, _, sample = triton_kernels.vocab_sample(logits.to(DEVICE), torch.tensor([5], device=DEVICE), 1.0)
    drawn = sample.cpu().flatten()
    assert set(drawn.tolist()) <= set(places)
    counts = torch.stack([(drawn == p).sum() for p in places]).double()
    probs = torch.softmax(row[places].double(), -1)
    assert chisquare(counts.numpy(), (probs * counts.sum()).numpy()).pvalue > 1e-4


def test_vocab_sample_draws_follow_the_softmax():
    from scipy.stats import chisquare

    logits = torch.tensor([0.0, 1.0, 2.0, 0.5]).expand(1, 4096, 4).contiguous()
    _, _, _, sample = triton_kernels.vocab_sample(logits.to(DEVICE), torch.tensor([11], device=DEVICE), 0.9)
    counts = torch.bincount(sample.cpu().flatten(), minlength=4).double()
    probs = torch.softmax(logits[0, 0].double() / 0.9, -1)
    expected = probs / probs.sum() * counts.sum()
    assert chisquare(counts.numpy(), expected.numpy()).pvalue > 1e-4
    again = triton_kernels.vocab_sample(logits.to(DEVICE), torch.tensor([11], device=DEVICE), 0.9)[3]
    other = triton_kernels.vocab_sample(logits.to(DEVICE), torch.tensor([12], device=DEVICE), 0.9)[3]
    assert torch.equal(again, sample) and not torch.equal(other, sample)  # the row's seed decides, nothing else


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_topk_rows_is_the_stable_descending_sort_ties_nan_and_signed_zeros_included(dtype):
    gen = torch.Generator().manual_seed(0)
    x = (torch.randint(-3, 4, (37, 128), generator=gen).float() / 2).to(dtype)  # many ties
    x[0, 5] = x[0, 77] = float("nan")
    x[1] = float("-inf")
    x[3] = 0.0
    x[3, ::3] = -0.0
    x[4, 9] = float("inf")
    x = x.to(DEVICE)
    values, indices = triton_kernels.topk_rows(x, 8)
    sorted_values, sorted_indices = torch.sort(x, dim=-1, descending=True, stable=True)
    bits = torch.int32 if dtype == torch.float32 else torch.int16
    assert torch.equal(indices, sorted_indices[:, :8])
    assert torch.equal(values.view(bits), sorted_values[:, :8].contiguous().view(bits))


@given(rows=st.integers(1, 40), d=st.integers(8, 200), k=st.integers(1, 8), row=st.integers(0, 39), seed=st.integers(0, 99))
@settings(max_examples=10, deadline=None)
def test_topk_rows_row_equals_one_row_result(rows, d, k, row, seed):
    row = row % rows
    x = torch.randn(rows, d, generator=torch.Generator().manual_seed(seed)).to(DEVICE)
    values, indices = triton_kernels.topk_rows(x, k)
    one_values, one_indices = triton_kernels.topk_rows(x[row:row + 1], k)
    assert torch.equal(indices[row], one_indices[0]) and torch.equal(values[row], one_values[0])


def test_uniform_tokens_depend_on_the_row_seed_alone_and_cover_the_vocabulary():
    seeds = torch.tensor([7, 2 ** 62 + 3, 7, -5], dtype=torch.int64, device=DEVICE)
    tokens = triton_kernels.uniform_tokens(seeds, 300, 10)
    assert tokens.shape == (4, 300) and tokens.dtype == torch.int64
    assert torch.equal(tokens[0], tokens[2]) and not torch.equal(tokens[0], tokens[1])
    assert torch.equal(triton_kernels.uniform_tokens(seeds[1:2], 300, 10)[0], tokens[1])
    counts = torch.bincount(triton_kernels.uniform_tokens(torch.arange(400, device=DEVICE), 250, 10).flatten().cpu(),
                            minlength=10)
    assert counts.numel() == 10 and counts.min() > 9000 and counts.max() < 11000  # 100,000 draws, 10,000 expected


def test_keep_rows_copies_exactly_the_flagged_rows():
    dst = torch.zeros(3, 4, 5000, device=DEVICE)
    src = torch.arange(3 * 4 * 5000, dtype=torch.float32, device=DEVICE).view(3, 4, 5000)
    kept = triton_kernels.keep_rows(dst, src, torch.tensor([False, True, False], device=DEVICE))
    assert kept is dst and torch.equal(dst[1], src[1]) and not dst[0].any() and not dst[2].any()
