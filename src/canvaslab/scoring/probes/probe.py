"""One probe of the commit-order study, and the rule that puts it in the exploratory or confirmatory half.

The paper (REFERENCE §4) splits every regime's prompts in two: an exploratory half on which analysis
choices are frozen, and a confirmatory half on which results are reported. The half of a prompt is a
function of its id alone (a SHA-256 of ``probe_id``), not of a random state or of the other prompts,
so a prompt never changes half when the suite grows, shrinks or is reordered.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from canvaslab.choices import CODE_REGIMES, REGIMES
from canvaslab.choices import PROBE_SPLITS as SPLITS

@dataclass(frozen=True)
class Probe:
    """A prompt plus what its regime's scorer needs to judge a generated answer.

    ``reference`` by regime:
      math:             ``answer`` (the GSM8K number after '####', commas removed), ``solution``
      code_completion,
      code_synthesis:   ``entry_point``, ``code_prefix`` (code the answer continues; '' if none),
                        ``tests`` (Python run after the answer), ``canonical_solution``
      factual:          ``answers`` (canonical answer first, then aliases)
      json:             ``schema`` (JSON Schema, draft 2020-12), ``required_values`` (top-level key -> value)
      open_ended:       nothing (no scorer: correctness is null)
    """

    probe_id: str
    regime: str
    prompt: str
    split: str
    reference: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def scorable(self) -> bool:
        """Whether the regime has a scorer (every regime but ``open_ended``)."""
        return self.regime != "open_ended"


def split_of(probe_id: str) -> str:
    """The half a probe id belongs to: the parity of the first 8 bytes of its SHA-256."""
    digest = hashlib.sha256(probe_id.encode("utf-8")).digest()
    return SPLITS[int.from_bytes(digest[:8], "big") % 2]


def make_probe(regime: str, local_id: str, prompt: str, reference: dict[str, Any]) -> Probe:
    """Build a probe whose id is ``regime/local_id`` and whose half follows from that id."""
    probe_id = f"{regime}/{local_id}"
    return Probe(probe_id, regime, prompt, split_of(probe_id), reference)
