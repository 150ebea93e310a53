"""The CUDA installation (torch.library overrides running the Triton kernels), exercised on the CPU.

``library_overrides("CPU")`` registers the very kernels the GPU gets, at the CPU dispatch key, and
Triton's interpreter runs them. Checked: every override handles every case of its op (any reduced dims,
keepdim, integer sums, empty inputs) close to the stock op; the reductions, sorts and top-k row-invariantly;
the stock kernels come back on exit; and a whole generation runs under the overrides and the fused RMSNorms.
Tolerances against stock: float32, rtol 1e-5 / atol 1e-5 (fp32 accumulation in another order).

Only what holds on any x86 CPU is checked bit for bit. The matrix products (mm, linear, addmm, bmm) run
``tl.dot``, which the interpreter computes with numpy's BLAS; BLAS promises no bitwise result, and on an
AMD EPYC OpenBLAS gives a row other bits at tile position 24 than at 0. Their row invariance, and a whole
generation matching B=1 byte for byte under the overrides, are checked on the compiled kernels in
``tests/gpu`` (``python -m pytest -q -m gpu tests/gpu``).
"""

import os

import pytest
import torch

pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="runs the Triton interpreter")

from canvaslab.invariant import ops, triton_kernels  # noqa: E402


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


CASES = {
    "mm": lambda x: x.reshape(-1, 12) @ _rand(12, 7, seed=1),
    "linear_bias": lambda x: torch.nn.functional.linear(x, _rand(9, 12, seed=1), _rand(9, seed=2)),
    "addmm_scaled": lambda x: torch.addmm(_rand(7, seed=1), x.reshape(-1, 12), _rand(12, 7, seed=2), beta=0.5, alpha=2.0),
    "bmm": lambda x: torch.bmm(x, _rand(5, 12, 5, seed=1)[-x.shape[0]:]),
    "softmax_last": lambda x: x.softmax(-1),
    "softmax_dim1": lambda x: x.softmax(1),
    "log_softmax_fp32": lambda x: torch.log_softmax(x, -1, dtype=torch.float32),
    "logsumexp": lambda x: x.logsumexp(-1),
    "logsumexp_two_dims_keepdim": lambda x: x.logsumexp((1, 2), keepdim=True),
    "sum_last": lambda x: x.sum(-1),
    "sum_dim1_keepdim": lambda x: x.sum(1, keepdim=True),
    "sum_all": lambda x: x.sum(),
    "mean_two_dims": lambda x: x.mean((0, 2)),
    "mean_last_keepdim": lambda x: x.mean(-1, keepdim=True),
    "int_sum": lambda x: (x > 0).sum(-1),
    "topk": lambda x: torch.topk(x, 3, dim=-1).indices,
    "sort": lambda x: torch.sort(x.round(), dim=-1).indices,
}
BATCH_REDUCING = {"sum_all", "mean_two_dims"}  # these reduce over the batch dim: no per-row claim
MATRIX_PRODUCTS = {"mm", "linear_bias", "addmm_scaled", "bmm"}  # tl.dot: numpy's BLAS in the interpreter


@pytest.mark.parametrize("case", sorted(CASES))
def test_override_matches_stock_and_is_row_invariant(case):
    x = _rand(5, 6, 12, seed=7)
    stock = CASES[case](x)
    with ops.library_overrides("CPU"):
        full, alone = CASES[case](x), CASES[case](x[-1:])
    assert full.shape == stock.shape and full.dtype == stock.dtype
    if case == "sort":
        assert torch.equal(full, torch.sort(x.round(), dim=-1, stable=True).indices)
    elif full.dtype.is_floating_point:
        torch.testing.assert_close(full, stock, rtol=1e-5, atol=1e-5)
    else:
        assert torch.equal(full, stock)
    # Matrix products: row invariance only on the compiled kernels (tests/gpu); here, BLAS decides the bits.
    if case not in BATCH_REDUCING | MATRIX_PRODUCTS and case not in ("softmax_dim1", "logsumexp_two_dims_keepdim"):
        per_row = full.reshape(x.shape[0], -1) if case in ("mm", "addmm_scaled") else full
        alone_row = alone.reshape(1, -1) if case in ("mm", "addmm_scaled") else alone
        assert torch.equal(per_row[-1], alone_row[0])


def test_empty_reductions_follow_torch():
    empty = torch.zeros(3, 0)
    with ops.library_overrides("CPU"):
        sums, means, lse = empty.sum(-1), empty.mean(-1), empty.logsumexp(-1)
    assert torch.equal(sums, torch.zeros(3)) and means.isnan().all() and (lse == float("-inf")).all()


def test_stock_kernels_come_back_on_exit(monkeypatch):
    a, b = _rand(4, 8), _rand(8, 3, seed=1)
    calls = []
    original = triton_kernels.matmul
    monkeypatch.setattr(triton_kernels, "matmul", lambda *args, **kw: calls.append(1) or original(*args, **kw))
    with ops.library_overrides("CPU"):
        a @ b
    assert calls == [1]
    after = a @ b
    assert calls == [1] and torch.equal(after, torch.mm(a, b))


def test_generation_runs_under_the_overrides(tiny, monkeypatch):
    from canvaslab.invariant.modes import Invariant
    from canvaslab.prompts import builtin_prompts
    from canvaslab.studies.batch_size import BatchStudySettings, run_batch_study

    monkeypatch.setattr(ops, "batch_invariant", lambda device=None: ops.library_overrides("CPU"))
    monkeypatch.setattr(Invariant, "swaps_cuda_modules", lambda self, model: True)  # fused RMSNorms, per-canvas lm_head
    settings = BatchStudySettings(batch_sizes=[1, 2, 3], fill="mixed", mode="invariant", repeat_control="same-process",
                                  generation={"max_denoising_steps": 1})
    calls = []
    original = triton_kernels.matmul
    monkeypatch.setattr(triton_kernels, "matmul", lambda *args, **kw: calls.append(1) or original(*args, **kw))
    result = run_batch_study(tiny, builtin_prompts(2), settings)
    # Byte-for-byte equality with B=1 needs the compiled kernels (tests/gpu): the interpreter's tl.dot is
    # numpy's BLAS, which promises no bits. Here: every pass is compared and the GEMMs really were routed.
    assert calls and result["summary"]["passes_total"] > 0
    assert all(run["structure_changed"] is None for run in result["runs"])
