"""Row 0's denoising path: its canvas, accepted mask and entropy after every ``accept_canvas`` call.

The report replays a generation pass by pass (noise, committed, differs from B=1), so a study records,
per decoder pass, what row 0's canvas held. ``CanvasPathRecorder`` is an accept observer of
``canvaslab.generation.generate``: it keeps row 0's three vectors on the device and reads them back
once, after generate (no extra synchronisation per pass). A pass costs a few KB in JSON.

Passes a row made after it stopped (a batch runs on until its last row stops) are not its own: a row's
path keeps, per canvas, only its first ``RowResult.passes[c]`` passes.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

ENTROPY_DECIMALS = 4


class CanvasPathRecorder:
    """Observer for ``generate(..., observers=[path])``: row ``row``'s state after each accept call."""

    def __init__(self, row: int = 0):
        self.row = row
        self._pending: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor | None]] = []
        self._canvas, self._last_step = -1, None

    def on_phase(self, phase: str) -> None:
        if phase == "generate":
            self._pending, self._canvas, self._last_step = [], -1, None

    def on_accept(self, *, logits, accepted_mask, accepted_canvas, cur_step, entropy=None) -> None:
        # cur_step counts down within a canvas and restarts at the budget on the next one.
        if self._last_step is None or cur_step >= self._last_step:
            self._canvas += 1
        self._last_step = cur_step
        row_entropy = None if entropy is None else entropy[self.row].detach().float().clone()
        self._pending.append((self._canvas, accepted_canvas[self.row].detach().clone(), accepted_mask[self.row].detach().clone(),
                              row_entropy))

    def path(self, passes: Sequence[int]) -> dict[str, Any]:
        """The JSON record: ``passes[c]`` = row 0's own passes in canvas ``c`` (``RowResult.passes``)."""
        states, counted = [], [0] * len(passes)
        for canvas, tokens, mask, entropy in self._pending:
            if canvas >= len(passes) or counted[canvas] >= passes[canvas]:
                continue
            states.append({
                "canvas": canvas, "step": counted[canvas], "tokens": tokens.tolist(),
                "accepted": "".join("1" if a else "0" for a in mask.tolist()),
                "entropy": None if entropy is None else [round(e, ENTROPY_DECIMALS) for e in entropy.tolist()],
            })
            counted[canvas] += 1
        width = len(self._pending[0][1]) if self._pending else 0
        return {"canvas_length": width, "passes": states}


def token_texts(tokenizer, paths: Sequence[dict[str, Any]]) -> dict[str, str]:
    """``{token id: piece}`` for every token in ``paths``, so a report can show text without the tokenizer."""
    ids = sorted({token for path in paths for state in path["passes"] for token in state["tokens"]})
    return {str(i): piece for i, piece in zip(ids, tokenizer.convert_ids_to_tokens(ids))}
