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
and the new lm_head output), plus the softmax of ``SIGNAL_CANVASES`` canvases while the decoder starts. Every vocabulary
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

from canvaslab.generation import compiled_path
from canvaslab.generation.sampler import RowKeyedMultinomial
from canvaslab.models import anatomy


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


# Canvases whose self-conditioning softmax is alive at once: 8 x 128 MiB at the real shapes instead of the
# batch's (16 GiB at B=128). Each canvas's rows get the same bits in any group: both kernels are batch-invariant.
SIGNAL_CANVASES = 8


def _soft_embeddings(logits: torch.Tensor, embedding) -> torch.Tensor:
    from canvaslab.invariant.triton_kernels import row_reduce

    weight = embedding.weight
    if logits.is_cuda:  # bf16 of the float32 value: .to() rounds alike, so these are the decoder's bits
        probs = row_reduce(logits, "softmax", weight.dtype)
    else:
        probs = logits.softmax(dim=-1, dtype=torch.float32).to(weight.dtype)
    # torch.matmul as the decoder calls it: the invariant mode's matmul (a Triton kernel on CUDA)
    return torch.matmul(probs, weight) * embedding.embed_scale.to(weight.dtype)


@contextlib.contextmanager
def streamed_self_conditioning(model):
    """The decoder's self-conditioning input computed as softmax -> bfloat16 -> invariant matmul with no
    float32 copy of the softmax. The decoder still receives ``self_conditioning_logits`` (hooks and the
    capture recorder see them); a pre-hook takes them out and hands the soft embeddings to the
    self-conditioning module in place of the zeros the decoder then passes it. The softmax is taken
    ``SIGNAL_CANVASES`` canvases at a time."""
    decoder = anatomy.decoder(model)
    embedding = decoder.get_submodule(anatomy.EMBEDDING)
    pending: list[torch.Tensor] = []

    def take_logits(module, args, kwargs):
        logits = kwargs.get("self_conditioning_logits")
        if logits is None or kwargs.get("self_conditioning_mask") is not None:
            return None
        pending.append(torch.cat([_soft_embeddings(part, embedding) for part in logits.split(SIGNAL_CANVASES)]))
        return args, {**kwargs, "self_conditioning_logits": None}

    def give_signal(module, args):
        if pending:
            inputs_embeds, _zeros = args
            return inputs_embeds, pending.pop()
        return None

    handles = [decoder.register_forward_pre_hook(take_logits, with_kwargs=True),
               decoder.get_submodule(anatomy.SELF_CONDITIONING).register_forward_pre_hook(give_signal)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


class CapturedPass:
    """One decoder pass (decoder, lm_head, the vocabulary pass) captured as a CUDA graph and replayed.

    The host's launch work for a pass (thousands of kernels at the real shapes: at B=1 it, not the GPU,
    sets the pace) is done once at capture; a replay launches the recorded kernels with the same
    arguments, so it computes bit for bit what the captured eager pass computes. Inputs are copied into
    the captured tensors before each replay; outputs live in the graph's memory and are overwritten by the
    next replay (small ones are cloned; the self-conditioning logits are consumed by the next replay's
    first kernels, after being copied into its input)."""

    def __init__(self, run, canvas, self_conditioning, seeds, temperature):
        self.inputs = (canvas.clone(), self_conditioning, seeds.clone(), temperature.clone())
        self.outputs = self._capture(run)

    def _capture(self, run):
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            return run(*self.inputs)

    def _replay(self) -> None:
        self.graph.replay()

    def __call__(self, canvas, self_conditioning, seeds, temperature):
        for static, value in zip(self.inputs, (canvas, self_conditioning, seeds, temperature)):
            if static is not value:
                static.copy_(value)
        self._replay()
        scaled, *small = self.outputs
        return scaled, *(t.clone() for t in small)


def _no_function_modes() -> bool:
    """No ``TorchFunctionMode`` is active (the capture recorder is one): a replayed graph runs no Python, so it
    would record nothing."""
    return not torch.overrides._get_current_function_mode_stack()


class FusedStep:
    """A drop-in ``_denoising_step`` for the runner's per-row sampler and stop recorder (see the module).

    With ``cuda_graphs`` (default), on CUDA and with no recorder attached, each canvas's passes after the
    second are replayed from a CUDA graph captured at the third (the first two run eagerly: the first has
    no self-conditioning input, the second compiles what the rest need). A capture that fails (an op
    that waits for the host) leaves that canvas eager; ``graph_failures`` keeps the reasons."""

    cuda_graphs = True
    captured_pass = CapturedPass

    def __init__(self, model, randomness, observers: Sequence = (), fallback=None, compiled: bool = False):
        self.model = model
        # On the compiled path the pass is compiled with canvaslab's backend (``compiled_path``); the
        # self-conditioning softmax is then the decoder's own, mapped onto canvaslab's ops.
        self._decoder_pass = compiled_path.compiled(model, "pass", compiled_path.decoder_pass) if compiled \
            else compiled_path.decoder_pass
        self.randomness = randomness
        self.observers = observers
        self.fallback = fallback  # transformers' own step, for configurations this one does not cover
        self.softcap = model.config.text_config.final_logit_softcapping
        self.backbone, self.lm_head = model.get_submodule(anatomy.BACKBONE), anatomy.lm_head(model)
        self.graph_failures: list[str] = []
        self.replays = 0
        self._canvas_key = None  # (cache, mask mapping) of the canvas being denoised, and its passes so far
        self._captured: CapturedPass | None = None

    def __call__(self, decoder_forward, current_canvas, argmax_canvas, input_ids, decoder_position_ids,
                 self_conditioning_logits, mask_mapping, cache, finished_denoising, cur_step, sampler,
                 logits_processor, diffusion_stopping_criteria, **model_kwargs):
        temperature = _temperature(logits_processor, cur_step)
        if temperature is None or not hasattr(sampler, "accept_by_entropy"):
            with RowKeyedMultinomial(self.randomness):  # transformers' step draws with torch.multinomial
                return self.fallback(decoder_forward=decoder_forward, current_canvas=current_canvas,
                                     argmax_canvas=argmax_canvas, input_ids=input_ids,
                                     decoder_position_ids=decoder_position_ids,
                                     self_conditioning_logits=self_conditioning_logits, mask_mapping=mask_mapping,
                                     cache=cache, finished_denoising=finished_denoising, cur_step=cur_step,
                                     sampler=sampler, logits_processor=logits_processor,
                                     diffusion_stopping_criteria=diffusion_stopping_criteria, **model_kwargs)
        seeds = self.randomness.sample_seeds(current_canvas.device)
        temperature = torch.tensor([temperature], dtype=torch.float32).to(current_canvas.device)

        def run(canvas, self_conditioning, seeds, temperature):
            return self._pass(canvas, self_conditioning, seeds, temperature, mask_mapping=mask_mapping, cache=cache,
                              decoder_position_ids=decoder_position_ids, **model_kwargs)

        scaled, entropy, new_argmax, denoiser_canvas = self._run_pass(
            run, (cache, mask_mapping), current_canvas, self_conditioning_logits, seeds, temperature)
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

    def _pass(self, canvas, self_conditioning, seeds, temperature, *, mask_mapping, cache, decoder_position_ids,
              **model_kwargs):
        return self._decoder_pass(self.backbone, self.lm_head, self.softcap, canvas, self_conditioning, seeds,
                                  temperature, mask_mapping, cache, decoder_position_ids, model_kwargs)

    @staticmethod
    def _graphable(canvas, self_conditioning) -> bool:
        return canvas.is_cuda and self_conditioning is not None and _no_function_modes()

    def _run_pass(self, run, canvas_key, canvas, self_conditioning, seeds, temperature):
        """The pass eagerly, or replayed from this canvas's captured graph (see the class)."""
        same_canvas = self._canvas_key is not None and all(a is b for a, b in zip(self._canvas_key[0], canvas_key))
        passes = self._canvas_key[1] + 1 if same_canvas else 1
        if not same_canvas:
            self._captured = None
        self._canvas_key = (canvas_key, passes)
        graphs = self.cuda_graphs and self._graphable(canvas, self_conditioning)
        if graphs and self._captured is None and passes >= 3 and len(self.graph_failures) < 3:
            try:
                self._captured = self.captured_pass(run, canvas, self_conditioning, seeds, temperature)
            except RuntimeError as error:  # an op that cannot be captured: this canvas stays eager
                self.graph_failures.append(str(error).splitlines()[0])
                self._canvas_key = (canvas_key, -10 ** 9)  # no second try on this canvas
        if graphs and self._captured is not None:
            self.replays += 1
            return self._captured(canvas, self_conditioning, seeds, temperature)
        return run(canvas, self_conditioning, seeds, temperature)
