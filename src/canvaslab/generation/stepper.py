"""Generation one decoder pass at a time, over whichever rows are present: the unit of continuous batching.

transformers' ``generate`` runs one batch from its first pass to its last. Here each row carries its own state
(its prompt's KV cache, its canvas, argmax canvas and self-conditioning logits, its sampler, stopping record and
random stream position), so rows can join between two passes and leave the moment they finish. A row's state
follows transformers' loop for a batch of one, with transformers' own pieces:

- a row's prompt is encoded alone, as ``generate`` encodes it at batch size 1 (``start``); so is each canvas it
  appends before its next one;
- one pass (``step``) runs the model's decoder over all present rows at once: their caches left-padded to the
  longest, each row at its own positions, each row's self-conditioning signal computed alone (zeros for a row at
  its first pass, as the decoder gives a batch of one);
- the rest of the step, from the logits on, is transformers' own ``_denoising_step`` for the row alone (the
  temperature at the row's own step, its draws from its own stream, acceptance, renoising, its stopping rule),
  handed that row's logits; then the canvas ends, is finalized and the next one starts as in ``generate``.

Where the mode takes the fused step (invariant mode on CUDA, ``Mode.streams_vocabulary``), a row's step is that
step's (``canvaslab.generation.fused_step``) as ``generate`` runs it: the pass stops at ``lm_head`` (the logits
stay bfloat16), the row's vocabulary pass, draw and renoising come from its own counter-based streams, and the
next pass's self-conditioning signal is the fused step's. Only the CUDA graph is not taken: the pass is shared.

In invariant mode the decoder pass is batch-invariant and padding-free per row (``canvaslab.invariant``), so a
row's tokens, text, stop point and drafts are the bytes it gets from ``canvaslab.generate`` alone, whoever else
shares its passes, joins or leaves. The stepper draws with ``rng="row"`` streams only (a shared stream would
tie a row to its batch).
"""

from __future__ import annotations

import contextlib
import copy
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Sequence

import torch
from transformers import DynamicCache

from canvaslab.errors import CanvaslabError
from canvaslab.generation.fused_step import FusedStep, soft_embeddings
from canvaslab.generation.prompt_cache import sliding_windows_compacted
from canvaslab.generation.row_randomness import RowRandomness
from canvaslab.generation.runner import (
    RowResult, _budget, _check_context, _generate_kwargs, _row_results, _StopRecorder, resolve_generation,
)
from canvaslab.generation.sampler import RowKeyedMultinomial, RowKeyedSampler
from canvaslab.invariant import Mode, mode_named
from canvaslab.models import anatomy


@dataclass(eq=False)
class RowState:
    """One row's generation between passes (see the module). ``done`` once its last canvas is committed."""

    prompt_ids: list[int]
    key: str
    settings: dict[str, Any]
    config: Any  # the row's DiffusionGemmaGenerationConfig, as generate builds it
    randomness: RowRandomness
    sampler: RowKeyedSampler
    stopper: _StopRecorder
    logits_processor: Any
    ar_stopping: Any
    cache: DynamicCache
    input_ids: torch.Tensor  # (1, prompt + committed canvases)
    attention_mask: torch.Tensor
    decoder_attention_mask: torch.Tensor
    encoder_position_ids: torch.Tensor
    decoder_position_ids: torch.Tensor
    cur_len: int
    canvases_left: int
    finished_sequences: torch.Tensor
    eos_tensor: torch.Tensor | None
    canvas: torch.Tensor | None = None
    argmax: torch.Tensor | None = None
    self_conditioning: torch.Tensor | None = None
    finished_denoising: torch.Tensor | None = None
    steps: list[int] = field(default_factory=list)  # the canvas's remaining cur_step values, next first
    canvas_index: int = -1
    canvas_mark: object = None  # a new object per canvas: how the fused step knows a canvas began
    fused: FusedStep | None = None  # the row's fused step, where the mode takes it
    done: bool = False
    serial: int = 0  # the stepper's count of rows started: identifies the row in its batched cache

    @property
    def prompt_length(self) -> int:
        return len(self.prompt_ids)


