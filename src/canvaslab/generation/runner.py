"""Generation through transformers' own ``model.generate``, with canvaslab's extension points.

canvaslab never reimplements the DiffusionGemma loop. It swaps in, for the duration of one call and on
the model instance only, the factories the loop already uses (``_prepare_sampler`` and
``_prepare_diffusion_stopping_criteria``): the sampler may draw from per-row streams, ``accept_canvas``
calls are reported to observers, and each row's stopping point is recorded.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import torch
from torch.overrides import TorchFunctionMode
from transformers import LogitsProcessorList
from transformers.models.diffusion_gemma.generation_diffusion_gemma import (
    DiffusionGemmaGenerationConfig,
    EntropyBoundSamplerConfig,
    StableAndConfidentStoppingCriteria,
)

from canvaslab.choices import RNGS, one_of
from canvaslab.errors import CanvaslabError
from canvaslab.generation.compiled_path import invariant_compile_functions
from canvaslab.generation.fused_step import FusedStep, streamed_self_conditioning
from canvaslab.generation.prompt_cache import build_prompt_cache, sliding_windows_compacted
from canvaslab.generation.row_randomness import DEFAULT_SAMPLING, RowRandomness, RowSampling, request_key
from canvaslab.generation.sampler import RowKeyedMultinomial, RowKeyedSampler, RowTemperature
from canvaslab.invariant import Mode, mode_named
from canvaslab.invariant.shadowing import shadowed
from canvaslab.models.loading import compiles_generate

GENERATION_KEYS = (
    "max_denoising_steps", "t_min", "t_max", "stability_threshold", "confidence_threshold",
    "entropy_bound", "max_new_tokens", "eos_token_id", "pad_token_id",
)


class AcceptObserver(Protocol):
    """Receives every ``accept_canvas`` call of the loop (the commit-order tracer is one), with the
    per-position entropy the sampler computed from ``logits`` (None if it could not be caught).

    The tensors are valid during the call only (the next pass may overwrite them): copy what is kept. In invariant
    mode's fused step (CUDA), ``logits`` are what the next pass receives: a row that has finished keeps its earlier
    ones there.

    An observer may also define ``on_phase(phase)``: it is told ``"prompt_cache"`` before the B=1 prompt
    cache is built and ``"generate"`` before transformers' loop starts; and ``on_prompt_encoding(rows)``:
    told, inside the prompt cache, which rows' prompt is encoded next.
    """

    def on_accept(self, *, logits: torch.Tensor, accepted_mask: torch.Tensor, accepted_canvas: torch.Tensor,
                  cur_step: int, entropy: torch.Tensor | None) -> None: ...


@dataclass
class RowResult:
    """One row's generation: tokens, text and where it stopped."""

    prompt_ids: list[int]
    tokens: list[int]
    text: str
    stop_passes: list[int | None]  # per canvas: decoder passes until the diffusion stop fired, None = budget used up
    passes: list[int]  # per canvas: decoder passes that counted for this row
    eos_position: int | None

    @property
    def stop_point(self) -> dict[str, Any]:
        return {"stop_passes": self.stop_passes, "eos_position": self.eos_position}

    @property
    def answer_tokens(self) -> list[int]:
        """The answer's tokens: ``tokens`` cut at the end-of-sequence token, without it or the padding after it."""
        return self.tokens if self.eos_position is None else self.tokens[:self.eos_position]


@dataclass
class GenerationOutput:
    rows: list[RowResult]
    settings: dict[str, Any] = field(default_factory=dict)


