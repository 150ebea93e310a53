"""Which rows share the studied prompt's batch, and how batch sizes group into agreeing classes."""

from __future__ import annotations

from typing import Sequence

from canvaslab.errors import CanvaslabError

FILLS = ("copies", "mixed")


def batch_rows(studied: Sequence[int], others: Sequence[Sequence[int]], batch_size: int, fill: str) -> list[list[int]]:
    """Row 0 is the studied prompt; the rest are bit-identical copies or other prompts."""
    if fill not in FILLS:
        raise CanvaslabError(f"--fill {fill!r} is not one of: {', '.join(FILLS)}")
    rows = [list(studied)]
    if fill == "copies" or not others:
        return rows + [list(studied) for _ in range(batch_size - 1)]
    return rows + [list(others[i % len(others)]) for i in range(batch_size - 1)]


def equivalence_classes(signatures: dict[int, str]) -> list[list[int]]:
    """Group batch sizes whose runs were identical in every recorded byte."""
    classes: dict[str, list[int]] = {}
    for size in sorted(signatures):
        classes.setdefault(signatures[size], []).append(size)
    return sorted(classes.values())


def common_classes(per_prompt: list[list[list[int]]]) -> list[list[int]]:
    """Batch sizes agree study-wide when they agree for every prompt (the meet of the partitions)."""
    if not per_prompt:
        return []
    membership: dict[int, tuple[int, ...]] = {}
    for classes in per_prompt:
        for index, group in enumerate(classes):
            for size in group:
                membership[size] = membership.get(size, ()) + (index,)
    grouped: dict[tuple[int, ...], list[int]] = {}
    for size in sorted(membership):
        grouped.setdefault(membership[size], []).append(size)
    return sorted(grouped.values())
