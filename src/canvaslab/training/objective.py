"""The training objectives: DiffusionGemma's uniform-noise denoising, and next-token prediction for the
autoregressive sibling.

The diffusion objective is the training-time mirror of transformers' generate loop
(``generation_diffusion_gemma.py``), so the shipped sampler works unchanged:

- the prompt, and for answers longer than one canvas the answer's earlier canvases, run through the
  encoder into a ``DynamicCache`` (the decoder only reads it), as generate does before each canvas;
- the canvas is the next ``canvas_length`` answer tokens, padded with ``<pad>`` after ``<end_of_turn>``;
  a random fraction ``r ~ U(r_min, 1)`` of its positions is replaced by tokens drawn uniformly from the
  WHOLE vocabulary (unused ids included), which is what ``initialize_canvas``/``renoise_canvas`` do
  (r = 1 is the first denoising step; smaller r the later steps, where accepted tokens stay);
- optionally (``suffix_probability``, 0 in the shipped runs), a share of rows is noised from a random cut
  on instead, the prefix kept: the state generate reaches when an answer's easy head (a restated question,
  keys, copied operands) is accepted and its hard tail (the sum's digits) is not, which uniform rates reach
  rarely (for a sum's two digits after four copied operand digits, ``E[r (1 - r)^4]`` ~ 3% of rows);
- self-conditioning: on a random half of the steps (one host-side draw per step, as in Chen et al.'s
  self-conditioning recipe: a per-row draw ran the extra pass on nearly every step, and reading a
  device draw back stalled the GPU), a first decoder pass without gradient on a noisier copy of the
  canvas (the previous step saw fewer accepted tokens; ``self_conditioning_canvas="same"``: on the canvas
  itself, as in Chen et al.) gives logits, which are divided by a
  temperature drawn per row from ``[t_min, t_max]`` and cast to the embedding dtype exactly as
  ``_denoising_step`` hands them to the next step, and enter the second pass through
  ``self_conditioning_logits``; the other steps get none, as generate's first pass does;
- loss: cross-entropy of the softcapped logits against the clean canvas at every position (noised or
  not: the sampler's entropy bound and the stopping rule read the entropy of all positions, so kept
  tokens and the pad tail must be predicted confidently too), as a weighted mean: an answer is 10-40
  tokens of a 128-token canvas, so with equal weights the easy ``<pad>`` tail (and the kept tokens,
  which only need copying) would make up most of the loss and the answer itself would barely be
  trained. Positions whose target is ``<pad>`` weigh ``pad_weight``, positions left clean weigh
  ``kept_weight``, noised answer tokens weigh 1.
- those weights depend on the target, which the model cannot see (uniform noise leaves no mark on a noised
  position, and where an answer ends is often uncertain), so a weighted cross-entropy is minimised by
  q(y | x) proportional to w(y, x) p(y | x): the model learns to give ``<pad>`` 1 / pad_weight times and the
  token a position shows 1 / kept_weight times too little probability. With ``logit_adjustment`` (an option,
  off by default: at toy size it was no better, docs/mini-model.md) the loss reads the logits plus log w of each
  candidate (logit adjustment, Menon et al. 2021), whose minimiser is p itself: the weights still say where the
  gradient goes, and no longer bias what is predicted.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS, grouped_mm_experts_forward

from canvaslab.models import anatomy


SELF_CONDITIONING_CANVASES = ("nested", "same")


@dataclass(frozen=True)
class NoiseSchedule:
    """How canvases are corrupted and self-conditioned in training (docs/mini-model.md)."""

    min_rate: float = 0.05
    self_conditioning_probability: float = 0.5
    t_min: float = 0.4
    t_max: float = 0.8
    pad_weight: float = 0.1
    kept_weight: float = 0.25
    suffix_probability: float = 0.0  # rows whose canvas is noised from a random cut on (the prefix kept)
    max_rate: float = 1.0  # rates are min_rate + (max_rate - min_rate) * u ** rate_power, u ~ U(0, 1)
    rate_power: float = 1.0
    # the loss reads the logits plus log w of each candidate, so that the weights do not bias the prediction
    logit_adjustment: bool = False
    # the first pass's canvas: "nested" (noisier, as the previous denoising step's; every shipped run) or "same"
    # (this canvas, as in Analog Bits' self-conditioning, so that the first pass's logits are worth reading)
    self_conditioning_canvas: str = "nested"

    def __post_init__(self) -> None:
        if self.self_conditioning_canvas not in SELF_CONDITIONING_CANVASES:
            raise ValueError(f"self_conditioning_canvas must be one of {', '.join(SELF_CONDITIONING_CANVASES)}, "
                             f"not {self.self_conditioning_canvas!r}")

    def rates(self, rows: int, generator: torch.Generator, device) -> torch.Tensor:
        """One noise rate per row (uniform in [min_rate, max_rate) by default; ``rate_power`` > 1 favours low rates)."""
        u = torch.rand(rows, generator=generator, device=device)
        return self.min_rate + (self.max_rate - self.min_rate) * (u if self.rate_power == 1 else u ** self.rate_power)


@dataclass
class DiffusionBatch:
    """Left-padded encoder input (prompt + earlier canvases) and the clean target canvas."""

    encoder_ids: torch.Tensor  # (B, L)
    encoder_mask: torch.Tensor  # (B, L) bool
    canvas: torch.Tensor  # (B, C)


def noise_canvas(canvas: torch.Tensor, rate: torch.Tensor, vocab_size: int, generator: torch.Generator,
                 keep: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Replace each position with probability ``rate`` (per row) by a uniform token from the vocabulary.

    ``keep`` (a per-position uniform draw) makes noise nested: a row noised at a higher rate with the
    same ``keep`` has every position the lower rate noised, plus more.
    """
    if keep is None:
        keep = torch.rand(canvas.shape, generator=generator, device=canvas.device)
    noised = keep < rate[:, None]
    random_tokens = torch.randint(0, vocab_size, canvas.shape, generator=generator, device=canvas.device)
    return torch.where(noised, random_tokens, canvas), noised


