"""The three modes, each one object that owns every behaviour switched on it.

A mode is named once, at the boundary (the CLI's ``--mode``, ``generate(mode=...)``, a study's settings):
``mode_named(name)`` gives its object, and the code below asks the object instead of comparing names:

- ``on(model)``: the model computes in this mode for the block (``canvaslab.invariant.generation_mode``);
- ``generating(model, attention_mask)``: what one generate call enters: ``on(model)`` and, in invariant mode,
  each left-padded row's own rotary positions (``canvaslab.invariant.padding``);
- ``replaced_ops()``: what the mode replaces, for the environment fingerprint;
- ``takes_compiled_path(model)``: whether generate runs transformers' compiled static-cache path with
  canvaslab's ops inside (``canvaslab.generation.compiled_path``; the sampler is not compiled there);
- ``streams_vocabulary(model)``: whether the denoising step is the fused one that streams the vocabulary
  (``canvaslab.generation.fused_step``);
- ``removes_padding_effect``, ``computes_rows_apart``: what the studies need to know of it.

Modes compare by identity (one instance each; unpickling gives the same one) and never equal their names.
"""

from __future__ import annotations

import contextlib

from canvaslab.errors import CanvaslabError
from canvaslab.invariant import attention, experts, ops, routing
from canvaslab.invariant.norms import fused_rms_norms
from canvaslab.invariant.padding import per_row_positions
from canvaslab.invariant.routing import fused_routers
from canvaslab.invariant.rowwise import rowwise
from canvaslab.invariant.vocabulary import per_canvas_lm_head
from canvaslab.models.loading import compiles_generate


class Mode:
    """How a generation computes its batch-sensitive ops (see the module). This base is stock's behaviour."""

    name = ""
    # A left-padded row computes what it computes alone (per-row positions, padded keys dropped): a study
    # then has no padding cause to give for a difference.
    removes_padding_effect = False
    # Some ops run one row per call: a capture cannot tell another row's calls from row 0's.
    computes_rows_apart = False
    # Every op is batch-invariant: a row of any batch equals the row alone, bit for bit, so a study may analyse
    # batched rows (and check them against the row alone).
    batch_invariant = False

    def __repr__(self) -> str:
        return f"Mode({self.name!r})"

    def __reduce__(self):
        return mode_named, (self.name,)

    @contextlib.contextmanager
    def on(self, model):
        """The model computes in this mode for the block."""
        yield

    @contextlib.contextmanager
    def generating(self, model, attention_mask):
        """Everything one generate call over the left-padded ``attention_mask`` enters: ``on(model)`` and what
        the mode does per generation."""
        with self.on(model):
            yield

    def replaced_ops(self) -> list[str]:
        """What the mode replaces, for the environment fingerprint."""
        return []

    def takes_compiled_path(self, model) -> bool:
        """Whether generate runs transformers' compiled static-cache path with canvaslab's ops inside."""
        return False

    def streams_vocabulary(self, model) -> bool:
        """Whether the denoising step is the fused one (with per-row randomness), which streams the
        vocabulary-sized work."""
        return False


class Stock(Mode):
    """transformers and PyTorch as they are (the batch-variant baseline)."""

    name = "stock"


class Rowwise(Mode):
    """The seeds' diagnostic fix: the router projection and the self-conditioning matmul row by row
    (``canvaslab.invariant.rowwise``)."""

    name = "rowwise"
    computes_rows_apart = True

    def on(self, model):
        return rowwise(model)

    def replaced_ops(self) -> list[str]:
        return ["decoder router.proj (per sequence)", "self-conditioning matmul (per row)"]


class Invariant(Mode):
    """Every op whose result can depend on batch shape computed so that it cannot (``canvaslab.invariant``)."""

    name = "invariant"
    removes_padding_effect = True
    batch_invariant = True

    @contextlib.contextmanager
    def on(self, model):
        attention.register()
        experts.register()
        with contextlib.ExitStack() as stack:
            stack.enter_context(attention.mask_caches())  # kept while the mode is on, no longer
            if self.swaps_cuda_modules(model):
                stack.enter_context(fused_rms_norms(model))
                stack.enter_context(fused_routers(model))
                stack.enter_context(per_canvas_lm_head(model))
            stack.enter_context(_implementations(model, attention.NAME))
            stack.enter_context(ops.batch_invariant(model.device.type))
            yield

    @contextlib.contextmanager
    def generating(self, model, attention_mask):
        # Compiled code must see the same hooks on every call, whatever the batch's padding: installed always.
        with self.on(model), per_row_positions(model, attention_mask, always=self.takes_compiled_path(model)):
            yield

    def replaced_ops(self) -> list[str]:
        return [*ops.REPLACED_OPS, f"attention: {attention.NAME}", f"experts: {experts.NAME}",
                "dense matmuls: cuBLAS in whole 256-row blocks for shapes a per-process check finds batch-invariant, "
                "Triton otherwise (CUDA)",
                "RMSNorm: one fused kernel, with the query/key rotary embedding (CUDA)",
                *(["router: softmax, top-k, renormalisation and scales in one kernel (CUDA)"] if routing.FUSE_ROUTERS
                  else []),
                "experts' grouping: two integer kernels in place of a stable sort (CUDA)",
                "lm_head: one cuBLAS call per canvas (CUDA)", "sampling: per-row streams",
                "denoising step: one streamed pass over the vocabulary, Philox draws (CUDA)"]

    def takes_compiled_path(self, model) -> bool:
        return compiles_generate(model)

    def swaps_cuda_modules(self, model) -> bool:
        """Whether the mode points modules at CUDA-only computations (the RMSNorms at fused Triton launches,
        lm_head at one cuBLAS call per canvas): on CUDA. The CPU path computes them with stock kernels at
        batch-independent shapes."""
        return model.device.type == "cuda"

    def streams_vocabulary(self, model) -> bool:
        """On CUDA, where the fused step's Triton kernels compile."""
        return model.device.type == "cuda"


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


STOCK, ROWWISE, INVARIANT = Stock(), Rowwise(), Invariant()
BY_NAME = {mode.name: mode for mode in (STOCK, ROWWISE, INVARIANT)}
MODES = tuple(BY_NAME)


def mode_named(mode: str | Mode) -> Mode:
    """The mode called ``mode`` (a mode object is returned as it is): the one conversion from a name."""
    if isinstance(mode, Mode):
        return mode
    found = BY_NAME.get(mode) if isinstance(mode, str) else None
    if found is None:
        raise CanvaslabError(f"--mode {mode!r} is not one of: {', '.join(MODES)}")
    return found


__all__ = ["INVARIANT", "MODES", "ROWWISE", "STOCK", "Invariant", "Mode", "Rowwise", "Stock", "mode_named"]
