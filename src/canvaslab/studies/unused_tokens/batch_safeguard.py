"""The batch safeguard: does a condition's result depend on what shares its batch?

Seed 000's safeguard ran the same input alone and duplicated into a batch, and found that batching
changed the predictions. Here every condition's single run (a batch of one, the analysed result) is
compared with the same condition as a row of a batch, field by field and bit for bit. With per-row
random streams a row's draws cannot depend on its batch, so any difference is numeric batch dependence.

The fields go from coarse to fine: ``tokens`` (the generated canvas), ``stop`` (passes run, where the
stop fired), ``accept_passes`` and ``predictions`` (what the outcomes are computed from), ``entropy``
(first-pass entropy, exact) and ``logits`` (a digest of the row's whole logits on every pass). A firing
on ``logits`` alone means the numbers moved without changing any decision the study measures.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Iterable

from canvaslab.studies.unused_tokens.planted_observer import Observation

FIELDS: dict[str, Callable[[Observation], Any]] = {
    "tokens": lambda o: o.tokens,
    "stop": lambda o: (o.passes, o.stop_passes),
    "accept_passes": lambda o: o.first_accept_pass,
    "predictions": lambda o: o.predictions,
    "entropy": lambda o: o.first_entropy,
    "logits": lambda o: o.logits_digests,
    "first_pass": lambda o: o.first_pass,  # /3 plans' outcomes (None in /1 and /2 runs)
}
OUTCOME_FIELDS = ("tokens", "stop", "accept_passes", "predictions", "first_pass")


def differing_fields(single: Observation, batched: Iterable[Observation]) -> list[str]:
    """The fields in which any batched copy differs from the single run, in ``FIELDS`` order."""
    copies = list(batched)
    return [name for name, view in FIELDS.items() if any(view(copy) != view(single) for copy in copies)]


def safeguard_entry(single: Observation, batched: list[Observation], batch_rows: int) -> dict[str, Any]:
    """What a condition's results line records about its batched run."""
    fields = differing_fields(single, batched)
    return {"batch_rows": batch_rows, "copies": len(batched), "fired": bool(fields), "fields": fields}


def summarize_safeguard(records: list[dict[str, Any]], compared: Iterable[str] | None = None) -> dict[str, Any]:
    """Counts over the conditions' results lines: how many fired, per field (the plan's ``compared`` fields;
    default: those of /1 and /2 plans), and which."""
    fields = [field for field in FIELDS if field in set(compared or FIELDS) and (compared or field != "first_pass")]
    entries = [(r["condition_id"], r["safeguard"]) for r in records]
    fired = [cid for cid, entry in entries if entry["fired"]]
    by_field = Counter(field for _, entry in entries for field in entry["fields"])
    outcome_changed = [cid for cid, entry in entries if set(entry["fields"]) & set(OUTCOME_FIELDS)]
    return {
        "compared": len(entries),
        "fired": len(fired),
        "by_field": {field: by_field.get(field, 0) for field in fields},
        "outcome_fields_changed": len(outcome_changed),
        "fired_conditions": fired,
        "batch_rows": sorted({entry["batch_rows"] for _, entry in entries}),
    }
