"""The probe suite: which probes a study run uses, chosen deterministically.

Selection within a regime ranks its probes by SHA-256 of ``"<seed>:<probe_id>"`` and takes the first
``per_regime``. Like the split, a probe's rank depends on nothing but its id and the seed: the same
arguments give the same probes on every machine, a smaller ``per_regime`` gives a prefix of a larger
one, and adding prompts to a regime never reshuffles the ones already there (a new prompt can only
take a place in the ranking).
"""

from __future__ import annotations

import hashlib

from canvaslab.choices import ALL_SPLITS
from canvaslab.errors import CanvaslabError
from canvaslab.scoring.probes.datasets import load_regime
from canvaslab.scoring.probes.probe import REGIMES, SPLITS, Probe



def load_probe_suite(
    regimes: list[str] | None = None,
    split: str = "confirmatory",
    per_regime: int | None = None,
    seed: int = 0,
    suite: str = "default",
) -> list[Probe]:
    """The probes of ``regimes`` (default: all six, in ``REGIMES`` order) in one half of the suite.

    ``split`` is "exploratory", "confirmatory" or "all". ``per_regime`` caps the probes per regime
    (None: every probe); asking for more than a regime has is an error, not a silent shortfall. Within
    a regime the probes come in seeded rank order (module docstring). ``suite`` names a packaged suite
    (``datasets.SUITES``); a regime it has no probes of is an error.
    """
    chosen = _check_regimes(regimes)
    _check_split(split)
    selected: list[Probe] = []
    for regime in chosen:
        probes = [p for p in load_regime(regime, suite) if split == ALL_SPLITS or p.split == split]
        if not probes:
            raise CanvaslabError(f"probe suite {suite!r} has no {regime} probes ({split})")
        selected.extend(_select(probes, per_regime, seed, f"{regime} ({split})"))
    return selected


def rank_key(seed: int, probe_id: str) -> bytes:
    """The seeded, order-free sort key of a probe."""
    return hashlib.sha256(f"{seed}:{probe_id}".encode("utf-8")).digest()


def _select(probes: list[Probe], per_regime: int | None, seed: int, label: str) -> list[Probe]:
    ranked = sorted(probes, key=lambda probe: rank_key(seed, probe.probe_id))
    if per_regime is None:
        return ranked
    if per_regime < 1:
        raise CanvaslabError(f"per_regime must be at least 1, got {per_regime}")
    if per_regime > len(ranked):
        raise CanvaslabError(f"{label} has {len(ranked)} probes; {per_regime} were asked for")
    return ranked[:per_regime]


def _check_regimes(regimes: list[str] | None) -> list[str]:
    if regimes is None:
        return list(REGIMES)
    unknown = [r for r in regimes if r not in REGIMES]
    if unknown:
        raise CanvaslabError(f"unknown regime(s) {', '.join(unknown)}; choose from {', '.join(REGIMES)}")
    if len(set(regimes)) != len(regimes):
        raise CanvaslabError(f"a regime is listed twice: {', '.join(regimes)}")
    return list(regimes)


def _check_split(split: str) -> None:
    if split not in (*SPLITS, ALL_SPLITS):
        raise CanvaslabError(f"unknown split {split!r}; choose from {', '.join((*SPLITS, ALL_SPLITS))}")
