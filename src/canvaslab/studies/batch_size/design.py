"""Which rows share the studied prompt's batch (how batch sizes group into agreeing classes is
``canvaslab.analysis.batch_classes``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from canvaslab.choices import FILLS, one_of
from canvaslab.errors import CanvaslabError

if TYPE_CHECKING:
    from canvaslab.invariant import Mode
    from canvaslab.prompts import Prompt

# The copied prompt cache holds all of a prompt's tokens but the last, which transformers' generate encodes in
# the batch (it needs one uncached token): ``canvaslab.generation.prompt_cache``.
COPIED_CACHE_MIN_TOKENS = 2


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


def check_prompt_lengths(prompts: Sequence[Prompt], encoded: Mapping[str, Sequence[int]],
                         copy_prompt_cache: bool) -> None:
    """Every prompt long enough, as the model's tokenizer encodes it, for how the study feeds it: before any unit
    runs, so a short prompt is one line rather than a failed unit."""
    needed = COPIED_CACHE_MIN_TOKENS if copy_prompt_cache else 1
    short = next((p for p in prompts if len(encoded[p.prompt_id]) < needed), None)
    if short is None:
        return
    count = len(encoded[short.prompt_id])
    what = (f"prompt {short.prompt_id} ({_excerpt(short.text)}) is {count} token{'' if count == 1 else 's'} "
            "after the model's tokenization")
    if copy_prompt_cache:
        raise CanvaslabError(f"{what}; --copy-prompt-cache needs at least {needed} (the copied cache holds all but "
                             "the last, which is encoded in the batch): give a longer prompt, or --no-copy-prompt-cache")
    raise CanvaslabError(f"{what}: give a prompt the model's tokenizer keeps something of")


def _excerpt(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


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
