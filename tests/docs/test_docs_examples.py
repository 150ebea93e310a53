"""The examples the README and the docs mark runnable run, so the documentation cannot drift from the code.

Each page's runnable examples (``<!-- runnable -->`` before a ``bash`` or ``python`` block) run in order, in one
fresh folder, with this environment's ``canvaslab`` and ``python`` first on the PATH; each must end with exit code 0
(or the code its marker names) within its time limit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from docs_sources import documents, name, runnable_examples

TIMEOUT_S = 180
PAGES = {name(document): runnable_examples(document) for document in documents()}
WITH_EXAMPLES = sorted(page for page, examples in PAGES.items() if examples)


def test_the_pages_mark_their_fast_examples():
    assert "README.md" in WITH_EXAMPLES
    assert sum(len(examples) for examples in PAGES.values()) >= 5
    languages = {example.language for examples in PAGES.values() for example in examples}
    assert languages == {"bash", "python"}


@pytest.mark.parametrize("page", WITH_EXAMPLES)
def test_runnable_examples(page, tmp_path):
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "NO_COLOR": "1"}
    for example in PAGES[page]:
        command = (["bash", "-euo", "pipefail", "-c", example.code] if example.language == "bash"
                   else [sys.executable, "-c", example.code])
        try:
            result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{page}:{example.line}: the example ran longer than {TIMEOUT_S} s (mark only fast ones)")
        assert result.returncode == example.exit_code, (
            f"{page}:{example.line}: exit code {result.returncode}, expected {example.exit_code}\n"
            f"{example.code}\n--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}")
