"""Which rows share the studied prompt's batch (how batch sizes group into agreeing classes is
``canvaslab.analysis.batch_classes``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from canvaslab.choices import FILLS, one_of
from canvaslab.errors import CanvaslabError

if TYPE_CHECKING:
    from canvaslab.invariant import Mode



def check_row(row: int, batch_sizes: Sequence[int], mode: str | Mode) -> None:
    """The studied row must exist in every batch studied (B=1, the reference, has only row 0)."""
    if row < 0:
        raise CanvaslabError(f"--row {row}: rows are numbered from 0")
    too_small = [size for size in batch_sizes if size != 1 and size <= row]
    if too_small:
        raise CanvaslabError(f"--row {row} does not exist at batch size {too_small[0]}; "
                             f"give batch sizes above {row} (B=1 is the reference)")
    if row and _computes_rows_apart(mode):
        raise CanvaslabError("--row above 0 needs --mode stock or invariant: rowwise computes each row in a call "
                             "of its own, which the capture cannot tell apart from row 0's")


def _computes_rows_apart(mode: str | Mode) -> bool:
    from canvaslab.invariant import mode_named  # imported here: this module stays free of torch

    return mode_named(mode).computes_rows_apart


def batch_rows(studied: Sequence[int], others: Sequence[Sequence[int]], batch_size: int, fill: str,
               row: int = 0) -> list[list[int]]:
    """The studied prompt at ``row`` (row 0 at B=1); the rest are bit-identical copies or other prompts."""
    one_of("--fill", fill, FILLS)
    if fill == "copies" or not others:
        return [list(studied) for _ in range(batch_size)]
    rest = [list(others[i % len(others)]) for i in range(batch_size - 1)]
    at = row if batch_size > 1 else 0
    return rest[:at] + [list(studied)] + rest[at:]
