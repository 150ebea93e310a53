"""The routing kernels (``expert_grouping``, ``route``) under Triton's interpreter, against the ops they replace.

The grouping is integer arithmetic (one answer), checked bit for bit. The router is checked for the same experts
and close values (a compiled kernel rounds its float32 softmax on its own: on an H100 its last bits differed from
the ops'), and bit for bit only where invariance needs it: each row the same alone and in a batch. On a GPU the
checks run compiled, at real sizes, in ``tests/gpu/test_routing_gpu.py``.
"""

import os

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

triton_kernels = pytest.importorskip("canvaslab.invariant.triton_kernels")

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="runs the Triton interpreter")


def _sorted_path(flat: torch.Tensor, experts: int, top_k: int, block_m: int) -> dict:
    """What the experts computed before the grouping kernels: stable sort, counts, scatter, division, schedule."""
    order = torch.sort(flat, stable=True).indices
    counts = torch.zeros(experts, dtype=torch.int64).index_add_(0, flat, torch.ones_like(flat))
    slots = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel()))
    return {"order": order, "slots": slots, "rows": order // top_k, "counts": counts,
            "schedule": triton_kernels.expert_schedule(counts, block_m)}


def _assert_grouping_is_the_sort(flat, experts, top_k, block_m=triton_kernels.GROUPED_BLOCK_M):
    got = triton_kernels.expert_grouping(flat, experts, top_k, block_m)
    expected = _sorted_path(flat, experts, top_k, block_m)
    for name in ("order", "slots", "rows", "counts"):
        assert got[name].dtype == expected[name].dtype and torch.equal(got[name], expected[name]), name
    for got_part, expected_part in zip(got["schedule"], expected["schedule"]):
        assert got_part.dtype == expected_part.dtype and torch.equal(got_part, expected_part)


