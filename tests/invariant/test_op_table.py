"""The one table of invariant ops (``canvaslab.invariant.ops.TABLE``): the CUDA overrides, the CPU dispatch, the
compiled backend's decompositions and the fingerprint's list are all computed from it (adding an op is adding a
row), every row is exercised by the op scan, and each row's CPU path, CUDA kernel and
decomposition compute its op."""

import dataclasses
import os

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd
from torch.utils._python_dispatch import TorchDispatchMode

from canvaslab.invariant import compiled, custom_ops, ops, replaced_ops
from canvaslab.invariant.ops import TABLE

# The fingerprint's list as every recorded result holds it: the table must keep it as it is.
FINGERPRINT = ("aten.mm", "aten.addmm", "aten.bmm", "aten._softmax", "aten._log_softmax", "aten.logsumexp",
               "aten.sum.dim_IntList", "aten.mean.dim", "aten.topk", "aten.sort")


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


W, BIAS, W3 = _rand(12, 7, seed=1), _rand(7, seed=2), _rand(5, 12, 7, seed=3)

# One call of each row's op on ``x`` of shape (B, 6, 12), its output's dim 0 the batch. A new row needs one here.
EXAMPLES = {
    "mm": lambda x: (x.reshape(-1, 12) @ W).view(x.shape[0], -1),
    "addmm": lambda x: torch.addmm(BIAS, x.reshape(-1, 12), W).view(x.shape[0], -1),
    "bmm": lambda x: torch.bmm(x, W3[-x.shape[0]:]),
    "_softmax": lambda x: x.softmax(-1),
    "_log_softmax": lambda x: torch.log_softmax(x, -1),
    "logsumexp": lambda x: x.logsumexp(-1),
    "sum.dim_IntList": lambda x: x.sum(-1),
    "mean.dim": lambda x: x.mean(-1),
    "topk": lambda x: torch.topk(x, 3, dim=-1).indices,
    "sort": lambda x: torch.sort(x, dim=-1).indices,
}
ROWS = {op.aten: op for op in TABLE}


def test_everything_the_mode_installs_is_computed_from_the_table(monkeypatch):
    assert len(ROWS) == len(TABLE) and set(EXAMPLES) == set(ROWS)
    # the CPU dispatch
    assert ops.BatchInvariantMode._HANDLERS == {op.overload: op.cpu for op in TABLE}
    # the CUDA overrides: one registration per row
    registered = []
    monkeypatch.setattr(torch.library.Library, "impl", lambda self, name, fn, key: registered.append((name, fn, key)))
    with ops.library_overrides("CUDA"):
        pass
    assert registered == [(op.aten, op.cuda, "CUDA") for op in TABLE]
    # the compiled backend's decompositions: each row's op and its variants, and they win over Inductor's
    expected = {overload: fn for op in TABLE for overload, fn in op.decompositions().items()}
    assert compiled.DECOMPOSITIONS == ops.DECOMPOSITIONS == expected
    assert {op.overload for op in TABLE} <= set(expected)
    table = compiled.decompositions()
    assert all(table[overload] is fn for overload, fn in expected.items())
    # the fingerprint's list, unchanged
    assert ops.REPLACED_OPS == tuple(op.fingerprint for op in TABLE) == FINGERPRINT
    assert replaced_ops("invariant")[:len(TABLE)] == list(FINGERPRINT)
    # every row lowers to one of canvaslab's custom ops
    assert all(op.custom_op in custom_ops.OPS.values() for op in TABLE)


def test_names_say_what_each_function_is():
    for op in TABLE:
        base = op.aten.split(".")[0].lstrip("_")
        assert (op.cuda.__name__, op.cpu.__name__, op.decomposition.__name__) == (
            f"{base}_batch_invariant", f"{base}_batch_invariant_cpu", f"{base}_decomposition")


class _Seen(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(func)
        return func(*args, **(kwargs or {}))


def test_every_row_is_exercised_by_the_op_scan(tiny):
    """Every row has an op-scan case, and running the case dispatches the row's aten overload: the scan checks
    each replaced op at the model's shapes, including those a generation reaches only through other PyTorch code
    (they are replaced for any code under ``batch_invariant()``)."""
    from canvaslab.invariant.op_scan import op_cases
    from canvaslab.studies.op_scan import OPS

    cases = {case.name: case for case in op_cases(tiny.model)}
    assert tuple(cases) == OPS
    with torch.no_grad():
        for op in TABLE:
            assert op.scan in OPS, op
            case = cases[op.scan]
            inputs = case.make_input(2, torch.Generator().manual_seed(0))
            with _Seen() as seen:
                case.run(inputs, 2)
            assert op.overload in seen.ops, (op.aten, op.scan)


def _counted(fn, calls):
    def counted(*args, **kwargs):
        calls.append(1)
        return fn(*args, **kwargs)
    return counted


def _same_as_stock(got, stock):
    assert got.shape == stock.shape and got.dtype == stock.dtype
    if got.dtype.is_floating_point:
        torch.testing.assert_close(got, stock, rtol=1e-5, atol=1e-5)
    else:
        assert torch.equal(got, stock)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_each_rows_cpu_path_computes_its_op_row_invariantly(name, monkeypatch):
    op, x = ROWS[name], _rand(5, 6, 12, seed=7)
    stock = EXAMPLES[name](x)
    calls = []
    monkeypatch.setitem(ops.BatchInvariantMode._HANDLERS, op.overload, _counted(op.cpu, calls))
    with ops.BatchInvariantMode():
        full, alone = EXAMPLES[name](x), EXAMPLES[name](x[-1:])
    assert calls
    _same_as_stock(full, stock)
    assert torch.equal(full[-1], alone[0])


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_each_rows_decomposition_lowers_it_to_its_custom_op(name):
    op = ROWS[name]
    graphs = []

    def keep(graph_module, example_inputs):
        graphs.append(graph_module.graph)
        return graph_module.forward

    torch._dynamo.reset()
    x = _rand(5, 6, 12, seed=7)
    got = torch.compile(EXAMPLES[name], backend=aot_autograd(fw_compiler=keep, decompositions=compiled.decompositions()),
                        fullgraph=True)(x)
    _same_as_stock(got, EXAMPLES[name](x))
    custom = {value: key for key, value in custom_ops.OPS.items()}[op.custom_op]
    targets = {str(node.target) for node in graphs[0].nodes}
    assert f"{custom_ops.NAMESPACE}.{custom}.default" in targets
    assert compiled.batch_variant_nodes(graphs[0]) == []


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="runs the Triton interpreter")
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_each_rows_cuda_kernel_computes_its_op(name, monkeypatch):
    """The CUDA kernel, registered at the CPU key and run by Triton's interpreter (bits: ``tests/gpu``)."""
    pytest.importorskip("triton")
    op, x = ROWS[name], _rand(5, 6, 12, seed=7)
    calls = []
    counted = dataclasses.replace(op, cuda=_counted(op.cuda, calls))
    monkeypatch.setattr(ops, "TABLE", tuple(counted if row is op else row for row in TABLE))
    stock = EXAMPLES[name](x)
    with ops.library_overrides("CPU"):
        got = EXAMPLES[name](x)
    assert calls
    _same_as_stock(got, stock)
