"""Every op the invariant mode replaces: row i of a batched result equals the one-row result, bit for
bit, on the CPU path, and stays close to the stock op.

Tolerances against stock: float32 matmuls within the forward error bound of a float32 dot product in any
summation order, ``|error| <= gamma_(k+1) * (|x| @ |w| + |b|)`` elementwise (Higham), doubled; not a relative
error of the result, which cancellation makes unbounded (k=162, n=1 gave 2.5e-4 against a 1e-5 limit once).
Reductions within rtol 1e-6 (bfloat16: 1e-2).

Why the bit-for-bit checks hold on any x86 CPU (Intel or AMD, MKL or OpenBLAS): they assert nothing about
BLAS. The CPU path (``invariant.cpu``) sends every row through its own ``(1, K) @ (K, N)`` GEMM call, so the
batched row and the row alone are the same library call on the same bytes (here even the same address,
``x[row:row + 1]``) in the same process; reductions are ATen's own loops along each row of fixed-size
chunks, not BLAS. A row's position inside a multi-row GEMM, which BLAS does not keep out of its bits, never
enters.
"""

import pytest
import torch
from torch.nn import functional as F
from hypothesis import example, given, settings, strategies as st

from canvaslab.invariant import batch_invariant

rows_and_row = st.integers(1, 200).flatmap(lambda m: st.tuples(st.just(m), st.integers(0, m - 1)))


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _assert_float32_product(result, a, b, bias=None):
    """``result`` is ``a @ b (+ bias)`` up to float32 rounding in some summation order."""
    a, b = a.double(), b.double()
    exact, magnitude = a @ b, a.abs() @ b.abs()
    if bias is not None:
        exact, magnitude = exact + bias.double(), magnitude + bias.double().abs()
    k, unit = a.shape[-1], 2.0 ** -24
    bound = 2 * (k + 1) * unit / (1 - (k + 1) * unit) * magnitude
    assert ((result.double() - exact).abs() <= bound).all()


@settings(max_examples=40, deadline=None)
@given(mr=rows_and_row, k=st.integers(1, 300), n=st.integers(1, 300), seed=st.integers(0, 999))
@example(mr=(1, 0), k=162, n=1, seed=206)  # a cancelling dot product: relative error 2.5e-4, within float32's bound
def test_linear_row_invariant(mr, k, n, seed):
    m, row = mr
    x, w, b = _rand(m, k, seed=seed), _rand(n, k, seed=seed + 1), _rand(n, seed=seed + 2)
    with batch_invariant():
        full = torch.nn.functional.linear(x, w, b)
        alone = torch.nn.functional.linear(x[row:row + 1], w, b)
        no_bias = torch.nn.functional.linear(x, w)
        no_bias_alone = torch.nn.functional.linear(x[row:row + 1], w)
    assert torch.equal(full[row], alone[0]) and torch.equal(no_bias[row], no_bias_alone[0])
    _assert_float32_product(full, x, w.T, b)
    _assert_float32_product(no_bias, x, w.T)


@settings(max_examples=10, deadline=None)
@given(batch=st.integers(1, 6), s=st.integers(1, 70), k=st.integers(1, 90), seed=st.integers(0, 999))
def test_matmul_3d_and_bmm_row_invariant(batch, s, k, seed):
    probs, emb = _rand(batch, s, k, seed=seed), _rand(k, 33, seed=seed + 1)
    other = _rand(batch, k, 9, seed=seed + 2)
    with batch_invariant():
        full, alone = torch.matmul(probs, emb), torch.matmul(probs[-1:], emb)
        bfull, balone = torch.bmm(probs, other), torch.bmm(probs[-1:], other[-1:])
    assert torch.equal(full[-1], alone[0]) and torch.equal(bfull[-1], balone[0])
    _assert_float32_product(full, probs, emb)
    _assert_float32_product(bfull, probs, other)


REDUCERS = {
    "softmax": lambda t: t.softmax(-1),
    "softmax_fp32": lambda t: torch.softmax(t, -1, dtype=torch.float32),
    "log_softmax": lambda t: t.log_softmax(-1),
    "logsumexp": lambda t: t.logsumexp(-1),
    "entropy": lambda t: torch.distributions.Categorical(logits=t).entropy(),
    "sum": lambda t: t.sum(-1),
    "mean_keepdim": lambda t: t.mean(-1, keepdim=True),
}


@settings(max_examples=20, deadline=None)
@given(mr=rows_and_row, d=st.integers(1, 3000), name=st.sampled_from(sorted(REDUCERS)), seed=st.integers(0, 999),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]))
def test_row_reductions_row_invariant(mr, d, name, seed, dtype):
    m, row = mr
    x = (_rand(m, d, seed=seed) * 3).to(dtype)
    op = REDUCERS[name]
    with batch_invariant():
        full, alone = op(x), op(x[row:row + 1])
    assert torch.equal(full[row], alone[0])
    torch.testing.assert_close(full.float(), op(x).float(), rtol=1e-2 if dtype == torch.bfloat16 else 1e-6,
                               atol=1e-2 if dtype == torch.bfloat16 else 1e-5)


@settings(max_examples=15, deadline=None)
@given(mr=rows_and_row, h=st.sampled_from([16, 64, 256, 2816]), seed=st.integers(0, 999))
def test_rms_norm_row_invariant_at_model_widths(mr, h, seed):
    # Elementwise ops are not replaced: on the CPU their vectorised body and scalar tail can round
    # differently (seen for bfloat16 with a width of 1), so this holds at widths that fill whole vectors,
    # as every DiffusionGemma hidden and head size does.
    m, row = mr
    x = _rand(m, 3, h, seed=seed)
    norm = lambda t: t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6)  # noqa: E731
    with batch_invariant():
        full, alone = norm(x), norm(x[row:row + 1])
    assert torch.equal(full[row], alone[0])


