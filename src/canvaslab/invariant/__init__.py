"""Batch-invariant computation: one switch, one place.

A mode is an object (``canvaslab.invariant.modes``: ``mode_named(name)``, once, at the boundary) that owns every
behaviour switched on it; ``generation_mode(model, mode)`` is the entry point every generation path uses:

- ``stock``: transformers and PyTorch as they are (the batch-variant baseline).
- ``rowwise``: the seeds' diagnostic fix (router projection and self-conditioning matmul row by row).
- ``invariant``: every op whose result can depend on batch shape computed so that it cannot: matmuls
  and linear layers, softmax / log-softmax / logsumexp (entropy), sums and means (RMSNorm), top-k and
  sort (``canvaslab.invariant.ops``: one table of ops, from which come the torch.library overrides on CUDA,
  the dispatch mode on the CPU, the compiled backend's decompositions and the fingerprint's list);
  attention with no batch-dependent KV split and padding dropped (``AttentionInterface``); experts
  with a stable routing sort, a grouped kernel and a fixed-order combine (``ExpertsInterface``); on
  CUDA each RMSNorm as one fused launch (``canvaslab.invariant.norms``) and lm_head one cuBLAS call per
  canvas (``canvaslab.invariant.vocabulary``).
  Sampling is made per-row by the runner's per-row random streams (``--rng row``).

Every batch-invariant kernel is also a ``torch.library`` custom op (``canvaslab.invariant.custom_ops``), and
``canvaslab.invariant.compiled`` is the ``torch.compile`` backend that puts them in place of the
batch-sensitive aten ops and refuses a compiled graph that keeps a reduction of its own: invariant mode
runs transformers' compiled static-cache path with it (``canvaslab.generation.compiled_path``).

``batch_invariant()`` is the op-level switch alone, usable around any PyTorch code.
"""

from __future__ import annotations

from canvaslab.invariant.modes import MODES, Mode, mode_named
from canvaslab.invariant.ops import batch_invariant


def generation_mode(model, mode: str | Mode):
    """The model computes in ``mode`` (a name or a mode object) for the block."""
    return mode_named(mode).on(model)


def replaced_ops(mode: str | Mode) -> list[str]:
    """What a mode replaces, for the environment fingerprint."""
    return mode_named(mode).replaced_ops()


__all__ = ["MODES", "Mode", "batch_invariant", "generation_mode", "mode_named", "replaced_ops"]
