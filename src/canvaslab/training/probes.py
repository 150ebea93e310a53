"""The probe suites of `mini`: held-out prompts of its own tasks, in the commit-order study's probe format, so
``order-study --model mini --suite mini`` asks the model what it was trained to answer (the default suite's GSM8K
and HumanEval prompts are far beyond an 18M-parameter model).

Regimes: math (2- and 3-digit addition, word problems), factual (the synthetic knowledge base, held-out
combinations of the training question templates and wrappings), json, code_synthesis (small Python functions,
tests run in the sandbox) and open_ended (prose continuation, not scored).

Two suites are built from the same generators (``MINI_SUITES``):

- ``mini`` (``probes/data/suites/mini.jsonl``): 60 probes per regime, seed 1; the commit-order study's and the
  first noise runs' suite.
- ``mini-large`` (``probes/data/suites/mini-large.jsonl``): 200 probes per regime (about 500 in each half of the
  split), seed 2, ids ``mini-large-<task>-NNN``, and no prompt of ``mini.jsonl``: a prompt population for the
  noise study's confirmatory design whose prompts were never seen in the earlier noise runs.

Both need the prose passages for open_ended; rebuild a suite with the shipped passage file (sha256 ``777dc244...``,
docs/mini-model.md, "How to reproduce")::

    canvaslab assets corpus --out runs/corpus/english.txt
    canvaslab mini passages --corpus runs/corpus/english.txt --out runs/mini/prose.txt
    python -c "from canvaslab.training.probes import write_mini_suite as w; \\
               w('runs/mini/prose.txt', 'src/canvaslab/scoring/probes/data/suites/mini-large.jsonl', 'mini-large')"

(``suite='mini'``, the default, rebuilds ``mini.jsonl`` byte for byte.) ``mini-large`` leaves out the prompts of
the packaged ``mini.jsonl``, so it is rebuilt from that file too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from canvaslab.errors import CanvaslabError
from canvaslab.io import write_text_atomic
from canvaslab.scoring.probes.datasets import load_suite_file
from canvaslab.training.tasks import Mixture

# Tasks per regime; 60 probes per regime leave about 30 in each half of the split.
SUITE_TASKS: dict[str, tuple[str, ...]] = {
    "math": ("add2", "add3", "word"), "factual": ("fact",), "json": ("json",),
    "code_synthesis": ("code",), "open_ended": ("prose",),
}
PER_REGIME = 60
SUITE_SEED = 1  # the quality benchmark draws with seed 0: other held-out prompts where the key space allows


@dataclass(frozen=True)
class MiniSuite:
    """How one packaged `mini` suite is drawn: probes per regime, the held-out draw's seed, and the suites whose
    prompts it leaves out (their packaged files). Ids are ``<name>-<task>-NNN``."""

    name: str
    per_regime: int
    seed: int
    avoid: tuple[str, ...] = ()


MINI_SUITES: dict[str, MiniSuite] = {
    "mini": MiniSuite("mini", PER_REGIME, SUITE_SEED),
    # seed 2: neither the quality benchmark's 0 nor mini's 1; mini's prompts left out (the noise study's earlier runs
    # saw them)
    "mini-large": MiniSuite("mini-large", 200, 2, avoid=("mini",)),
}


def packaged_prompts(suite: str) -> set[str]:
    """The prompts of a packaged suite file (``probes/data/suites/NAME.jsonl``)."""
    return {probe.prompt for probe in load_suite_file(suite)}


def mini_probe_records(passages: Path | str | None, per_regime: int | None = None, suite: str = "mini",
                       avoid: set[str] | frozenset[str] | None = None) -> list[dict]:
    """Suite records (``id``, ``regime``, ``prompt``, ``reference``) of ``suite`` (``MINI_SUITES``) from held-out
    examples only (without ``passages``: every regime but open_ended). ``per_regime`` overrides the suite's count;
    ``avoid`` the prompts it leaves out (default: those of the suite's ``avoid`` files). Every prompt is distinct.

    A task's held-out key space may give fewer distinct prompts than asked: then the suite takes what it gives."""
    try:
        spec = MINI_SUITES[suite]
    except KeyError:
        raise CanvaslabError(f"no mini suite {suite!r} (suites: {', '.join(MINI_SUITES)})") from None
    per_regime = spec.per_regime if per_regime is None else per_regime
    if avoid is None:
        avoid = set().union(*(packaged_prompts(name) for name in spec.avoid))
    mixture, records, seen = Mixture(passages), [], set(avoid)
    for regime, tasks in SUITE_TASKS.items():
        for position, task in enumerate(tasks):
            if task not in mixture.makers:  # prose without a passage file
                continue
            count = per_regime // len(tasks) + (position < per_regime % len(tasks))
            # ``heldout`` gives a prefix-stable sequence: drawing more, then skipping the avoided prompts, keeps
            # the draw a pure function of the seed and the avoided set
            examples = [e for e in mixture.heldout(task, count + len(seen), spec.seed) if e.prompt not in seen]
            for index, example in enumerate(examples[:count]):
                assert example.split == "heldout" and example.regime == regime
                seen.add(example.prompt)
                records.append({"id": f"{spec.name}-{task}-{index:03d}", "regime": regime, "prompt": example.prompt,
                                "reference": example.reference})
    return records


def write_mini_suite(passages: Path | str, out: Path | str, suite: str = "mini") -> int:
    """Write ``suite``'s JSONL file (one record a line, sorted keys); how many probes."""
    records = mini_probe_records(passages, suite=suite)
    write_text_atomic(Path(out), "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    return len(records)
