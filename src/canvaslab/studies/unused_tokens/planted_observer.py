"""Watch what the model does at the planted positions, pass by pass.

``PlantedPositionObserver`` is an ``AcceptObserver``: the runner calls it at every ``accept_canvas`` of the
generate loop with the sampler's logits and accepted mask for the whole batch. For each row it keeps, at
that row's planted positions, the argmax prediction and whether the position was accepted on every pass,
the entropy on the first pass, and an exact digest of the row's whole logits per pass (for the batch
safeguard: any bit that differs from the single run shows there).

Rows of a batch that already stopped still pass through ``accept_canvas`` (REFERENCE §1), but those
passes do not count for them; ``observation`` keeps only the passes the row really ran, as a batch of
one would have. Only the first canvas is observed: the plan generates one canvas, the one planted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import torch

from canvaslab.capture.digest import digest
from canvaslab.generation import RowResult
from canvaslab.studies.unused_tokens.first_pass import first_pass_outcomes


@dataclass
class Observation:
    """One row's generation, as the study measures it."""

    positions: list[int]
    planted: list[int]
    predictions: list[list[int]]  # per pass: argmax at each planted position
    accepted: list[list[bool]]  # per pass: planted position in the accepted set
    first_entropy: list[float]  # first pass, per planted position, nats
    logits_digests: list[int]  # per pass: exact digest of the row's logits
    tokens: list[int]
    text: str
    passes: int
    stop_passes: list[int | None]
    # /3 plans: per planted position, the first pass's log-probability boost of the planted token and the mean
    # KL at its neighbours, both against the matched no-plant canvas (first_pass.first_pass_outcomes)
    first_pass: dict[str, list[float | None]] | None = None

    @property
    def first_accept_pass(self) -> list[int | None]:
        """Per planted position, the first pass (1-based) whose accepted set held it; None if none did."""
        return [next((p + 1 for p, accepted in enumerate(self.accepted) if accepted[i]), None)
                for i in range(len(self.positions))]

    def to_record(self) -> dict[str, Any]:
        """JSON-ready, digests as strings (they are 64-bit) plus the derived first accept pass."""
        record = {**asdict(self), "logits_digests": [str(d) for d in self.logits_digests],
                  "first_accept_pass": self.first_accept_pass}
        if record["first_pass"] is None:  # /1 and /2 records stay as they were
            del record["first_pass"]
        return record


class PlantedPositionObserver:
    """Records predictions, acceptance, first-pass entropy and logits digests at each row's planted positions."""

    def __init__(self, positions: Sequence[Sequence[int]], planted: Sequence[Sequence[int]] = (),
                 reference: torch.Tensor | None = None, radius: int = 0):
        """``reference``: the matched no-plant canvas's first-pass log-probabilities ``(canvas, vocab)``; with it
        each row's first-pass outcomes against it are kept (``planted``: the ids at ``positions``, per row)."""
        self.positions = [list(p) for p in positions]
        self.planted, self.reference, self.radius = [list(p) for p in planted], reference, radius
        rows = range(len(self.positions))
        self.first_pass: list[dict | None] = [None for _ in rows]
        self.predictions: list[list[list[int]]] = [[] for _ in rows]
        self.accepted: list[list[list[bool]]] = [[] for _ in rows]
        self.first_entropy: list[list[float]] = [[] for _ in rows]
        self.digests: list[list[int]] = [[] for _ in rows]
        self._previous_step: int | None = None
        self._first_canvas = True

    def on_accept(self, *, logits: torch.Tensor, accepted_mask: torch.Tensor, accepted_canvas: torch.Tensor,
                  cur_step: int, entropy: torch.Tensor | None = None) -> None:
        # cur_step counts down within a canvas; going up again means the next canvas began.
        if self._previous_step is not None and cur_step >= self._previous_step:
            self._first_canvas = False
        self._previous_step = cur_step
        if not self._first_canvas:
            return
        for row, positions in enumerate(self.positions):
            self._record_row(row, positions, logits[row], accepted_mask[row])

    def _record_row(self, row: int, positions: list[int], logits: torch.Tensor, accepted: torch.Tensor) -> None:
        first_pass = not self.digests[row]
        self.digests[row].append(digest(logits))
        if not positions:
            return
        index = torch.tensor(positions, device=logits.device)
        picked = logits.index_select(0, index).float()
        self.predictions[row].append(picked.argmax(dim=-1).tolist())
        self.accepted[row].append(accepted.index_select(0, index).tolist())
        if first_pass:
            self.first_entropy[row] = torch.distributions.Categorical(logits=picked).entropy().tolist()
            if self.reference is not None:
                self.first_pass[row] = first_pass_outcomes(torch.log_softmax(logits.float(), dim=-1), self.reference,
                                                           positions, self.planted[row], self.radius)

    def observation(self, row: int, planted: Sequence[int], result: RowResult) -> Observation:
        """Row ``row``'s observation, cut to the passes it ran (``result.passes[0]``)."""
        passes = result.passes[0]
        return Observation(
            positions=self.positions[row], planted=list(planted), predictions=self.predictions[row][:passes],
            accepted=self.accepted[row][:passes], first_entropy=self.first_entropy[row],
            logits_digests=self.digests[row][:passes], tokens=result.tokens, text=result.text, passes=passes,
            stop_passes=result.stop_passes, first_pass=self.first_pass[row],
        )
