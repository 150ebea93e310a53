"""canvaslab's batch-invariant kernels as custom ops (``canvaslab.invariant.custom_ops``): registered under
``canvaslab::``, their fake implementations agree with the real ones (``torch.library.opcheck``), and their
CPU implementations compute what eager invariant mode computes on the CPU."""

import os

import pytest
import torch
from torch.nn import functional as F

from canvaslab.invariant import batch_invariant, custom_ops

CHECKS = ("test_schema", "test_faketensor")
interpreted = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available(),
                                 reason="Triton needs a GPU or TRITON_INTERPRET=1")


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_every_kernel_is_an_op_of_the_canvaslab_namespace():
    for name in custom_ops.NAMES:
        namespace, op = name.split("::")
        assert getattr(getattr(torch.ops, namespace), op).default is not None
    assert set(custom_ops.OPS) == {"matmul", "row_reduce", "sort", "rms_norm", "rms_norm_rope", "canvas_linear", "grouped_linear",
                                   "vocab_sample", "attention"}


@pytest.mark.parametrize("args", [
    (_randn(5, 12), _randn(12, 7, seed=1), None),
    (_randn(5, 12), _randn(12, 7, seed=1), _randn(7, seed=2)),
    (_randn(3, 5, 12), _randn(3, 12, 7, seed=1), None),
])
def test_matmul_op(args):
    torch.library.opcheck(custom_ops.matmul, args, test_utils=CHECKS)


@pytest.mark.parametrize("kind", ["softmax", "log_softmax", "logsumexp", "sum", "mean"])
def test_row_reduce_op(kind):
    torch.library.opcheck(custom_ops.row_reduce, (_randn(3, 4, 33), kind, torch.float32), test_utils=CHECKS)


def test_sort_grouped_linear_and_attention_ops():
    torch.library.opcheck(custom_ops.sort, (torch.tensor([3.0, 1.0, 3.0, 2.0]), -1, True), test_utils=CHECKS)
    counts = torch.tensor([2, 0, 3])
    torch.library.opcheck(custom_ops.grouped_linear, (_randn(5, 8), _randn(3, 6, 8, seed=1), counts, False),
                          test_utils=CHECKS)
    q, k, v = _randn(2, 2, 3, 8), _randn(2, 2, 5, 8, seed=1), _randn(2, 2, 5, 8, seed=2)
    mask = torch.ones(2, 1, 3, 5, dtype=torch.bool)
    mask[1, ..., :2] = False  # row 1 left-padded by two keys
    torch.library.opcheck(custom_ops.attention, (q, k, v, mask, None), test_utils=CHECKS)
    torch.library.opcheck(custom_ops.attention, (q, k, v, None, 0.5), test_utils=CHECKS)


@interpreted
def test_triton_only_ops_run_on_the_cpu_through_the_interpreter():
    torch.library.opcheck(custom_ops.rms_norm, (_randn(4, 16), _randn(16, seed=1), 1e-6), test_utils=CHECKS)
    angles = _randn(2, 3, 16, seed=2)
    torch.library.opcheck(custom_ops.rms_norm_rope, (_randn(2, 3, 4, 16), _randn(16, seed=1), 1e-6, angles.cos(),
                                                     angles.sin()), test_utils=CHECKS)
    logits, seeds = _randn(2, 3, 50), torch.tensor([5, 9])
    torch.library.opcheck(custom_ops.vocab_sample, (logits, seeds, torch.tensor([0.7]), 30.0), test_utils=CHECKS)


def test_cpu_ops_compute_what_eager_invariant_mode_computes():
    a, b, bias = _randn(9, 40), _randn(40, 11, seed=1), _randn(11, seed=2)
    x = _randn(6, 70, seed=3)
    with batch_invariant("cpu"):
        eager = (a @ b, F.linear(a, b.t(), bias), torch.softmax(x, -1), x.sum(-1), x.mean(-1))
    ops = (custom_ops.matmul(a, b), custom_ops.matmul(a, b, bias), custom_ops.row_reduce(x, "softmax", x.dtype),
           custom_ops.row_reduce(x, "sum", x.dtype), custom_ops.row_reduce(x, "mean", x.dtype))
    for expected, got in zip(eager, ops):
        assert torch.equal(expected, got)


def test_grouped_linear_cpu_equals_the_eager_per_expert_path():
    x, weight, counts = _randn(7, 8), _randn(3, 6, 8, seed=1), torch.tensor([3, 0, 4])
    with batch_invariant("cpu"):
        eager = torch.cat([F.linear(x[:3], weight[0]), F.linear(x[3:], weight[2])])
    assert torch.equal(custom_ops.grouped_linear(x, weight, counts, False), eager)
    # another memory layout of the matrices: BLAS promises no identical rounding there
    torch.testing.assert_close(custom_ops.grouped_linear(x, weight.transpose(1, 2).contiguous(), counts, True), eager)


def test_call_runs_the_op_only_while_dynamo_traces():
    seen = []

    def plain(x):
        seen.append("plain")
        return x

    custom_ops.call("sort", plain, torch.ones(2))
    assert seen == ["plain"]
    graph_ops = []

    def backend(gm, inputs):
        graph_ops.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    torch.compile(lambda x: custom_ops.call("sort", plain, x, -1, False)[0], backend=backend, fullgraph=True)(
        torch.tensor([2.0, 1.0]))
    assert any("canvaslab.sort" in op for op in graph_ops) and seen == ["plain"]


def test_canvas_linear_is_linear_canvas_by_canvas_and_the_model_head_uses_it_with_hooks_firing():
    from torch import nn

    from canvaslab.invariant.vocabulary import per_canvas_lm_head

    x, weight = _randn(3, 4, 12), _randn(7, 12, seed=1)
    torch.library.opcheck(custom_ops.canvas_linear, (x, weight), test_utils=CHECKS)
    out = custom_ops.canvas_linear(x, weight)
    for canvas in range(3):
        assert torch.equal(out[canvas], torch.mm(x[canvas], weight.t()))
    model = nn.Module()
    model.lm_head = nn.Linear(12, 7, bias=False)
    seen = []
    model.lm_head.register_forward_hook(lambda module, args, output: seen.append(output))
    with per_canvas_lm_head(model), torch.no_grad():  # generation's setting: out= GEMMs take no gradient
        assert "forward" in vars(model.lm_head)
        inside = model.lm_head(x)
    assert "forward" not in vars(model.lm_head) and len(seen) == 1 and seen[0] is inside
    with torch.no_grad():
        assert torch.equal(inside, custom_ops.canvas_linear(x, model.lm_head.weight))
        torch.testing.assert_close(inside, model.lm_head(x), rtol=1e-5, atol=1e-5)
