"""The dense products on cuBLAS (``canvaslab.invariant.cublas``) on a real GPU, bf16, the real layer shapes.

The per-process check sends every dense layer shape but the router's to cuBLAS on the H200 (session 12); for
each shape it sends, a canvas's rows are the same bits alone and among B canvases at any position (B up to 33:
past one call's ``MAX_ROWS``), and a short prompt's rows the same alone and among longer ones (padded calls).
Run: ``python -m pytest -q -m gpu tests/gpu``.
"""

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

LAYERS = [(2816, 4096), (2816, 2048), (4096, 2816), (2816, 2112), (2112, 2816), (2816, 8192), (8192, 2816),
          (2816, 1024)]


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to("cuda", torch.bfloat16)


def test_the_layer_shapes_go_to_cublas_and_long_k_does_not():
    from canvaslab.invariant import cublas

    chosen = {shape: cublas.verdict(*shape, torch.bfloat16, "nk", torch.device("cuda")) for shape in LAYERS}
    assert all(chosen.values()), chosen  # what session 12 measured on the H200; other GPUs may differ
    from canvaslab.invariant.triton_kernels import matmul

    a, weight = _rand(256, 262_144), _rand(2816, 262_144, seed=1)  # the self-conditioning product: K > MAX_K
    assert torch.equal(cublas.matmul(a, weight.t()), matmul(a, weight.t()))


@pytest.mark.parametrize("k,n", LAYERS)
def test_a_canvas_rows_are_the_same_alone_and_among_canvases(k, n):
    from canvaslab.invariant import cublas

    weight = _rand(n, k, seed=1) / k ** 0.5
    canvas = _rand(256, k, seed=2)
    alone = cublas.matmul(canvas, weight.t())
    for canvases, position in ((3, 1), (8, 7), (33, 20)):
        batch = _rand(256 * canvases, k, seed=canvases)
        batch[256 * position:256 * (position + 1)] = canvas
        assert torch.equal(cublas.matmul(batch, weight.t())[256 * position:256 * (position + 1)], alone), canvases
    prompt = canvas[:13]
    others = torch.cat([_rand(290, k, seed=3), prompt])  # a prompt's rows after longer ones: a padded last call
    assert torch.equal(cublas.matmul(others, weight.t())[-13:], cublas.matmul(prompt, weight.t()))