def _ids(entries, experts, seed):
    return torch.randint(0, experts, (entries,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("flat,experts,top_k", [
    (torch.tensor([2]), 4, 1),  # one token, one expert
    (_ids(8, 128, 0), 128, 8),  # one token at the real width
    (torch.tensor([5, 0, 2, 5, 2, 0, 0, 5, 2]), 6, 3),  # experts 1, 3 and 4 without tokens
    (torch.full((2100,), 3), 7, 4),  # all on one expert, nine blocks, the last partial
    (_ids(256 * 2 + 37, 128, 1), 128, 1),  # three blocks, the last partial
    (torch.zeros(0, dtype=torch.int64), 5, 2),  # no tokens
], ids=["one-token", "one-token-128", "empty-experts", "one-expert", "three-blocks", "no-tokens"])
def test_expert_grouping_is_the_stable_sort(flat, experts, top_k):
    _assert_grouping_is_the_sort(flat, experts, top_k)


@pytest.mark.parametrize("block", [512, 2048])
def test_expert_grouping_is_the_stable_sort_whatever_the_block(block, monkeypatch):
    monkeypatch.setattr(triton_kernels, "grouping_block", lambda entries: block)
    _assert_grouping_is_the_sort(_ids(block + 300, 128, 2), 128, 8)


def test_grouping_block_is_a_power_of_two_from_256_to_2048():
    sizes = (1, 2048, 256 * 128 + 1, 262_144, 10 ** 7)
    assert [triton_kernels.grouping_block(n) for n in sizes] == [256, 256, 512, 2048, 2048]


@settings(max_examples=4, deadline=None)
@given(tokens=st.integers(1, 300), experts=st.integers(1, 140), top_k=st.integers(1, 8),
       block_m=st.sampled_from([1, 3, 128]), seed=st.integers(0, 99))
def test_expert_grouping_is_the_stable_sort_at_random_sizes(tokens, experts, top_k, block_m, seed):
    _assert_grouping_is_the_sort(_ids(tokens * top_k, experts, seed), experts, top_k, block_m)


def test_experts_grouping_path_computes_what_the_sorted_path_does(tiny_experts):
    from canvaslab.invariant import experts as invariant_experts

    config, module, gen = tiny_experts
    tokens, top_k = 21, config.top_k_experts
    x = torch.randn(tokens, config.hidden_size, generator=gen)
    index = torch.stack([torch.randperm(config.num_experts, generator=gen)[:top_k] for _ in range(tokens)])
    weights = torch.rand(tokens, top_k, generator=gen)
    with torch.no_grad():
        grouped = invariant_experts._experts_on_cuda(module, x, index, weights)  # the kernels, interpreted
        sorted_path = invariant_experts.invariant_experts_forward(module, x, index, weights)  # CPU: sort, F.linear
    assert ((grouped - sorted_path).norm() / sorted_path.norm()).item() < 1e-6  # fp32 products in another order


def _router_ops(scores, expert_scale, k):
    """transformers' router after its projection, with invariant mode's kernels in the ops' place."""
    from canvaslab.invariant import ops

    with ops.library_overrides("CPU"):
        probabilities = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32)
        weights, index = torch.topk(probabilities, k=k, dim=-1)
        weights /= weights.sum(dim=-1, keepdim=True)
        return probabilities, weights * expert_scale[index], index


def _scores(rows, experts, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(rows, experts, generator=gen) * 3
    scores[0, : experts // 2] = 1.0  # ties: the lowest index first
    scores[-1] = 0.5  # one row all equal
    return scores.to(dtype), (torch.rand(experts, generator=gen) + 0.5).to(dtype)


@pytest.mark.parametrize("rows,experts,k,dtype", [
    (1, 8, 2, torch.float32), (70, 128, 8, torch.bfloat16), (5, 100, 1, torch.float32), (65, 9, 9, torch.bfloat16)])
def test_route_picks_the_routers_experts_and_their_values(rows, experts, k, dtype):
    scores, expert_scale = _scores(rows, experts, dtype, seed=rows)
    got, expected = triton_kernels.route(scores, expert_scale, k), _router_ops(scores, expert_scale, k)
    for name, g, e in zip(("probabilities", "weights", "indices"), got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape, name
    assert torch.equal(got[2], expected[2])  # the same experts, ties by index
    # the values only closely: a compiled kernel rounds its softmax on its own (the H100 gave other last bits)
    torch.testing.assert_close(got[0], expected[0], rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(got[1], expected[1], rtol=1e-5, atol=1e-8)


def test_route_rows_equal_alone():
    scores, expert_scale = _scores(130, 128, torch.bfloat16, seed=2)
    batched = triton_kernels.route(scores.view(2, 65, 128), expert_scale, 8)
    for row in (0, 63, 64, 129):
        alone = triton_kernels.route(scores[row:row + 1], expert_scale, 8)
        for full, one in zip(batched, alone):
            assert torch.equal(full.reshape(130, -1)[row], one[0]), row


def test_route_refuses_sizes_outside_the_kernel():
    scores = torch.zeros(2, triton_kernels.TOPK_MAX_WIDTH + 1)
    with pytest.raises(ValueError, match="outside"):
        triton_kernels.route(scores, torch.ones(scores.shape[-1]), 2)
    with pytest.raises(ValueError, match="outside"):
        triton_kernels.route(torch.zeros(2, 4), torch.ones(4), 5)


def test_fused_routers_forward_equals_transformers_and_comes_off_on_exit(monkeypatch):
    from transformers.models.diffusion_gemma.modeling_diffusion_gemma import DiffusionGemmaTextRouter

    from canvaslab.invariant import ops
    from canvaslab.invariant import routing
    from canvaslab.invariant.routing import fused_routers
    from canvaslab.models.presets import TINY

    monkeypatch.setattr(routing, "FUSE_ROUTERS", True)

    router = DiffusionGemmaTextRouter(TINY.build_config().text_config)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in router.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=gen))
    router = router.to(torch.bfloat16)
    model = torch.nn.ModuleList([router])
    x = torch.randn(37, router.hidden_size, generator=gen).to(torch.bfloat16)
    with torch.no_grad(), ops.library_overrides("CPU"):
        stock = router(x)
        with fused_routers(model):
            assert "forward" in vars(router)
            fused = router(x)
    assert "forward" not in vars(router)
    for name, f, s in zip(("probabilities", "weights", "indices"), fused, stock):
        assert torch.equal(f, s), name



class _Launches(TorchDispatchMode):
    """Counts Triton launches (by kernel name) and the aten ops that compute outside them (allocations and views
    aside; the interpreter's own copies during a launch are not the code's)."""

    ALLOCATIONS_AND_VIEWS = ("empty", "zeros", "view", "reshape", "_unsafe_view", "alias", "as_strided", "detach")

    def __init__(self, monkeypatch):
        super().__init__()
        self.triton, self.aten, self.launching = [], [], False
        for name, kernel in vars(triton_kernels).items():
            if name.endswith("_kernel"):  # launched; the other jit functions are called from kernels
                monkeypatch.setattr(triton_kernels, name, self._counted(name, kernel))

    def _counted(self, name, kernel):
        counter = self

        class Counted:
            def __getitem__(self, grid):
                def launch(*args, **kwargs):
                    counter.triton.append(name)
                    counter.launching = True
                    try:
                        return kernel[grid](*args, **kwargs)
                    finally:
                        counter.launching = False
                return launch
        return Counted()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.launching and func.overloadpacket.__name__ not in self.ALLOCATIONS_AND_VIEWS:
            self.aten.append(str(func))
        return func(*args, **(kwargs or {}))


def test_grouping_is_two_launches_and_the_router_one(monkeypatch):
    counted = _Launches(monkeypatch)
    ids = _ids(300 * 8, 128, 3)
    scores, expert_scale = _scores(300, 128, torch.bfloat16, seed=4)
    with counted:
        triton_kernels.expert_grouping(ids, 128, 8)
    assert counted.triton == ["_expert_histogram_kernel", "_expert_slots_kernel"] and counted.aten == []
    counted.triton.clear()
    with counted:
        triton_kernels.route(scores, expert_scale, 8)
    assert counted.triton == ["_router_kernel"] and counted.aten == []
    with counted:  # what they replace: a dozen aten ops for the grouping (a radix sort among them), six for the router
        _sorted_path(ids, 128, 8, triton_kernels.GROUPED_BLOCK_M)
        _router_ops(scores, expert_scale, 8)
    assert "aten.sort.stable" in counted.aten and len(counted.aten) >= 17
