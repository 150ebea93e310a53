"""The probe suite of `mini` for the commit-order study: held-out prompts of its own tasks, in the
study's probe format, so ``order-study --model mini --suite mini`` asks the model what it was trained
to answer (the default suite's GSM8K and HumanEval prompts are far beyond an 18M-parameter model).

Regimes: math (2- and 3-digit addition, word problems), factual (the synthetic knowledge base, held-out
combinations of the training question templates and wrappings), json, code_synthesis (small Python functions,
tests run in the sandbox) and open_ended (prose continuation, not scored). The file ships as ``probes/data/suites/mini.jsonl``;
``write_mini_suite`` rebuilds it (it needs the prose passages).
"""

from __future__ import annotations

from pathlib import Path

from canvaslab.io import write_text_atomic
from canvaslab.training.tasks import Mixture

# Tasks per regime; 60 probes per regime leave about 30 in each half of the split.
SUITE_TASKS: dict[str, tuple[str, ...]] = {
    "math": ("add2", "add3", "word"), "factual": ("fact",), "json": ("json",),
    "code_synthesis": ("code",), "open_ended": ("prose",),
}
PER_REGIME = 60
SUITE_SEED = 1  # the quality benchmark draws with seed 0: other held-out prompts where the key space allows


def mini_probe_records(passages: Path | str | None, per_regime: int = PER_REGIME) -> list[dict]:
    """Suite records (``id``, ``regime``, ``prompt``, ``reference``) from held-out examples only
    (without ``passages``: every regime but open_ended)."""
    mixture, records = Mixture(passages), []
    for regime, tasks in SUITE_TASKS.items():
        for position, task in enumerate(tasks):
            if task not in mixture.makers:  # prose without a passage file
                continue
            count = per_regime // len(tasks) + (position < per_regime % len(tasks))
            for index, example in enumerate(mixture.heldout(task, count, SUITE_SEED)):
                assert example.split == "heldout" and example.regime == regime
                records.append({"id": f"mini-{task}-{index:03d}", "regime": regime, "prompt": example.prompt,
                                "reference": example.reference})
    return records


def write_mini_suite(passages: Path | str, out: Path) -> int:
    import json

    records = mini_probe_records(passages)
    write_text_atomic(out, "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    return len(records)
