"""benchmarks/mini_h200_calls.sh refuses a bad setting before it creates anything (its full run is a GPU job)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "mini_h200_calls.sh"


def _run(tmp_path, **env) -> subprocess.CompletedProcess:
    src = str(SCRIPT.parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]), **env}
    return subprocess.run(["bash", str(SCRIPT), str(tmp_path / "state"), "prose.txt", str(tmp_path / "pack"), "60"],
                          env=env, capture_output=True, text=True, timeout=60)


def test_an_unknown_sibling_mode_is_refused_in_one_line(tmp_path):
    done = _run(tmp_path, SIBLING="alongside")
    assert done.returncode == 2
    assert done.stderr.strip() == "SIBLING must be beside, after, keep or none, not 'alongside'"
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("setting, value, message", [
    ("SUM_FORMAT", "roman", "SUM_FORMAT 'roman' is not a sum format"),
    ("EVAL_TASKS", "prose,poetry", "EVAL_TASKS 'prose,poetry' is not a comma-separated list of evaluated tasks (add2,"),
])
def test_an_unknown_setting_is_refused_in_one_line(tmp_path, setting, value, message):
    done = _run(tmp_path, **{setting: value})
    assert done.returncode == 2
    assert done.stderr.strip().startswith(message)
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "state").exists()


def test_keep_is_a_sibling_mode_that_reaches_the_next_check(tmp_path):
    # keep (no sibling trained, the shipped mini-ar serves) passes the SIBLING check, so the bad SUM_FORMAT,
    # checked next, is what stops the script
    done = _run(tmp_path, SIBLING="keep", SUM_FORMAT="roman")
    assert done.returncode == 2
    assert done.stderr.strip().startswith("SUM_FORMAT 'roman' is not a sum format")
    assert not (tmp_path / "state").exists()


def test_none_is_a_sibling_mode_that_reaches_the_next_check(tmp_path):
    done = _run(tmp_path, SIBLING="none", SUM_FORMAT="roman")
    assert done.returncode == 2
    assert done.stderr.strip().startswith("SUM_FORMAT 'roman' is not a sum format")


def test_a_resume_folder_without_a_portable_state_is_refused_in_one_line(tmp_path):
    (tmp_path / "carried" / "resume-diffusion").mkdir(parents=True)  # the state file is missing
    done = _run(tmp_path, RESUME_FROM=str(tmp_path / "carried"))
    assert done.returncode == 2
    assert done.stderr.strip() == (f"RESUME_FROM '{tmp_path / 'carried'}' holds no resume-KIND/state.pt "
                                   "(the folders a paused call packs)")
    assert not (tmp_path / "state").exists()
