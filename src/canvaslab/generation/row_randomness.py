"""Per-row random streams: a row's random choices never depend on its batch.

transformers' sampler draws canvas noise, renoising and multinomial samples from one global stream for
the whole batch, so a row's draws change with batch size and position. Here every draw comes from a
generator seeded by ``(seed, request, canvas index, step, purpose)``; a request is identified by its
key (by default a hash of its prompt ids), so the same request gets the same draws alone, in any
batch, at any position.

Sampling uses the exponential race: ``argmax(p / E)`` with ``E ~ Exp(1)`` i.i.d. picks index ``i``
with probability ``p_i`` (it is ``argmin E_i / p_i``, the first arrival of independent exponential
clocks with rates ``p_i``). It needs only row-local elementwise ops and an argmax, which are exact, so
the sample is bitwise the same whatever else is in the batch.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch

PURPOSES = ("init", "sample", "renoise")


@dataclass(frozen=True)
class RowSampling:
    """How one row draws its tokens. ``temperature`` 0 draws the argmax (greedy); any other value multiplies the
    model's temperature schedule for this row (``generation.sampler.RowTemperature``). ``top_p`` below 1 draws
    from the smallest set of most likely tokens whose probability reaches it. The default changes nothing."""

    temperature: float = 1.0
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def factor(self) -> float:
        """What the row's logits are divided by before the schedule's own temperature (1 for greedy draws)."""
        return 1.0 if self.greedy else self.temperature


DEFAULT_SAMPLING = RowSampling()


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """``probs`` ``(positions, vocab)`` with the tokens outside each position's top-``top_p`` nucleus zeroed: the
    most likely tokens (a stable sort, so ties keep vocabulary order) until their sum reaches ``top_p``."""
    ordered, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    keep = torch.cumsum(ordered, dim=-1) - ordered < top_p  # the first token is always kept
    return probs * torch.scatter(torch.zeros_like(keep), -1, order, keep)


def request_key(prompt_ids: Sequence[int]) -> str:
    """The default request identity: a hash of the prompt's token ids."""
    digest = hashlib.blake2b(",".join(map(str, prompt_ids)).encode(), digest_size=8)
    return digest.hexdigest()


def stream_seed(seed: int, request: str, canvas: int, step: int, purpose: str) -> int:
    """A 63-bit generator seed for one (seed, request, canvas, step, purpose) cell."""
    if purpose not in PURPOSES:
        raise ValueError(f"unknown purpose {purpose!r}")
    material = f"{seed}|{request}|{canvas}|{step}|{purpose}".encode()
    return int.from_bytes(hashlib.blake2b(material, digest_size=8).digest(), "little") >> 1


@dataclass
class RowRandomness:
    """Random draws keyed per row; tracks which canvas and denoising step the generate loop is in."""

    seed: int
    requests: list[str]
    sampling: Optional[Sequence[RowSampling]] = None  # per row; None: every row the default
    canvas: int = -1
    step: int = 0
    _generators: dict[torch.device, torch.Generator] = field(default_factory=dict, repr=False)

    def start_canvas(self) -> None:
        self.canvas += 1
        self.step = 0

    def finish_step(self) -> None:
        self.step += 1

    def generator(self, row: int, purpose: str, device: torch.device) -> torch.Generator:
        generator = self._generators.get(device)
        if generator is None:
            generator = self._generators[device] = torch.Generator(device=device)
        generator.manual_seed(stream_seed(self.seed, self.requests[row], self.canvas, self.step, purpose))
        return generator

    def seed_table(self, purposes: Sequence[str], steps: int) -> torch.Tensor:
        """``(steps, batch, len(purposes))`` int64: each row's seed for each purpose at this step and the
        ``steps - 1`` after it in this canvas, for kernels that draw from their own counter-based stream (the
        fused step's Philox) instead of a ``torch.Generator``, on the host: one copy to the device serves a canvas."""
        seeds = [[[stream_seed(self.seed, request, self.canvas, self.step + k, purpose) for purpose in purposes]
                  for request in self.requests] for k in range(steps)]
        return torch.tensor(seeds, dtype=torch.int64).reshape(steps, len(self.requests), len(purposes))

    def uniform_tokens(self, purpose: str, length: int, vocab_size: int, device: torch.device) -> torch.Tensor:
        """``(batch, length)`` token ids drawn uniformly from the vocabulary, one stream per row."""
        rows = [
            torch.randint(0, vocab_size, (length,), generator=self.generator(row, purpose, device), device=device)
            for row in range(len(self.requests))
        ]
        return torch.stack(rows)

    def categorical(self, probs: torch.Tensor) -> torch.Tensor:
        """One sample per position from ``probs`` of shape ``(batch * positions, vocab)``, per-row streams."""
        batch = len(self.requests)
        rows = probs.view(batch, -1, probs.shape[-1])
        samples = []
        for row in range(batch):
            # the clocks are drawn for greedy rows too, so that a row's later draws never depend on its sampling
            clocks = torch.empty_like(rows[row]).exponential_(generator=self.generator(row, "sample", probs.device))
            sampling = self.sampling[row] if self.sampling is not None else DEFAULT_SAMPLING
            if sampling.greedy:
                samples.append(torch.argmax(rows[row], dim=-1))
                continue
            weights = rows[row] if sampling.top_p >= 1 else nucleus(rows[row], sampling.top_p)
            samples.append(torch.argmax(weights / clocks, dim=-1))
        return torch.stack(samples).view(-1, 1)
