"""Invariant mode's denoising step with the vocabulary-sized work streamed (CUDA).

transformers' ``_denoising_step`` turns the lm_head output into a chain of float32 tensors of shape
(batch, canvas, vocabulary): the softcapped logits, the temperature-scaled ones, their softmax for the
draw, and the entropy's normalised logits, clamp, softmax and product, once for the sampler and once
for the stopping rule. At the real shapes each is 256 x 262,144 x 4 bytes = 256 MiB per row (16 GiB at
B=64); several are alive at once, and every one is a pass over memory. The self-conditioning input of
the next pass adds a float32 softmax and its bfloat16 copy.

``FusedStep`` replaces that step (an instance override of ``_denoising_step``, installed by the runner in
invariant mode) with:

- the decoder (``model.model``) and ``lm_head`` as transformers runs them; the lm_head output stays
  bfloat16;
- one Triton pass per (row, canvas position) over it (``triton_kernels.vocab_sample``): softcap,
  temperature, the entropy, the argmax and the row's draw (an exponential race from the row's own Philox
  stream, seeded from ``RowRandomness``), writing the temperature-scaled logits in bfloat16 over the
  lm_head output: they are the next pass's self-conditioning logits, exactly the dtype transformers hands on;
- the sampler's acceptance and renoising and the stopping rule from that entropy (``RowKeyedSampler``,
  the runner's stop recorder);
- the next pass's self-conditioning softmax written in bfloat16 directly (the float32 copy is skipped:
  the same bits as softmax then ``.to(bfloat16)``), then the invariant matmul.

At most two vocabulary-sized bfloat16 tensors per row are alive (the previous self-conditioning logits
and the new lm_head output), plus a third, the softmax, while the decoder starts. Every vocabulary
reduction runs in one program per position, in an order fixed by the vocabulary size, so a row's result
does not depend on its batch. The draw and the entropy are computed differently from transformers' (other
rounding, another random stream): invariant mode's outputs are its own, proven invariant across batch
sizes and positions by the same studies as before.

Observers still see every ``accept_canvas`` decision: ``logits`` is then the temperature-scaled logits
in bfloat16 (what the next pass receives) and ``entropy`` the kernel's.
"""

from __future__ import annotations

import contextlib
from typing import Sequence

import torch
from transformers.models.diffusion_gemma.generation_diffusion_gemma import LinearTemperatureScheduleLogitsProcessor


def _temperature(logits_processor, cur_step: int) -> float | None:
    """The step's temperature when the processors are the temperature schedule alone; None otherwise."""
    processors = list(logits_processor or [])
    if not processors:
        return 1.0
    if len(processors) != 1 or type(processors[0]) is not LinearTemperatureScheduleLogitsProcessor:
        return None
    schedule = processors[0]
    # The stock processor computes this in float32 (cur_step is a tensor there); so does this.
    step = torch.tensor(cur_step, dtype=torch.float32) / schedule.max_denoising_steps
    return float(torch.tensor(schedule.t_min, dtype=torch.float32) + (schedule.t_max - schedule.t_min) * step)


@contextlib.contextmanager
def streamed_self_conditioning(model):
    """The decoder's self-conditioning input computed as softmax -> bfloat16 -> invariant matmul with no
    float32 copy of the softmax. The decoder still receives ``self_conditioning_logits`` (hooks and the
    capture recorder see them); a pre-hook takes them out and hands the soft embeddings to the
    self-conditioning module in place of the zeros the decoder then passes it."""
    from canvaslab.invariant.triton_kernels import row_reduce

    decoder = model.model.decoder
    pending: list[torch.Tensor] = []

    def take_logits(module, args, kwargs):
        logits = kwargs.get("self_conditioning_logits")
        if logits is None or kwargs.get("self_conditioning_mask") is not None:
            return None
        weight = decoder.embed_tokens.weight
        if logits.is_cuda:  # bf16 of the float32 value: .to() rounds alike, so these are the decoder's bits
            probs = row_reduce(logits, "softmax", weight.dtype)
        else:
            probs = logits.softmax(dim=-1, dtype=torch.float32).to(weight.dtype)
        # torch.matmul as the decoder calls it: the invariant mode's matmul (a Triton kernel on CUDA)
        pending.append(torch.matmul(probs, weight) * decoder.embed_tokens.embed_scale.to(weight.dtype))
        return args, {**kwargs, "self_conditioning_logits": None}

    def give_signal(module, args):
        if pending:
            inputs_embeds, _zeros = args
            return inputs_embeds, pending.pop()
        return None

    handles = [decoder.register_forward_pre_hook(take_logits, with_kwargs=True),
               decoder.self_conditioning.register_forward_pre_hook(give_signal)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


class FusedStep:
    """A drop-in ``_denoising_step`` for the runner's per-row sampler and stop recorder (see the module)."""

    def __init__(self, model, randomness, observers: Sequence = (), fallback=None):
        self.model = model
        self.randomness = randomness
        self.observers = observers
        self.fallback = fallback  # transformers' own step, for configurations this one does not cover
        self.softcap = model.config.text_config.final_logit_softcapping

    def __call__(self, decoder_forward, current_canvas, argmax_canvas, input_ids, decoder_position_ids,
                 self_conditioning_logits, mask_mapping, cache, finished_denoising, cur_step, sampler,
                 logits_processor, diffusion_stopping_criteria, **model_kwargs):
        temperature = _temperature(logits_processor, cur_step)
        if temperature is None or not hasattr(sampler, "accept_by_entropy"):
            return self.fallback(decoder_forward=decoder_forward, current_canvas=current_canvas,
                                 argmax_canvas=argmax_canvas, input_ids=input_ids,
                                 decoder_position_ids=decoder_position_ids,
                                 self_conditioning_logits=self_conditioning_logits, mask_mapping=mask_mapping,
                                 cache=cache, finished_denoising=finished_denoising, cur_step=cur_step,
                                 sampler=sampler, logits_processor=logits_processor,
                                 diffusion_stopping_criteria=diffusion_stopping_criteria, **model_kwargs)
        from canvaslab.invariant.triton_kernels import vocab_sample

        hidden = self.model.model(decoder_input_ids=current_canvas, self_conditioning_logits=self_conditioning_logits,
                                  decoder_attention_mask=mask_mapping, cache=cache,
                                  decoder_position_ids=decoder_position_ids, **model_kwargs).last_hidden_state
        logits = self.model.lm_head(hidden)
        seeds = self.randomness.sample_seeds(logits.device)
        scaled, entropy, new_argmax, denoiser_canvas = vocab_sample(logits, seeds, temperature, self.softcap, out=logits)
        accepted = sampler.accept_by_entropy(current_canvas, denoiser_canvas, entropy)
        for observer in self.observers:
            observer.on_accept(logits=scaled, accepted_mask=sampler.accepted_token_mask, accepted_canvas=accepted,
                               cur_step=int(cur_step), entropy=entropy)
        new_canvas = sampler.renoise_canvas(accepted, cur_step)
        if diffusion_stopping_criteria is not None:
            if finished_denoising.any():  # finished rows keep what they had, as in transformers' step
                new_argmax = torch.where(finished_denoising[:, None], argmax_canvas, new_argmax)
                new_canvas = torch.where(finished_denoising[:, None], current_canvas, new_canvas)
                scaled[finished_denoising] = self_conditioning_logits[finished_denoising]
            finished_denoising |= diffusion_stopping_criteria.stop_from_entropy(new_argmax, entropy)
        return new_canvas, new_argmax, scaled, finished_denoising