@dataclass
class PassReport:
    """What one pass did to one row: its draft (the argmax canvas after the pass), the canvas it committed if
    that canvas ended (tokens after the end-of-sequence token already padding, as transformers commits them)
    and whether the row is done."""

    row: RowState
    canvas: int
    draft: list[int]
    committed: list[int] | None
    done: bool


class PassStepper:
    """Rows of ``loaded``'s model generated pass by pass (see the module), in ``mode`` with per-row streams."""

    def __init__(self, loaded, *, mode: str | Mode = "invariant", seed: int = 0):
        self.loaded, self.model, self.mode, self.seed = loaded, loaded.model, mode_named(mode), seed
        self.canvas_length = int(self.model.config.canvas_length)
        decoder = anatomy.decoder(self.model)
        self._embedding = decoder.get_submodule(anatomy.EMBEDDING)
        self._self_conditioning = decoder.get_submodule(anatomy.SELF_CONDITIONING)
        self.fused = self.mode.streams_vocabulary(self.model)
        self._backbone, self._lm_head = self.model.get_submodule(anatomy.BACKBONE), anatomy.lm_head(self.model)
        self._batched: tuple[tuple, DynamicCache, torch.Tensor] | None = None
        self._started = 0
        self.last_pass_seconds = 0.0

    # ---- rows joining ------------------------------------------------------------------------------------

    @torch.no_grad()
    def start(self, prompt_ids: Sequence[int], key: str, generation: dict[str, Any] | None = None) -> RowState:
        """A row ready for its first pass: its prompt encoded alone and its first canvas drawn."""
        if not prompt_ids:
            raise CanvaslabError("a prompt is empty after tokenization")
        model = self.model
        settings = resolve_generation(self.loaded.generation_defaults, generation)
        _check_context(model, [prompt_ids], _budget(model, settings))
        config, model_kwargs = model._prepare_generation_config(None, **_generate_kwargs(settings))
        if model_kwargs:
            raise CanvaslabError(f"the stepper takes no model arguments: {', '.join(sorted(model_kwargs))}")
        input_ids = torch.tensor([list(prompt_ids)], device=model.device)
        cur_len = input_ids.shape[1]
        max_length, max_new_tokens = model._prepare_generated_length(config, cur_len)
        randomness = RowRandomness(seed=self.seed, requests=[key])
        attention_mask = torch.ones_like(input_ids, dtype=torch.bool)
        row = RowState(
            prompt_ids=list(prompt_ids), key=key, settings=settings, config=config, randomness=randomness,
            sampler=RowKeyedSampler(config=config.sampler_config, canvas_length=self.canvas_length,
                                    vocab_size=model.config.text_config.vocab_size,
                                    max_denoising_steps=config.max_denoising_steps, randomness=randomness),
            stopper=_StopRecorder(stability_threshold=config.stability_threshold,
                                  confidence_threshold=config.confidence_threshold, batch_size=1),
            logits_processor=model._prepare_logits_processor(config),
            ar_stopping=model._prepare_ar_stopping_criteria(config),
            cache=model._prepare_cache_for_generation(config, 1, max_length),
            input_ids=input_ids, attention_mask=attention_mask,
            decoder_attention_mask=torch.nn.functional.pad(attention_mask, (0, self.canvas_length), value=True),
            encoder_position_ids=torch.arange(0, cur_len, dtype=torch.int32, device=model.device)[None],
            decoder_position_ids=torch.arange(cur_len, cur_len + self.canvas_length, dtype=torch.int32,
                                              device=model.device)[None],
            cur_len=cur_len, canvases_left=-(-max_new_tokens // self.canvas_length),
            finished_sequences=torch.zeros(1, dtype=torch.bool, device=model.device),
            eos_tensor=None if config.eos_token_id is None else torch.tensor(config.eos_token_id, device=model.device),
            serial=self._started,
        )
        self._started += 1
        if self.fused:
            row.fused = FusedStep(model, randomness, fallback=model._denoising_step)
            row.fused.cuda_graphs = False  # the pass is shared by the rows: only the row's own work is its step
        if not isinstance(row.cache, DynamicCache) or row.cache.is_compileable:
            raise CanvaslabError("pass-by-pass generation needs transformers' dynamic cache; this model's generation "
                                 f"config asks for cache_implementation={config.cache_implementation!r}")
        with self.mode.on(model):
            self._begin_canvas(row, prefill=True)
        return row

    def _begin_canvas(self, row: RowState, *, prefill: bool) -> None:
        """``generate``'s steps 1.a and 1.b for the row alone: encode what the cache lacks, draw the canvas."""
        model = self.model
        unprocessed, encoder_masks = model._prepare_encoder_inputs(
            input_ids=row.input_ids, attention_mask=row.attention_mask, encoder_position_ids=row.encoder_position_ids,
            cache=row.cache, is_prefill=prefill, canvas_length=self.canvas_length, batch_size=1)
        with sliding_windows_compacted(model):
            anatomy.encoder(model)(input_ids=unprocessed, attention_mask=encoder_masks, cache=row.cache,
                                position_ids=row.encoder_position_ids)
        row.canvas, row.self_conditioning, _masks, row.finished_denoising = model._prepare_denoiser_inputs(
            decoder_attention_mask=row.decoder_attention_mask, cache=row.cache, sampler=row.sampler,
            diffusion_stopping_criteria=row.stopper, batch_size=1, device=model.device, model_kwargs={})
        row.argmax = row.canvas
        row.canvas_mark = object()
        row.steps = list(reversed(range(1, row.config.max_denoising_steps + 1)))
        row.canvas_index += 1
        row.canvases_left -= 1

    # ---- one pass ----------------------------------------------------------------------------------------

    @torch.no_grad()
    def step(self, rows: Sequence[RowState]) -> list[PassReport]:
        """One decoder pass over ``rows`` (none done), then each row's step, canvas end and next canvas."""
        if not rows or any(row.done for row in rows):
            raise CanvaslabError("a pass needs rows that are not done")
        started = time.perf_counter()
        with self.mode.on(self.model):
            logits = self._decoder_pass(rows)
            for b, row in enumerate(rows):
                self._denoise(row, logits[b:b + 1])
            # one read back for the pass (each would wait for the device's queue): drafts and finished flags
            ended = torch.stack([row.finished_denoising.all() for row in rows]).to(rows[0].argmax.dtype)
            read = torch.cat([torch.cat([row.argmax for row in rows]), ended[:, None]], dim=1).tolist()
            reports = [self._advance(row, values[:-1], bool(values[-1])) for row, values in zip(rows, read)]
        self.last_pass_seconds = time.perf_counter() - started
        return reports

    def _decoder_pass(self, rows: Sequence[RowState]) -> torch.Tensor:
        """The rows' logits: the model's (softcapped, float32), or with the fused step ``lm_head``'s (bfloat16)."""
        cache, mask = self._batched_cache(rows)
        canvases = torch.cat([row.canvas for row in rows])
        masks = anatomy.decoder(self.model).create_diffusion_decoder_attention_mask(
            config=self.model.config, inputs_embeds=canvases.unsqueeze(-1), cache=cache, decoder_attention_mask=mask)
        signals = torch.cat([self._signal(row) for row in rows])
        inputs = {"decoder_input_ids": canvases, "self_conditioning_logits": None, "decoder_attention_mask": masks,
                  "cache": cache, "decoder_position_ids": torch.cat([row.decoder_position_ids for row in rows])}
        with self._signal_given(signals):
            if self.fused:
                return self._lm_head(self._backbone(**inputs).last_hidden_state)
            return self.model.forward(**inputs).logits

    def _signal(self, row: RowState) -> torch.Tensor:
        """The row's self-conditioning signal, as the decoder (or the fused step's) computes it for a batch of one."""
        embedding = self._embedding
        if row.self_conditioning is None:
            return torch.zeros(1, self.canvas_length, embedding.weight.shape[1], dtype=embedding.weight.dtype,
                               device=embedding.weight.device)
        if self.fused:
            return soft_embeddings(row.self_conditioning, embedding)
        probs = row.self_conditioning.softmax(dim=-1, dtype=torch.float32).to(embedding.weight.dtype)
        return torch.matmul(probs, embedding.weight) * embedding.embed_scale.to(embedding.weight.dtype)

    @contextlib.contextmanager
    def _signal_given(self, signals: torch.Tensor):
        """The self-conditioning module receives ``signals`` in place of the zeros the decoder passes it."""
        handle = self._self_conditioning.register_forward_pre_hook(lambda module, args: (args[0], signals))
        try:
            yield
        finally:
            handle.remove()

    def _batched_cache(self, rows: Sequence[RowState]) -> tuple[DynamicCache, torch.Tensor]:
        """The rows' caches left-padded to the longest, and the decoder's 2D mask; rebuilt when the rows or one
        of their prefixes changed."""
        signature = tuple((row.serial, row.cur_len) for row in rows)
        if self._batched is not None and self._batched[0] == signature:
            return self._batched[1], self._batched[2]
        longest = max(rows, key=lambda row: row.cur_len)
        batched = copy.copy(longest.cache)
        batched.layers = [copy.copy(layer) for layer in longest.cache.layers]
        for index, layer in enumerate(batched.layers):
            length = max(row.cache.layers[index].keys.shape[-2] for row in rows)
            layer.keys = torch.cat([_left_pad(row.cache.layers[index].keys, length) for row in rows])
            layer.values = torch.cat([_left_pad(row.cache.layers[index].values, length) for row in rows])
        width = longest.decoder_attention_mask.shape[1]
        mask = torch.stack([torch.nn.functional.pad(row.decoder_attention_mask[0],
                                                    (width - row.decoder_attention_mask.shape[1], 0), value=False)
                            for row in rows])
        self._batched = (signature, batched, mask)
        return batched, mask

    def _denoise(self, row: RowState, logits: torch.Tensor) -> None:
        """The row's denoising step on its ``logits``: transformers' for the row alone, or the fused step."""
        cur_step = row.steps.pop(0)
        step = dict(current_canvas=row.canvas, argmax_canvas=row.argmax, input_ids=row.input_ids,
                    decoder_position_ids=row.decoder_position_ids, self_conditioning_logits=row.self_conditioning,
                    finished_denoising=row.finished_denoising, cur_step=cur_step, sampler=row.sampler,
                    logits_processor=row.logits_processor, diffusion_stopping_criteria=row.stopper)
        if row.fused is not None:
            row.canvas, row.argmax, row.self_conditioning, row.finished_denoising = self._fused_step(row, logits, step)
        else:
            with RowKeyedMultinomial(row.randomness):
                row.canvas, row.argmax, row.self_conditioning, row.finished_denoising = self.model._denoising_step(
                    decoder_forward=lambda **_: SimpleNamespace(logits=logits), mask_mapping=None, cache=None, **step)

    def _advance(self, row: RowState, draft: list[int], finished: bool) -> PassReport:
        """The row's report for the pass; its canvas's end and the next one's start when its canvas ended."""
        if row.steps and not finished:
            return PassReport(row, row.canvas_index, draft, None, False)
        canvas = row.canvas_index
        committed = self._commit(row)
        return PassReport(row, canvas, draft, committed, row.done)

    def _fused_step(self, row: RowState, logits: torch.Tensor, step: dict) -> tuple:
        """The row's fused step on its ``lm_head`` logits: its vocabulary pass stands in for the decoder pass
        (written over ``logits``); the canvas's cache and mark tell it when a canvas begins."""
        from canvaslab.invariant.triton_kernels import vocab_sample

        def vocabulary_pass(backbone, lm_head, softcap, canvas, self_conditioning, seeds, temperature, *_):
            return vocab_sample(logits, seeds, temperature, softcap, out=logits)

        def softcapped(**_):  # the fallback (processors besides the schedule) takes the model's own logits
            cap = self.model.final_logit_softcapping
            return SimpleNamespace(logits=torch.tanh(logits.to(torch.float32) / cap) * cap)

        row.fused._decoder_pass = vocabulary_pass
        return row.fused(decoder_forward=softcapped, mask_mapping=row.canvas_mark, cache=row.cache, **step)

    def _commit(self, row: RowState) -> list[int]:
        """``generate``'s steps 1.d to 1.f for the row, and the next canvas's start unless the row is done."""
        model = self.model
        row.input_ids = torch.cat([row.input_ids, row.argmax], dim=-1)
        row.input_ids, row.finished_sequences = model._finalize_canvas(
            input_ids=row.input_ids, finished_sequences=row.finished_sequences, generation_config=row.config,
            stopping_criteria=row.ar_stopping, canvas_length=self.canvas_length, eos_tensor=row.eos_tensor)
        committed = row.input_ids[0, -self.canvas_length:].tolist()
        if bool(row.finished_sequences.all()) or row.canvases_left == 0:
            row.done = True
            return committed
        row.cur_len, row.decoder_attention_mask, row.attention_mask, row.encoder_position_ids, \
            row.decoder_position_ids = model._prepare_kwargs_for_next_canvas(
                attention_mask=row.attention_mask, decoder_attention_mask=row.decoder_attention_mask,
                decoder_position_ids=row.decoder_position_ids, canvas_length=self.canvas_length, cur_len=row.cur_len)
        self._begin_canvas(row, prefill=False)
        return committed

    # ---- rows leaving ------------------------------------------------------------------------------------

    def result(self, row: RowState) -> RowResult:
        """The done row's result, as ``canvaslab.generate`` gives it for the row alone."""
        if not row.done:
            raise CanvaslabError("the row has not finished")
        [result] = _row_results(self.loaded.tokenizer, [row.prompt_ids], row.input_ids, row.prompt_length,
                                row.settings, row.stopper)
        return result


def _left_pad(tensor: torch.Tensor, length: int) -> torch.Tensor:
    missing = length - tensor.shape[-2]
    return torch.nn.functional.pad(tensor, (0, 0, missing, 0)) if missing else tensor


def generate_stepwise(loaded, prompts: Sequence[Sequence[int]], keys: Sequence[str], *, joins: Sequence[int] = (),
                      mode: str | Mode = "invariant", generation: dict[str, Any] | None = None,
                      max_rows: int | None = None, on_pass: Callable[[list[PassReport]], None] | None = None
                      ) -> list[RowResult]:
    """The rows generated pass by pass, row ``i`` joining at pass ``joins[i]`` (0 for all when not given; later
    when ``max_rows`` rows are running) and leaving when done: the stepper's schedule driven by hand.
    ``on_pass`` is given each pass's reports."""
    stepper = PassStepper(loaded, mode=mode)
    joins = list(joins) or [0] * len(prompts)
    waiting = sorted(range(len(prompts)), key=lambda i: (joins[i], i))
    running: list[tuple[int, RowState]] = []
    results: dict[int, RowResult] = {}
    passes = 0
    while waiting or running:
        while waiting and joins[waiting[0]] <= passes and (max_rows is None or len(running) < max_rows):
            index = waiting.pop(0)
            running.append((index, stepper.start(prompts[index], keys[index], generation)))
        if running:
            reports = stepper.step([row for _, row in running])
            if on_pass is not None:
                on_pass(reports)
            for index, row in [(index, row) for index, row in running if row.done]:
                results[index] = stepper.result(row)
            running = [(index, row) for index, row in running if not row.done]
        passes += 1
    return [results[i] for i in range(len(prompts))]
