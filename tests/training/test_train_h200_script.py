"""benchmarks/mini_train_h200.py refuses a noise-rate power that is not positive before it trains or writes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("power", ["0", "-1", "nan"])
def test_a_rate_power_that_is_not_positive_is_refused_in_one_line(tmp_path, power):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mini_train_h200.py"), "--out", str(tmp_path / "run"),
                           "--passages", str(tmp_path / "prose.txt"), "--rate-power", power, "--device", "cpu"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: --rate-power must be positive, got {float(power)}"]
    assert not (tmp_path / "run").exists()


def test_prose_answers_for_other_passages_are_refused_in_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    (tmp_path / "prose.txt").write_text("One sentence here. And a second one.\n")
    (tmp_path / "a.json").write_text('{"format": "canvaslab-prose-answers/1", "passages_sha256": "0", "answers": {}}')
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mini_train_h200.py"), "--out", str(tmp_path / "run"),
                           "--passages", str(tmp_path / "prose.txt"), "--prose-answers", str(tmp_path / "a.json"),
                           "--device", "cpu"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith("error: prose answers") and "other passages" in done.stderr
    assert not (tmp_path / "run").exists()
