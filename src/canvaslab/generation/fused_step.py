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
- the sampler's acceptance (``RowKeyedSampler``), the renoising (the row's own Philox stream:
  ``triton_kernels.uniform_tokens``, seeded from ``RowRandomness`` like the draw) and the stopping rule from
  that entropy (the runner's stop recorder), with nothing read back to the host: the whole step can be
  replayed from one CUDA graph (``CapturedStep``);
- the next pass's self-conditioning softmax written in bfloat16 directly (the float32 copy is skipped:
  the same bits as softmax then ``.to(bfloat16)``), then the invariant matmul.

At most two vocabulary-sized bfloat16 tensors per row are alive (the previous self-conditioning logits
and the new lm_head output), plus the softmax of ``SIGNAL_CANVASES`` canvases while the decoder starts. Every vocabulary
reduction runs in one program per position, in an order fixed by the vocabulary size, so a row's result
does not depend on its batch. The draw and the entropy are computed differently from transformers' (other
rounding, another random stream; the renoising has its own stream too): invariant mode's outputs are its own,
proven invariant across batch sizes and positions by the same studies as before.

Observers still see every ``accept_canvas`` decision: ``logits`` is then the temperature-scaled logits
in bfloat16 (what the next pass receives) and ``entropy`` the kernel's.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Sequence

import torch
from transformers.models.diffusion_gemma.generation_diffusion_gemma import LinearTemperatureScheduleLogitsProcessor

from canvaslab.generation import compiled_path
from canvaslab.generation.sampler import RowKeyedMultinomial
from canvaslab.models import anatomy


def _temperatures(logits_processor, steps) -> list[float] | None:
    """The temperature at each of ``steps`` when the processors are the temperature schedule alone; None
    otherwise."""
    processors = list(logits_processor or [])
    if not processors:
        return [1.0 for _ in steps]
    if len(processors) != 1 or type(processors[0]) is not LinearTemperatureScheduleLogitsProcessor:
        return None
    schedule = processors[0]
    # The stock processor computes this in float32 (cur_step is a tensor there); so does this.
    t_min = torch.tensor(schedule.t_min, dtype=torch.float32)
    return [float(t_min + (schedule.t_max - schedule.t_min) * (torch.tensor(step, dtype=torch.float32)
                                                              / schedule.max_denoising_steps)) for step in steps]


# Canvases whose self-conditioning softmax is alive at once: 8 x 128 MiB at the real shapes instead of the
# batch's (16 GiB at B=128). Each canvas's rows get the same bits in any group: both kernels are batch-invariant.
SIGNAL_CANVASES = 8


def soft_embeddings(logits: torch.Tensor, embedding) -> torch.Tensor:
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
        pending.append(torch.cat([soft_embeddings(part, embedding) for part in logits.split(SIGNAL_CANVASES)]))
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


class CapturedStep:
    """One whole denoising step (decoder, lm_head, the vocabulary pass, acceptance, renoising, the finished rows'
    hold and the stopping rule) captured as a CUDA graph and replayed.

    The host's launch work for a step (thousands of kernels at the real shapes: at B=1 it, not the GPU, would
    set the pace) is done once at capture; a replay launches the recorded kernels with the same arguments, so
    it computes bit for bit what the captured eager step computes. The step is a pure function of its inputs
    (the stopping rule's history and record are inputs and outputs too), so nothing is read back to the host
    between replays. Inputs are copied into the captured tensors before each replay (the self-conditioning
    logits into the tensor the capture saw, not a clone: it is vocabulary-sized); outputs live in the graph's
    memory and are overwritten by the next replay."""

    def __init__(self, run, inputs: tuple, shared: frozenset[int] = frozenset()):
        self.inputs = tuple(value if i in shared or value is None else value.clone() for i, value in enumerate(inputs))
        self.outputs = self._capture(run)

    def _capture(self, run):
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            return run(*self.inputs)

    def replay(self) -> None:
        """Launch the captured kernels once (on the captured inputs as they are)."""
        self.graph.replay()

    def __call__(self, *values) -> tuple:
        for static, value in zip(self.inputs, values):
            if static is not None and static is not value:
                static.copy_(value)
        self.replay()
        return self.outputs


def _no_function_modes() -> bool:
    """No ``TorchFunctionMode`` is active (the capture recorder is one): a replayed graph runs no Python, so it
    would record nothing."""
    return not torch.overrides._get_current_function_mode_stack()