def suffix_keep(keep: torch.Tensor, canvas: torch.Tensor, rate: torch.Tensor, probability: float,
                generator: torch.Generator, pad_id: int = 0) -> torch.Tensor:
    """``keep`` with a ``probability`` share of rows turned into suffix noise: from a cut drawn uniformly over
    the row's answer tokens (0 .. their count) on, every position is noised at any rate; before it, none is at
    ``rate`` and a noisier copy (a higher rate, self-conditioning's earlier pass) noises some of them."""
    rows, length = canvas.shape
    chosen = torch.rand(rows, generator=generator, device=canvas.device) < probability
    answer = (canvas != pad_id).sum(1)
    cut = (torch.rand(rows, generator=generator, device=canvas.device) * (answer + 1)).floor()
    after = torch.arange(length, device=canvas.device)[None] >= cut[:, None]
    prefix = rate[:, None] + (1 - rate[:, None]) * keep  # >= rate: kept now, noised by a higher rate sometimes
    return torch.where(chosen[:, None], torch.where(after, torch.zeros_like(keep), prefix), keep)


def decoder_logits(model, cache, batch: DiffusionBatch, canvas: torch.Tensor, **self_conditioning) -> torch.Tensor:
    """The decoder's softcapped logits for ``canvas`` given the encoded prefix: the call generate makes
    at every denoising pass (same positions, same 2-D mask over the left-padded prefix)."""
    length = batch.encoder_ids.shape[1]
    positions = torch.arange(length, length + canvas.shape[1], device=canvas.device)[None]
    decoder_mask = F.pad(batch.encoder_mask, (0, canvas.shape[1]), value=True)
    return model(cache=cache, decoder_input_ids=canvas, decoder_attention_mask=decoder_mask,
                 decoder_position_ids=positions, **self_conditioning).logits


def encode_prefix(model, batch: DiffusionBatch) -> DynamicCache:
    """Run the encoder over prompt + earlier canvases into a fresh cache (with gradients)."""
    cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    positions = torch.arange(batch.encoder_ids.shape[1], device=batch.encoder_ids.device)[None]
    anatomy.encoder(model)(input_ids=batch.encoder_ids, attention_mask=batch.encoder_mask, cache=cache,
                           position_ids=positions)
    return cache


def weight_logit_offsets(logits: torch.Tensor, shown: torch.Tensor, schedule: NoiseSchedule, sign: float = 1.0,
                         pad_id: int = 0) -> torch.Tensor:
    """``logits`` plus ``sign`` x log w of each candidate token: log ``pad_weight`` at ``<pad>``, log
    ``kept_weight`` at the token each position shows (``shown``, the decoder's input: a target equal to it is,
    but for a noise draw that hit it, a kept position). +1 is the training loss's logit adjustment; -1 undoes,
    on a model trained without it, the bias the weights put into its predictions."""
    offsets = torch.zeros(logits.shape[-1], dtype=logits.dtype, device=logits.device)
    offsets[pad_id] = sign * torch.log(torch.tensor(schedule.pad_weight)).item()
    adjusted = logits + offsets
    kept = torch.full((*shown.shape, 1), sign * torch.log(torch.tensor(schedule.kept_weight)).item(),
                      dtype=logits.dtype, device=logits.device)
    return adjusted.scatter_add(-1, shown[..., None], kept)


def position_weights(canvas: torch.Tensor, noised: torch.Tensor, schedule: NoiseSchedule, pad_id: int = 0) -> torch.Tensor:
    """The loss weight of each canvas position: 1 for a noised answer token, less for pad and kept ones."""
    weights = torch.where(canvas == pad_id, schedule.pad_weight, 1.0)
    return weights * torch.where(noised, 1.0, schedule.kept_weight)


