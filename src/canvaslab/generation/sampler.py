"""Install per-row randomness into transformers' own sampler and generate loop.

Nothing in transformers is edited. ``RowKeyedSampler`` subclasses ``EntropyBoundSampler`` and only
changes where its random tokens come from; ``RowKeyedMultinomial`` is a ``TorchFunctionMode`` that, while
generate runs, answers the loop's single ``torch.multinomial`` call from the per-row streams.

A function mode sends every torch call through Python (about 6 µs more per op on a CPU core), and a
decoder pass makes some 1,500 of them, none a multinomial. ``suspended_during`` therefore takes the mode
off the stack while the model's forward runs: the same ops, the same numbers, without that overhead.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Callable

import torch
from torch.overrides import TorchFunctionMode, _get_current_function_mode, _pop_mode_temporarily
from transformers.models.diffusion_gemma.generation_diffusion_gemma import EntropyBoundSampler

from canvaslab.generation.row_randomness import RowRandomness, RowSampling


class RowTemperature:
    """A logits processor dividing each row's logits by its own factor (``RowSampling.factor``) before the model's
    temperature schedule divides them by the step's temperature: the row's temperature at a step is its factor
    times the schedule's. Row-local and elementwise (a factor of 1 leaves a row's logits bit for bit), so a row's
    numbers never depend on its neighbours' factors."""

    def __init__(self, sampling: list[RowSampling]):
        self.factors = [row.factor for row in sampling]
        self._on: dict[torch.device, torch.Tensor] = {}

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        factors = self._on.get(scores.device)
        if factors is None:
            factors = self._on[scores.device] = torch.tensor(self.factors, dtype=torch.float32,
                                                             device=scores.device).view(-1, *[1] * (scores.dim() - 1))
        return (scores / factors).to(scores.dtype)


class RowKeyedSampler(EntropyBoundSampler):
    """``EntropyBoundSampler`` whose canvas noise and renoising come from per-row streams."""

    def __init__(self, *args, randomness: RowRandomness, **kwargs):
        super().__init__(*args, **kwargs)
        self.randomness = randomness

    def initialize_canvas(self, batch_size: int, device: torch.device) -> torch.LongTensor:
        # Called once per canvas by the generate loop, before the canvas's first denoising step.
        self.randomness.start_canvas()
        return self.randomness.uniform_tokens("init", self.canvas_length, self.vocab_size, device)

    def accept_by_entropy(self, current_canvas: torch.LongTensor, denoiser_canvas: torch.LongTensor,
                          entropy: torch.Tensor) -> torch.LongTensor:
        """``accept_canvas`` given the per-position entropy instead of the logits (the fused step computes
        it in its pass over the vocabulary): the same entropy-bound rule, a stable sort."""
        sorted_entropy, order = torch.sort(entropy, dim=-1, stable=True)
        selected = torch.cumsum(sorted_entropy, dim=-1) - sorted_entropy <= self.entropy_bound
        self.accepted_token_mask = torch.scatter(torch.zeros_like(selected), -1, order, selected)
        return torch.where(self.accepted_token_mask, denoiser_canvas, current_canvas)

    def renoise_canvas(self, accepted_canvas: torch.LongTensor, cur_step: int) -> torch.LongTensor:
        noise = self.randomness.uniform_tokens("renoise", self.canvas_length, self.vocab_size, accepted_canvas.device)
        self.randomness.finish_step()
        return torch.where(self.accepted_token_mask, accepted_canvas, noise)


class RowKeyedMultinomial(TorchFunctionMode):
    """Routes ``torch.multinomial(probs, 1)`` to per-row exponential-race sampling."""

    def __init__(self, randomness: RowRandomness):
        super().__init__()
        self.randomness = randomness

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.multinomial:
            probs = args[0]
            num_samples = args[1] if len(args) > 1 else kwargs.get("num_samples")
            if num_samples != 1 or probs.dim() != 2:
                raise NotImplementedError("per-row sampling supports torch.multinomial(probs_2d, 1) only")
            # canvaslab's own sampling is not part of the model under study: hide its per-row ops from
            # other function modes (the capture recorder); its result is seen through accept_canvas.
            with torch._C.DisableTorchFunction():
                return self.randomness.categorical(probs)
        return func(*args, **kwargs)

    @contextlib.contextmanager
    def suspended(self):
        """Off the function-mode stack while the block runs, when it is on top (it is, inside generate:
        a mode entered later would be above it, and then it stays, correct but slower)."""
        if _get_current_function_mode() is not self:
            yield
            return
        with _pop_mode_temporarily():
            yield

    def suspended_during(self, forward: Callable) -> Callable:
        """``forward`` run with this mode suspended (the model's forward has no ``torch.multinomial``)."""

        @functools.wraps(forward)
        def without_mode(*args, **kwargs):
            with self.suspended():
                return forward(*args, **kwargs)

        return without_mode


def foreign_function_modes() -> list[TorchFunctionMode]:
    """The active ``TorchFunctionMode``s other than ``RowKeyedMultinomial`` (the capture recorder, say): modes that
    see every torch call, so code they watch must not change with the batch or hide inside compiled code."""
    return [mode for mode in torch.overrides._get_current_function_mode_stack()
            if not isinstance(mode, RowKeyedMultinomial)]
