"""Batch-invariant computation: one switch, one place.

``generation_mode(model, mode)`` is the single entry point every generation path uses:

- ``stock``: transformers and PyTorch as they are (the batch-variant baseline).
- ``rowwise``: the seeds' diagnostic fix (router projection and self-conditioning matmul row by row).
- ``invariant``: every op whose result can depend on batch shape computed so that it cannot.
"""

from __future__ import annotations

import contextlib

from canvaslab.errors import CanvaslabError

MODES = ("stock", "rowwise", "invariant")


@contextlib.contextmanager
def generation_mode(model, mode: str):
    if mode not in MODES:
        raise CanvaslabError(f"--mode {mode!r} is not one of: {', '.join(MODES)}")
    if mode != "stock":
        raise CanvaslabError(f"--mode {mode} is not implemented yet")
    yield