@settings(max_examples=10, deadline=None)
@given(mr=rows_and_row, e=st.integers(2, 64), seed=st.integers(0, 999))
def test_topk_is_stable_and_row_invariant(mr, e, seed):
    m, row = mr
    k = min(8, e)
    x = torch.randint(0, 4, (m, e), generator=torch.Generator().manual_seed(seed)).float()  # many ties
    with batch_invariant():
        values, indices = torch.topk(x, k)
        alone_values, alone_indices = torch.topk(x[row:row + 1], k)
    assert torch.equal(indices[row], alone_indices[0]) and torch.equal(values[row], alone_values[0])
    expected = torch.sort(x, descending=True, stable=True)
    assert torch.equal(indices, expected.indices[:, :k])


def test_mode_switches_off_cleanly():
    x, w = _rand(3, 5), _rand(4, 5)
    with batch_invariant():
        pass
    from torch.utils._python_dispatch import _get_current_dispatch_mode
    assert _get_current_dispatch_mode() is None
    assert torch.equal(torch.nn.functional.linear(x, w), torch.nn.functional.linear(x, w))


def test_unsupported_cases_fall_back_to_stock(monkeypatch):
    from canvaslab.invariant import cpu

    routed = []
    monkeypatch.setattr(cpu, "row_op", lambda op, x: routed.append(x.shape))
    integers, floats = torch.randint(0, 5, (4, 6)), _rand(4, 6)
    with batch_invariant():
        int_sum, batch_dim_sum = integers.sum(-1), floats.sum(0)
    assert routed == []  # integer sums and sums over the batch dim are not rerouted
    assert torch.equal(int_sum, integers.sum(-1)) and torch.equal(batch_dim_sum, floats.sum(0))


@pytest.mark.parametrize("batch", [3, 7])
def test_invariant_attention_drops_padding_and_matches_alone(batch):
    from canvaslab.invariant.attention import invariant_attention_forward

    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups = False, 1
    q, k, v = _rand(batch, 2, 5, 8), _rand(batch, 2, 11, 8, seed=1), _rand(batch, 2, 11, 8, seed=2)
    mask = torch.ones(batch, 1, 5, 11, dtype=torch.bool)
    mask[0, ..., :3] = False  # row 0 is left-padded by 3 keys
    out, _ = invariant_attention_forward(module, q, k, v, mask, scaling=0.5)
    alone, _ = invariant_attention_forward(module, q[:1], k[:1, :, 3:], v[:1, :, 3:], None, scaling=0.5)
    assert torch.equal(out[0], alone[0])


def test_replaced_ops_are_really_routed(monkeypatch):
    from canvaslab.invariant import cpu

    calls = []
    original = cpu._chunks
    monkeypatch.setattr(cpu, "_chunks", lambda rows, compute: calls.append(rows.shape) or original(rows, compute))
    original_mm = cpu.mm
    monkeypatch.setattr(cpu, "mm", lambda kernel, a, b: calls.append(a.shape) or original_mm(kernel, a, b))
    with batch_invariant():
        torch.nn.functional.linear(_rand(3, 4), _rand(5, 4))
        _rand(3, 9).softmax(-1)
        _rand(3, 9).mean(-1)
    assert len(calls) == 3


def test_sort_is_stable_under_the_mode():
    x = torch.tensor([[1.0, 0.5, 1.0, 0.5, 1.0] * 40])
    import canvaslab

    with canvaslab.batch_invariant():
        values, indices = torch.sort(x, dim=-1)
    expected = torch.sort(x, dim=-1, stable=True)
    assert torch.equal(indices, expected.indices) and torch.equal(values, expected.values)


def test_element_wise_ops_give_a_row_the_same_bits_whatever_the_tensor_around_it():
    """Two threads split a (547, 32) GELU at element 8,752, inside row 273: that row took the scalar remainder
    path in one thread and the vector path alone (different bits for tanh's approximation)."""
    torch.manual_seed(0)
    gate_up = torch.randn(547, 64)
    gate = gate_up.chunk(2, dim=-1)[0]  # a strided view, as the experts' gate is
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with batch_invariant("cpu"):
            together = F.gelu(gate, approximate="tanh")
            alone = torch.cat([F.gelu(gate[i:i + 1], approximate="tanh") for i in range(gate.shape[0])])
        assert torch.get_num_threads() == 2  # restored after the block
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(together, alone)


@pytest.mark.parametrize("device", ["CPU", "Cuda", "meta", "mps", "cpu ", "", 0, torch.device("meta")])
def test_an_unknown_device_is_refused_by_the_call_before_anything_is_installed(device):
    """Entering the block and installing nothing would run stock ops where the code believes them invariant."""
    from canvaslab.errors import CanvaslabError

    with pytest.raises(CanvaslabError, match=r"batch_invariant\(.*\): give \"cuda\""):
        batch_invariant(device)


@pytest.mark.parametrize("device", ["cpu", "cpu:0", torch.device("cpu")])
def test_the_cpu_side_is_named_as_torch_names_it(device):
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    with batch_invariant(device):
        assert type(_get_current_dispatch_mode()).__name__ == "BatchInvariantMode"


def test_a_cuda_device_of_any_index_is_the_cuda_side():
    from canvaslab.invariant.ops import installed_sides

    assert installed_sides("cuda:1") == installed_sides(torch.device("cuda", 0)) == installed_sides("cuda") == ("cuda",)
    assert installed_sides(None) == ("cuda", "cpu")
