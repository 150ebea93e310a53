"""The dense products' cuBLAS path (``canvaslab.invariant.cublas``): the calls a product is cut into, on the
CPU (the bits of cuBLAS itself are checked on the GPU: tests/gpu/test_cublas_gpu.py)."""

import pytest
import torch

from canvaslab.invariant import cublas


@pytest.mark.parametrize("m", [1, 13, 255, 256, 257, 1000, 8192, 8193, 20000, 3 * 8192])
def test_every_call_is_whole_blocks_within_the_checked_sizes_and_the_product_is_right(m):
    calls = []

    def mm(a, b, out):
        calls.append((a.shape[0], a.data_ptr()))
        return torch.mm(a, b, out=out)

    generator = torch.Generator().manual_seed(m)
    a, b = torch.randn(m, 24, generator=generator), torch.randn(24, 8, generator=generator)
    out = cublas.blocks_product(a, b, mm)
    assert all(rows % cublas.ROWS == 0 and rows <= cublas.MAX_ROWS for rows, _ in calls)
    assert sum(rows for rows, _ in calls) == -(-m // cublas.ROWS) * cublas.ROWS  # each row once, padding aside
    torch.testing.assert_close(out, a @ b)
    starts = [start for start, _ in cublas.call_sizes(m)]
    assert starts == sorted(starts) and starts[0] == 0


def test_a_row_meets_the_same_call_sizes_alone_and_in_a_batch_of_canvases():
    """A canvas (256 rows) alone is one 256-row call; among B canvases each call holds whole canvases."""
    assert cublas.call_sizes(256) == [(0, 256)]
    for canvases in (2, 31, 32, 33, 64, 128):
        sizes = cublas.call_sizes(256 * canvases)
        assert all(rows % 256 == 0 and start % 256 == 0 for start, rows in sizes)


def test_weights_are_recognised_in_both_layouts_and_strided_ones_are_not():
    assert cublas._layout(torch.zeros(4, 6)) == "kn" and cublas._layout(torch.zeros(6, 4).t()) == "nk"
    assert cublas._layout(torch.zeros(4, 12)[:, ::2]) is None