def diffusion_loss(model, batch: DiffusionBatch, schedule: NoiseSchedule, generator: torch.Generator,
                   metrics: dict | None = None, self_condition: bool | None = None) -> torch.Tensor:
    """One training loss of the denoiser on ``batch`` (see the module docstring); ``metrics``, when given,
    receives the loss and argmax accuracy on the noised answer (non-pad) tokens alone, the part that
    says whether the model answers rather than pads. ``self_condition``: whether this step runs the
    self-conditioning pass (the training loop draws it on the host; None draws it from ``generator``)."""
    rows, device, vocab = batch.canvas.shape[0], batch.canvas.device, model.config.text_config.vocab_size
    rate = schedule.rates(rows, generator, device)
    keep = torch.rand(batch.canvas.shape, generator=generator, device=device)
    if schedule.suffix_probability:
        keep = suffix_keep(keep, batch.canvas, rate, schedule.suffix_probability, generator)
    noisy, noised = noise_canvas(batch.canvas, rate, vocab, generator, keep)
    cache = encode_prefix(model, batch)
    if self_condition is None:
        self_condition = bool(torch.rand((), generator=generator, device=device) < schedule.self_conditioning_probability)
    self_conditioning = {}
    if self_condition:
        if schedule.self_conditioning_canvas == "same":
            earlier = noisy
        else:
            earlier_rate = rate + (1 - rate) * torch.rand(rows, generator=generator, device=device)
            earlier, _ = noise_canvas(batch.canvas, earlier_rate, vocab, generator, keep)
        temperature = schedule.t_min + (schedule.t_max - schedule.t_min) * torch.rand(
            rows, 1, 1, generator=generator, device=device)
        with torch.no_grad():
            previous = decoder_logits(model, cache, batch, earlier) / temperature
        embed_dtype = anatomy.self_conditioning_embedding(model).dtype
        self_conditioning = {"self_conditioning_logits": previous.to(embed_dtype)}
    logits = decoder_logits(model, cache, batch, noisy, **self_conditioning)
    return weighted_canvas_loss(logits, batch.canvas, noised, schedule, metrics, shown=noisy)


def weighted_canvas_loss(logits: torch.Tensor, canvas: torch.Tensor, noised: torch.Tensor, schedule: NoiseSchedule,
                         metrics: dict | None = None, shown: torch.Tensor | None = None) -> torch.Tensor:
    """Cross-entropy against the clean canvas, weighted by ``position_weights``; ``metrics`` (optional)
    receives loss and argmax accuracy over the noised answer tokens alone (of the logits as predicted).
    With ``schedule.logit_adjustment`` the cross-entropy reads ``weight_logit_offsets`` of the logits, which
    needs the canvas the model was shown."""
    scored = logits.float()
    if schedule.logit_adjustment:
        if shown is None:
            raise ValueError("logit adjustment needs the canvas the model was shown")
        scored = weight_logit_offsets(scored, shown, schedule)
    losses = F.cross_entropy(scored.flatten(0, 1), canvas.reshape(-1), reduction="none").view(canvas.shape)
    weights = position_weights(canvas, noised, schedule)
    if metrics is not None:
        with torch.no_grad():
            content = noised & (canvas != 0)
            count = content.sum().clamp(min=1)
            metrics["content_loss"] = (losses * content).sum() / count
            metrics["content_accuracy"] = ((logits.argmax(-1) == canvas) & content).sum() / count
    return (losses * weights).sum() / weights.sum()


def causal_lm_loss(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Next-token loss of the autoregressive sibling (labels -100 on prompt and padding)."""
    return model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss


class _CastExperts:
    """The experts module seen with its two weight tensors cast to the autocast dtype (grads flow back)."""

    def __init__(self, module: torch.nn.Module, dtype: torch.dtype) -> None:
        self._module = module
        self.gate_up_proj = module.gate_up_proj.to(dtype)
        self.down_proj = module.down_proj.to(dtype)

    def __getattr__(self, name: str):
        return getattr(self._module, name)


# The training experts: transformers' grouped-GEMM function under bf16 autocast. A version whose row shuffles
# were gathers both ways (autograd's backward of an index is a scatter-add) was no faster on an H200 (0.293 s
# per step against this one's 0.274, benchmarks/results/mini_step_gpu_s10/ at commit cfcbda3), so it was removed.
AUTOCAST_EXPERTS = "canvaslab_autocast_grouped_mm"


def _autocast_grouped_mm_experts(module, hidden_states, top_k_index, top_k_weights):
    """``grouped_mm`` is not an autocast op: under autocast, fp32 master weights and bf16 activations are
    brought to the autocast dtype here (gradients flow back to the fp32 weights)."""
    if not torch.is_autocast_enabled(hidden_states.device.type):
        return grouped_mm_experts_forward(module, hidden_states, top_k_index, top_k_weights)
    dtype = torch.get_autocast_dtype(hidden_states.device.type)
    return grouped_mm_experts_forward(_CastExperts(module, dtype), hidden_states.to(dtype), top_k_index,
                                      top_k_weights.to(dtype))


def use_autocast_experts(model) -> None:
    ALL_EXPERTS_FUNCTIONS.register(AUTOCAST_EXPERTS, _autocast_grouped_mm_experts)
    model.set_experts_implementation(AUTOCAST_EXPERTS)


def restore_experts(model) -> None:
    model.set_experts_implementation("grouped_mm")