class _StopRecorder(StableAndConfidentStoppingCriteria):
    """The stock stopping criterion, also recording at which pass each row first stopped.

    The record of a canvas (passes so far, and each row's first stopping pass, 0 for none) stays on the device
    while the canvas runs, so a pass never waits for the GPU to report it; ``canvases`` reads it back."""

    def __init__(self, *args, batch_size: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.batch_size = batch_size
        self._records: list[tuple[torch.Tensor, torch.Tensor] | None] = []

    def reset(self):
        super().reset()
        if self._records and self._records[-1] is not None:  # not a view into the last canvas's graph memory
            self._records[-1] = tuple(t.clone() for t in self._records[-1])
        self._records.append(None)  # filled at the canvas's first pass

    def __call__(self, argmax_canvas, logits, **kwargs):
        stop = super().__call__(argmax_canvas, logits, **kwargs)
        self._records[-1] = self.recorded(stop, self.record(stop.device))
        return stop

    def history(self, argmax_canvas: torch.Tensor) -> torch.Tensor | None:
        """The canvas's argmax history (None when stability is not asked for), created at its first pass."""
        if self.stability_threshold and self.argmax_canvas_history is None:
            self.argmax_canvas_history = torch.full((self.stability_threshold, *argmax_canvas.shape), -1,
                                                    dtype=argmax_canvas.dtype, device=argmax_canvas.device)
        return self.argmax_canvas_history

    def rule(self, argmax_canvas, entropy, history) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(stop, the next history): the stock rule given the per-position entropy of the processed logits (the
        fused step's): stable (the argmax canvas unchanged over ``stability_threshold`` passes) and confident
        (mean entropy). A pure function of its inputs, so a CUDA graph can hold it."""
        if history is None:
            stable = torch.ones(argmax_canvas.shape[0], device=argmax_canvas.device, dtype=torch.bool)
        else:
            stable = (history == argmax_canvas[None]).all(dim=-1).all(dim=0)
            history = torch.cat([history[1:], argmax_canvas[None]])
        return stable & (entropy.mean(dim=-1) < self.confidence_threshold), history

    def record(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The current canvas's record: (passes, first stopping pass per row, 0 for none), on the device."""
        if self._records[-1] is None:
            return (torch.zeros((), dtype=torch.int64, device=device),
                    torch.zeros(self.batch_size, dtype=torch.int64, device=device))
        return self._records[-1]

    @staticmethod
    def recorded(stop: torch.Tensor, record: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The record after a pass that gave ``stop`` (pure, no read back to the host)."""
        passes, stopped_at = record
        passes = passes + 1
        return passes, torch.where((stopped_at == 0) & stop, passes, stopped_at)

    def adopt(self, history: torch.Tensor | None, record: tuple[torch.Tensor, torch.Tensor]) -> None:
        """Take the history and record a pass computed (``rule``, ``recorded``) as the current ones."""
        self.argmax_canvas_history = history
        self._records[-1] = record

    @property
    def canvases(self) -> list[dict[str, Any]]:
        """Per canvas: ``passes`` run and each row's first stopping pass (``stopped_at``, None for none)."""
        empty = torch.zeros(1 + self.batch_size, dtype=torch.int64)
        rows = torch.stack([empty if record is None else torch.cat([record[0].view(1), record[1]]).cpu()
                            for record in self._records]).tolist() if self._records else []  # one read back
        return [{"stopped_at": [stop or None for stop in row[1:]], "passes": row[0]} for row in rows]


def resolve_generation(defaults: dict[str, Any], overrides: dict[str, Any] | None) -> dict[str, Any]:
    settings = {**defaults, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    unknown = set(settings) - set(GENERATION_KEYS)
    if unknown:
        raise CanvaslabError(f"unknown generation setting(s): {', '.join(sorted(unknown))}")
    if "entropy_bound" in settings:
        settings["entropy_bound"] = float(settings["entropy_bound"])
    return settings


def max_prompt_tokens(config, max_new_tokens: int) -> int | None:
    """The longest prompt a DiffusionGemma ``config``'s model takes with a completion budget of ``max_new_tokens``:
    its context (``text_config.max_position_embeddings``) less the canvases the budget needs (``canvas_length``
    each); None if the config states no context. Below 1 when the budget alone fills the context."""
    context = getattr(config.text_config, "max_position_embeddings", None)
    if context is None:
        return None
    return int(context) - _budget_canvases(config, max_new_tokens) * int(config.canvas_length)


def _budget_canvases(config, max_new_tokens: int) -> int:
    canvas = int(config.canvas_length)
    if canvas < 1:
        raise CanvaslabError(f"this model's config has canvas_length {canvas}; a canvas needs 1 token or more")
    return math.ceil(max_new_tokens / canvas)


def context_refusal(config, prompt_tokens: int, max_new_tokens: int) -> str | None:
    """Why a prompt of ``prompt_tokens`` does not fit ``config``'s context with that budget (None: it fits)."""
    limit = max_prompt_tokens(config, max_new_tokens)
    if limit is None or prompt_tokens <= limit:
        return None
    context, canvases = config.text_config.max_position_embeddings, _budget_canvases(config, max_new_tokens)
    budget = (f"the completion budget of {max_new_tokens} tokens, {canvases} canvas{'es' if canvases > 1 else ''} "
              f"of {config.canvas_length} ({canvases * config.canvas_length} positions)")
    if limit < 1:
        return f"{budget} leaves no room for a prompt in this model's context of {context} tokens"
    return f"a prompt has {prompt_tokens} tokens; this model takes at most {limit}: its context of {context} less {budget}"


def _budget(model, settings: dict[str, Any]) -> int:
    """The completion budget generate will use: the call's, else the model's generation config's, else
    transformers' own default."""
    for budget in (settings.get("max_new_tokens"), getattr(model.generation_config, "max_new_tokens", None)):
        if budget is not None:
            return int(budget)
    return int(DiffusionGemmaGenerationConfig._get_default_generation_params()["max_new_tokens"])


def _check_context(model, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> None:
    # positions past the context have no trained rotary embedding: the text would be garbage, silently
    refusal = context_refusal(model.config, max(map(len, prompts)), max_new_tokens)
    if refusal is not None:
        raise CanvaslabError(refusal)


def _generate_kwargs(settings: dict[str, Any]) -> dict[str, Any]:
    kwargs = {key: value for key, value in settings.items() if key != "entropy_bound"}
    if "entropy_bound" in settings:
        kwargs["sampler_config"] = EntropyBoundSamplerConfig(entropy_bound=settings["entropy_bound"])
    return kwargs


def _row_sampling(sampling: Sequence[RowSampling] | None, batch: int, rng: str) -> list[RowSampling] | None:
    """The rows' sampling, None when every row takes the default (then nothing in the loop changes)."""
    if sampling is None or all(row == DEFAULT_SAMPLING for row in sampling):
        return None
    if len(sampling) != batch:
        raise CanvaslabError(f"{len(sampling)} row samplings for {batch} prompts")
    if rng != "row":
        raise CanvaslabError("per-row temperature and top_p need rng='row'")
    return list(sampling)


def _left_pad_prompts(prompts: Sequence[Sequence[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(prompt) for prompt in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(prompts), width), dtype=torch.long, device=device)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(list(prompt), device=device)
        mask[row, width - len(prompt):] = 1
    return ids, mask


class _SamplerEntropy(TorchFunctionMode):
    """Catches the entropy ``accept_canvas`` computes: the tensor it sorts. Observers then need not
    recompute it over the whole vocabulary (the sampler's own values, at no cost)."""

    def __init__(self):
        super().__init__()
        self.entropy: torch.Tensor | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.sort and self.entropy is None:
            self.entropy = args[0]
        return func(*args, **(kwargs or {}))


def _observe_accept(sampler, observers: Sequence[AcceptObserver]) -> None:
    if not observers:
        return
    original = sampler.accept_canvas

    def accept_canvas(current_canvas, denoiser_canvas, logits, cur_step):
        with _SamplerEntropy() as caught:
            accepted = original(current_canvas, denoiser_canvas, logits, cur_step)
        entropy = caught.entropy if caught.entropy is not None and caught.entropy.shape == logits.shape[:-1] else None
        for observer in observers:
            observer.on_accept(logits=logits, accepted_mask=sampler.accepted_token_mask,
                               accepted_canvas=accepted, cur_step=int(cur_step), entropy=entropy)
        return accepted

    sampler.accept_canvas = accept_canvas


def _notify_phase(observers: Sequence[AcceptObserver], phase: str) -> None:
    for observer in observers:
        if hasattr(observer, "on_phase"):
            observer.on_phase(phase)


def _notify_encoding(observers: Sequence[AcceptObserver], rows: list[int]) -> None:
    for observer in observers:
        if hasattr(observer, "on_prompt_encoding"):
            observer.on_prompt_encoding(rows)


def _row_results(tokenizer, prompts, sequences, prompt_width, settings, stopper) -> list[RowResult]:
    eos_ids = settings.get("eos_token_id") or []
    eos_ids = set(eos_ids if isinstance(eos_ids, list) else [eos_ids])
    results, canvases = [], stopper.canvases
    for row, prompt in enumerate(prompts):
        tokens = sequences[row, prompt_width:].tolist()
        eos = next((i for i, token in enumerate(tokens) if token in eos_ids), None)
        text = tokenizer.decode(tokens[: eos] if eos is not None else tokens, skip_special_tokens=True)
        stops = [canvas["stopped_at"][row] for canvas in canvases]
        passes = [stop if stop is not None else canvas["passes"] for stop, canvas in zip(stops, canvases)]
        results.append(RowResult(list(prompt), tokens, text, stops, passes, eos))
    return results


@torch.no_grad()
def generate(
    loaded,
    prompts: Sequence[Sequence[int]],
    *,
    seed: int = 0,
    rng: str = "row",
    requests: Sequence[str] | None = None,
    copy_prompt_cache: bool = False,
    observers: Sequence[AcceptObserver] = (),
    generation: dict[str, Any] | None = None,
    mode: str | Mode = "stock",
    initial_canvas: torch.Tensor | None = None,
    sampling: Sequence[RowSampling] | None = None,
) -> GenerationOutput:
    """Generate for a batch of token-id prompts with transformers' own DiffusionGemma loop.

    ``rng="row"`` draws every random choice from per-row streams keyed by ``(seed, request, canvas,
    step)`` (``requests`` defaults to a hash of each prompt); ``rng="stock"`` keeps transformers' own
    sampling after ``torch.manual_seed(seed)``, for faithfulness checks. ``mode`` selects how batch-sensitive
    ops are computed (``canvaslab.invariant``: stock, rowwise, invariant; a name or a mode object), and with
    them the mode's parts of the loop (per-row positions, the compiled path, the fused step).
    ``initial_canvas`` ``(B, canvas)`` replaces the first canvas's random noise (the noise is still drawn, so
    later draws are unchanged).
    ``sampling`` (with ``rng="row"``) sets each row's temperature factor, greedy draws and top-p
    (``RowSampling``); a batch holding any row off the default takes transformers' own denoising step, with the
    rows' factors as a logits processor before the schedule and their draws from ``RowRandomness``.
    """
    one_of("--rng", rng, RNGS)
    if not prompts:
        raise CanvaslabError("no prompts to generate from")
    if any(len(prompt) == 0 for prompt in prompts):
        raise CanvaslabError("a prompt is empty after tokenization")
    mode = mode_named(mode)
    model, batch = loaded.model, len(prompts)
    settings = resolve_generation(loaded.generation_defaults, generation)
    _check_context(model, prompts, _budget(model, settings))
    requests = list(requests) if requests is not None else [request_key(prompt) for prompt in prompts]
    if len(requests) != batch:
        raise CanvaslabError(f"{len(requests)} request keys for {batch} prompts")
    sampling = _row_sampling(sampling, batch, rng)
    randomness = RowRandomness(seed=seed, requests=requests, sampling=sampling) if rng == "row" else None
    stopper: _StopRecorder | None = None

    def prepare_sampler(generation_config):
        if randomness is None:
            sampler = type(model)._prepare_sampler(model, generation_config)
        else:
            sampler = RowKeyedSampler(
                config=generation_config.sampler_config,
                canvas_length=model.config.canvas_length,
                vocab_size=model.config.text_config.vocab_size,
                max_denoising_steps=generation_config.max_denoising_steps,
                randomness=randomness,
            )
        _observe_accept(sampler, observers)
        return sampler

    def prepare_stopping(generation_config):
        nonlocal stopper
        stopper = _StopRecorder(
            stability_threshold=generation_config.stability_threshold,
            confidence_threshold=generation_config.confidence_threshold,
            batch_size=batch,
        )
        return stopper

    kwargs = _generate_kwargs(settings)
    if sampling is not None:  # a processor besides the schedule: the fused step hands the pass to transformers'
        kwargs["logits_processor"] = LogitsProcessorList([RowTemperature(sampling)])
    if initial_canvas is not None:
        if tuple(initial_canvas.shape) != (batch, model.config.canvas_length):
            raise CanvaslabError(f"initial canvas has shape {tuple(initial_canvas.shape)}, "
                                 f"expected ({batch}, {model.config.canvas_length})")
        kwargs["decoder_input_ids"] = initial_canvas.to(model.device)
    if copy_prompt_cache and compiles_generate(model):
        raise CanvaslabError("the copied prompt cache needs transformers' dynamic cache; this model's generation "
                             f"config asks for cache_implementation={model.generation_config.cache_implementation!r}")
    if copy_prompt_cache:
        _notify_phase(observers, "prompt_cache")
        cache, input_ids, attention_mask = build_prompt_cache(model, prompts, lambda rows: _notify_encoding(observers, rows))
        kwargs["cache"] = cache  # transformers >= 5.24 (past_key_values is deprecated there)
    else:
        input_ids, attention_mask = _left_pad_prompts(prompts, settings.get("pad_token_id") or 0, model.device)
    compiled = mode.takes_compiled_path(model)
    with contextlib.ExitStack() as stack:
        stack.enter_context(mode.generating(model, attention_mask))  # the mode, and its per-row positions
        if not compiles_generate(model):  # a static cache holds no views (and compiled code would trace the hooks)
            stack.enter_context(sliding_windows_compacted(model))
        if compiled:  # transformers' compiled static-cache path, compiled with canvaslab's ops inside
            stack.enter_context(shadowed(model, "_compile_functions", invariant_compile_functions(model)))
        stack.enter_context(shadowed(model, "_prepare_sampler", prepare_sampler))
        stack.enter_context(shadowed(model, "_prepare_diffusion_stopping_criteria", prepare_stopping))
        if randomness is not None and mode.streams_vocabulary(model):
            # The fused step draws in its kernel (no multinomial to answer, so no function mode on every op)
            fused = FusedStep(model, randomness, observers, fallback=model._denoising_step, compiled=compiled)
            stack.enter_context(shadowed(model, "_denoising_step", fused))
            if not compiled:  # its hooks would be traced once into compiled code: there the decoder's own runs
                stack.enter_context(streamed_self_conditioning(model))
        elif randomness is not None:
            multinomial = stack.enter_context(RowKeyedMultinomial(randomness))
            # The loop takes ``self.forward`` as its decoder pass: run it without the mode's per-op cost
            stack.enter_context(shadowed(model, "forward", multinomial.suspended_during(model.forward)))
        else:
            torch.manual_seed(seed)
        _notify_phase(observers, "generate")
        output = model.generate(input_ids, attention_mask=attention_mask, return_dict_in_generate=True, **kwargs)
    rows = _row_results(loaded.tokenizer, prompts, output.sequences, input_ids.shape[1], settings, stopper)
    return GenerationOutput(rows=rows, settings={**settings, "rng": rng, "seed": seed, "mode": mode.name,
                                                 "copy_prompt_cache": copy_prompt_cache})
