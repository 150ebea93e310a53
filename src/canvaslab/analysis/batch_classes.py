"""Batch-size classes: which batch sizes gave byte-identical runs, per prompt and study-wide.

A partition of batch sizes by their runs' signatures, not a statistical test (the TOST equivalence test
is ``canvaslab.analysis.tost``). The batch-size study and the op scan both group their results this way.
"""

from __future__ import annotations


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
