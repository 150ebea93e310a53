"""Batch-invariant computation: one switch, one place.

``generation_mode(model, mode)`` is the single entry point every generation path uses:

- ``stock``: transformers and PyTorch as they are (the batch-variant baseline).
- ``rowwise``: the seeds' diagnostic fix (router projection and self-conditioning matmul row by row).
- ``invariant``: every op whose result can depend on batch shape computed so that it cannot: matmuls
  and linear layers, softmax / log-softmax / logsumexp (entropy), sums and means (RMSNorm), top-k and
  sort (``canvaslab.invariant.ops``: torch.library overrides on CUDA, a dispatch mode on the CPU);
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

import contextlib

from canvaslab.errors import CanvaslabError
from canvaslab.invariant import attention, experts
from canvaslab.invariant.norms import fused_rms_norms
from canvaslab.invariant.ops import REPLACED_OPS, BatchInvariantMode, library_overrides
from canvaslab.invariant.rowwise import rowwise
from canvaslab.invariant.vocabulary import per_canvas_lm_head

MODES = ("stock", "rowwise", "invariant")


def replaced_ops(mode: str) -> list[str]:
    """What a mode replaces, for the environment fingerprint."""
    if mode == "rowwise":
        return ["decoder router.proj (per sequence)", "self-conditioning matmul (per row)"]
    if mode == "invariant":
        return [*REPLACED_OPS, f"attention: {attention.NAME}", f"experts: {experts.NAME}",
                "dense matmuls: cuBLAS in whole 256-row blocks for shapes a per-process check finds batch-invariant, "
                "Triton otherwise (CUDA)",
                "RMSNorm: one fused kernel, with the query/key rotary embedding (CUDA)",
                "lm_head: one cuBLAS call per canvas (CUDA)", "sampling: per-row streams",
                "denoising step: one streamed pass over the vocabulary, Philox draws (CUDA)"]
    return []


@contextlib.contextmanager
def batch_invariant(device: str | None = None):
    """Batch-invariant aten ops for the duration of the block (matmuls, softmax family, reductions, top-k).

    ``device="cuda"`` installs only the CUDA overrides (the fast path for a GPU model: ops that are not
    replaced never enter Python); ``"cpu"`` only the CPU dispatch mode; ``None`` both.
    """
    with contextlib.ExitStack() as stack:
        if device in (None, "cuda"):
            stack.enter_context(library_overrides("CUDA"))
        if device in (None, "cpu"):
            stack.enter_context(BatchInvariantMode())
        yield


@contextlib.contextmanager
def _implementations(model, name: str):
    """Point the model's attention and experts at ``name`` for the block; restore on exit."""
    configs = [model.config, model.config.text_config]
    saved = [(c, c._attn_implementation, getattr(c, "_experts_implementation", None)) for c in configs]
    for config in configs:
        config._attn_implementation = name
    model.config.text_config._experts_implementation = name
    try:
        yield
    finally:
        for config, attn, experts_impl in saved:
            config._attn_implementation = attn
            if experts_impl is not None:
                config._experts_implementation = experts_impl


@contextlib.contextmanager
def generation_mode(model, mode: str):
    if mode not in MODES:
        raise CanvaslabError(f"--mode {mode!r} is not one of: {', '.join(MODES)}")
    if mode == "stock":
        yield
    elif mode == "rowwise":
        with rowwise(model):
            yield
    else:
        attention.register()
        experts.register()
        cuda_modules = contextlib.ExitStack()
        if swaps_cuda_modules(model):
            cuda_modules.enter_context(fused_rms_norms(model))
            cuda_modules.enter_context(per_canvas_lm_head(model))
        with _implementations(model, attention.NAME), batch_invariant(model.device.type), cuda_modules:
            yield


def swaps_cuda_modules(model) -> bool:
    """Whether invariant mode points modules at CUDA-only computations (the RMSNorms at fused Triton launches,
    lm_head at one cuBLAS call per canvas): on CUDA. The CPU path computes them with stock kernels at
    batch-independent shapes."""
    return model.device.type == "cuda"


def streams_vocabulary(model) -> bool:
    """Whether invariant mode (with per-row randomness) runs the fused denoising step, which streams the
    vocabulary-sized work (``canvaslab.generation.fused_step``): on CUDA, where its Triton kernels compile."""
    return model.device.type == "cuda"


__all__ = ["MODES", "batch_invariant", "generation_mode", "replaced_ops", "streams_vocabulary"]