SELF_CONDITIONING = 2  # its position among the step's inputs (see FusedStep._step)


class FusedStep:
    """A drop-in ``_denoising_step`` for the runner's per-row sampler and stop recorder (see the module).

    A step is one pure function of the carried values (``_step``); nothing in it reads a value back to the
    host, so the host's only wait per pass is the loop's own test of whether every row has finished. Each
    canvas's random seeds and temperatures are sent to the device once, at its first pass.

    With ``cuda_graphs`` (default), on CUDA and with no recorder attached, each canvas's steps from the third
    on are replayed from a CUDA graph captured at the third; the first two run eagerly (the first has no
    self-conditioning input, the second loads and compiles the kernels the rest need). Once a capture at a
    batch size has succeeded on this model, later canvases at that batch size (of any call) capture at the
    second step. A capture that fails (an op that waits for the host) leaves that canvas eager;
    ``graph_failures`` keeps the reasons."""

    cuda_graphs = True
    captured_step = CapturedStep
    CAPTURED_BATCHES = "_canvaslab_captured_batches"  # on the model: batch sizes whose step was captured once

    def __init__(self, model, randomness, observers: Sequence = (), fallback=None, compiled: bool = False):
        self.model = model
        # On the compiled path the pass is compiled with canvaslab's backend (``compiled_path``); the
        # self-conditioning softmax is then the decoder's own, mapped onto canvaslab's ops.
        self.compiled = compiled
        self._decoder_pass = compiled_path.compiled(model, "pass", compiled_path.decoder_pass) if compiled \
            else compiled_path.decoder_pass
        self.randomness = randomness
        self.observers = observers
        self.fallback = fallback  # transformers' own step, for configurations this one does not cover
        self.softcap = model.config.text_config.final_logit_softcapping
        self.backbone, self.lm_head = model.get_submodule(anatomy.BACKBONE), anatomy.lm_head(model)
        self.graph_failures: list[str] = []
        self.replays = 0
        self._canvas: _Canvas | None = None

    def __call__(self, decoder_forward, current_canvas, argmax_canvas, input_ids, decoder_position_ids,
                 self_conditioning_logits, mask_mapping, cache, finished_denoising, cur_step, sampler,
                 logits_processor, diffusion_stopping_criteria, **model_kwargs):
        canvas = self._canvas_for((cache, mask_mapping), logits_processor, cur_step, current_canvas.device)
        if canvas.temperatures is None or not hasattr(sampler, "accept_by_entropy"):
            with RowKeyedMultinomial(self.randomness):  # transformers' step draws with torch.multinomial
                return self.fallback(decoder_forward=decoder_forward, current_canvas=current_canvas,
                                     argmax_canvas=argmax_canvas, input_ids=input_ids,
                                     decoder_position_ids=decoder_position_ids,
                                     self_conditioning_logits=self_conditioning_logits, mask_mapping=mask_mapping,
                                     cache=cache, finished_denoising=finished_denoising, cur_step=cur_step,
                                     sampler=sampler, logits_processor=logits_processor,
                                     diffusion_stopping_criteria=diffusion_stopping_criteria, **model_kwargs)
        stopper = diffusion_stopping_criteria
        k = canvas.passes
        canvas.passes += 1
        history = stopper.history(argmax_canvas) if stopper is not None else None
        record = stopper.record(current_canvas.device) if stopper is not None else None
        inputs = (current_canvas, argmax_canvas, self_conditioning_logits, finished_denoising, canvas.seeds[k],
                  canvas.temperatures[k:k + 1], history, *(record or (None, None)))

        def run(*values):
            return self._step(*values, sampler=sampler, stopper=stopper, mask_mapping=mask_mapping, cache=cache,
                              decoder_position_ids=decoder_position_ids, **model_kwargs)

        new_canvas, new_argmax, scaled, finished, accepted, mask, entropy, history, *record = \
            self._run_step(run, canvas, inputs)
        sampler.accepted_token_mask = mask
        self.randomness.finish_step()
        if stopper is not None:
            stopper.adopt(history, tuple(record))
        if self.observers and canvas.captured is not None:  # the next replay overwrites the graph's outputs
            accepted, mask, entropy = accepted.clone(), mask.clone(), entropy.clone()
        for observer in self.observers:
            observer.on_accept(logits=scaled, accepted_mask=mask, accepted_canvas=accepted, cur_step=int(cur_step),
                               entropy=entropy)
        return new_canvas, new_argmax, scaled, finished

    def _step(self, canvas, argmax, self_conditioning, finished, seeds, temperature, history, passes, stopped_at, *,
              sampler, stopper, mask_mapping, cache, decoder_position_ids, **model_kwargs):
        """One denoising step as a pure function of the carried values: the pass, acceptance by entropy,
        renoising from the row's own stream, finished rows held (they keep their canvas, argmax and
        self-conditioning logits, as in transformers' step) and the stopping rule with its record."""
        from canvaslab.invariant.triton_kernels import keep_rows, uniform_tokens

        scaled, entropy, new_argmax, draw = self._decoder_pass(
            self.backbone, self.lm_head, self.softcap, canvas, self_conditioning, seeds[:, 0].contiguous(),
            temperature, mask_mapping, cache, decoder_position_ids, model_kwargs)
        accepted = sampler.accept_by_entropy(canvas, draw, entropy)
        mask = sampler.accepted_token_mask
        noise = uniform_tokens(seeds[:, 1].contiguous(), canvas.shape[1], sampler.vocab_size)
        new_canvas = torch.where(mask, accepted, noise)
        if stopper is None:
            return new_canvas, new_argmax, scaled, finished, accepted, mask, entropy, None, None, None
        new_argmax = torch.where(finished[:, None], argmax, new_argmax)
        new_canvas = torch.where(finished[:, None], canvas, new_canvas)
        if self_conditioning is not None:
            keep_rows(scaled, self_conditioning, finished)
        stop, history = stopper.rule(new_argmax, entropy, history)
        passes, stopped_at = stopper.recorded(stop, (passes, stopped_at))
        return new_canvas, new_argmax, scaled, finished | stop, accepted, mask, entropy, history, passes, stopped_at

    def _canvas_for(self, canvas_key, logits_processor, cur_step, device) -> "_Canvas":
        """The canvas being denoised (a new one when the cache or mask mapping changed): its passes so far, its
        capture, and its seeds and temperatures for every remaining step, sent to the device at once."""
        if self._canvas is None or not all(a is b for a, b in zip(self._canvas.key, canvas_key)):
            temperatures = _temperatures(logits_processor, range(int(cur_step), 0, -1))
            steps = 0 if temperatures is None else int(cur_step)  # the fallback step draws its own
            seeds = self.randomness.seed_table(("sample", "renoise"), steps)
            self._canvas = _Canvas(key=canvas_key, seeds=_to_device(seeds, device), temperatures=None if temperatures
                                   is None else _to_device(torch.tensor(temperatures, dtype=torch.float32), device))
        return self._canvas

    @staticmethod
    def _graphable(canvas, self_conditioning) -> bool:
        return canvas.is_cuda and self_conditioning is not None and _no_function_modes()

    def _run_step(self, run, canvas: "_Canvas", inputs: tuple) -> tuple:
        """The step eagerly, or replayed from this canvas's captured graph (see the class)."""
        graphs = self.cuda_graphs and self._graphable(inputs[0], inputs[SELF_CONDITIONING])
        captured_batches = vars(self.model).setdefault(self.CAPTURED_BATCHES, set())
        shape = (inputs[0].shape[0], self.compiled)  # the compiled pass and the eager one load other kernels
        first = 2 if shape in captured_batches else 3
        if graphs and canvas.captured is None and canvas.passes >= first and canvas.may_capture \
                and len(self.graph_failures) < 3:
            try:
                canvas.captured = self.captured_step(run, inputs, shared=frozenset({SELF_CONDITIONING}))
                captured_batches.add(shape)
            except RuntimeError as error:  # an op that cannot be captured: this canvas stays eager
                self.graph_failures.append(str(error).splitlines()[0])
                canvas.may_capture = False
        if graphs and canvas.captured is not None:
            self.replays += 1
            return canvas.captured(*inputs)
        return run(*inputs)


def _to_device(values: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``values`` on ``device`` without making the host wait for the GPU's queued work (pinned, non-blocking)."""
    if device.type != "cuda":
        return values.to(device)
    return values.pin_memory().to(device, non_blocking=True)


@dataclass
class _Canvas:
    """What the fused step keeps for the canvas being denoised."""

    key: tuple
    seeds: torch.Tensor  # (remaining steps, batch, 2): each row's sample and renoise seeds
    temperatures: torch.Tensor | None  # (remaining steps,); None: the logits processors are not the schedule alone
    passes: int = 0
    captured: CapturedStep | None = None
    may_capture: bool = True
