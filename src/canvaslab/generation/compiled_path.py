"""Invariant mode on transformers' compiled static-cache path.

transformers' DiffusionGemma ``generate`` compiles when its generation config asks for a static cache
(``cache_implementation="static"``, compile not disabled): ``_compile_functions`` wraps the encoder, the
decoder forward, the sampler's ``accept_canvas``/``renoise_canvas`` and the stopping criterion in
``torch.compile`` (Inductor, CUDA graphs), cached on the model. In invariant mode the runner supplies that
method's results instead (an instance override, like ``_prepare_sampler``):

- the encoder and the decoder compiled with ``canvaslab.invariant.compiled.invariant_backend``
  (canvaslab's batch-invariant ops inside, every graph checked for reductions of the compiler's own);
  on CUDA the fused step's decoder pass (decoder, lm_head, the vocabulary pass) is compiled the same way
  and captured in the fused step's CUDA graphs;
- the sampler and the stopping criterion are not compiled: they draw from per-row random streams (seeded
  on the host) and are what observers such as the commit tracer see, so a trace on this path is taken
  exactly as on the eager one (on CUDA the fused step captures them, with the compiled pass, in its step's
  CUDA graph);
- each compiled call runs with invariant mode's eager switches set aside (the CPU's dispatch mode and
  the per-row sampling function mode): the compiled graph already holds the invariant ops. Any other
  function mode (the capture recorder) cannot see inside compiled code, so it is refused.

Compiled functions are cached on the model (``_canvaslab_compiled``), so later calls reuse them.
"""

from __future__ import annotations

import contextlib
import functools

import torch
from torch.utils._python_dispatch import _disable_current_modes

from canvaslab.errors import CanvaslabError
from canvaslab.generation.sampler import foreign_function_modes
from canvaslab.invariant import custom_ops
from canvaslab.models import anatomy

CACHE_ATTRIBUTE = "_canvaslab_compiled"
BACKEND = None  # None: canvaslab's Inductor backend; tests set ``compiled.traced_backend`` (no code generation)


@contextlib.contextmanager
def _function_modes_set_aside():
    foreign = foreign_function_modes()
    if foreign:
        raise CanvaslabError(f"the compiled generate path cannot run under {type(foreign[0]).__name__}: it cannot "
                             "see inside compiled code; use the dynamic cache (cache_implementation=None)")
    popped = [torch._C._pop_torch_function_stack() for _ in range(torch._C._len_torch_function_stack())]
    try:
        yield
    finally:
        for mode in reversed(popped):
            torch._C._push_on_torch_function_stack(mode)


def _set_aside_eager_switches(compiled):
    @functools.wraps(compiled)
    def call(*args, **kwargs):
        with _function_modes_set_aside(), _disable_current_modes():
            return compiled(*args, **kwargs)
    return call


def compiled(model, name: str, fn):
    """``fn`` compiled with canvaslab's backend, cached on ``model`` under ``name``."""
    from canvaslab.invariant.compiled import compile_invariant  # lazily: Inductor is imported only when used

    cache = vars(model).setdefault(CACHE_ATTRIBUTE, {})
    if name not in cache:
        cache[name] = _set_aside_eager_switches(compile_invariant(fn, BACKEND))
    return cache[name]


def invariant_compile_functions(model):
    """A replacement for transformers' ``_compile_functions`` (see the module)."""
    def compile_functions(sampler, diffusion_stopping_criteria):
        encoder = compiled(model, "encoder", anatomy.encoder(model))
        decoder = compiled(model, "decoder", model.forward)
        return encoder, decoder, sampler, diffusion_stopping_criteria
    return compile_functions


def decoder_pass(backbone, lm_head, softcap, canvas, self_conditioning, seeds, temperature, mask_mapping, cache,
                 decoder_position_ids, model_kwargs):
    """One denoising pass up to the sampler's decisions: the decoder, lm_head and the vocabulary pass
    (``vocab_sample``: eagerly it writes the scaled logits over the lm_head output; compiled it returns them in a
    new tensor). Returns (scaled, entropy, argmax, draw)."""
    from canvaslab.invariant.triton_kernels import vocab_sample

    hidden = backbone(decoder_input_ids=canvas, self_conditioning_logits=self_conditioning,
                      decoder_attention_mask=mask_mapping, cache=cache, decoder_position_ids=decoder_position_ids,
                      **model_kwargs).last_hidden_state
    logits = lm_head(hidden)
    if torch.compiler.is_compiling():  # compiled: a functional op (see custom_ops.vocab_sample)
        return custom_ops.vocab_sample(logits, seeds, temperature, softcap)
    return vocab_sample(logits, seeds, temperature, softcap, out=logits)
