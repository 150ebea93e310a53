"""The package's layers point down: pyproject.toml's import-linter contract, checked on every test run.

Parts, top to bottom: cli, reports, training, studies, analysis, capture, generation, invariant,
models/assets/prompts, environment, io/errors. A module may import its own part and the parts below;
import-linter also follows indirect chains, and ``exhaustive`` makes a new top-level part fail until it
is placed in the list.
"""

from __future__ import annotations

from pathlib import Path

from importlinter.cli import lint_imports

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_lower_layers_never_import_higher_ones(capsys):
    status = lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True)
    report = capsys.readouterr().out
    assert status == 0, report
