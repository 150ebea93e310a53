"""benchmarks/mini_h200_calls.sh refuses a bad setting before it creates anything (its full run is a GPU job)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "mini_h200_calls.sh"


def test_an_unknown_sibling_mode_is_refused_in_one_line(tmp_path):
    state = tmp_path / "state"
    done = subprocess.run(["bash", str(SCRIPT), str(state), "prose.txt", str(tmp_path / "pack"), "60"],
                          env={**os.environ, "SIBLING": "alongside"}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == "SIBLING must be beside or after, not 'alongside'"
    assert not state.exists()
