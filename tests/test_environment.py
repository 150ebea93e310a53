"""record_result: one manifest (result.json) per result folder, one run per file, rerun replaces its own run."""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
from pathlib import Path

import pytest

import canvaslab.environment as environment
from canvaslab.environment import MANIFEST_NAME, record_result

KEYS = {"file", "command", "shows", "canvaslab_version", "git_commit", "git_dirty", "date", "environment"}
ENVIRONMENT = {"device": "test CPU", "device_type": "cpu"}


def read(folder: Path) -> dict:
    return json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8"))


def test_a_result_gets_a_manifest_beside_it_with_every_key(tmp_path):
    (tmp_path / "speed.json").write_text("{}")
    written = record_result(tmp_path / "speed.json", "how fast it is", command=["throughput.py", "--out", "a b.json"],
                            environment=ENVIRONMENT)
    assert written == tmp_path / MANIFEST_NAME
    (run,) = read(tmp_path)["runs"]
    assert set(run) == KEYS
    assert run["file"] == "speed.json"
    assert run["command"] == "throughput.py --out 'a b.json'"
    assert run["shows"] == "how fast it is"
    assert run["environment"] == ENVIRONMENT
    assert run["canvaslab_version"] == environment._canvaslab_version()
    assert datetime.datetime.fromisoformat(run["date"]).tzinfo is not None


def test_another_file_adds_a_run_and_a_rerun_replaces_its_own(tmp_path):
    record_result(tmp_path / "a.json", "first a", command=["a"], environment=ENVIRONMENT)
    record_result(tmp_path / "b.json", "b", command=["b"], environment=ENVIRONMENT)
    assert [run["file"] for run in read(tmp_path)["runs"]] == ["a.json", "b.json"]

    record_result(tmp_path / "a.json", "second a", command=["a", "--again"], environment=ENVIRONMENT)
    runs = read(tmp_path)["runs"]
    assert sorted(run["file"] for run in runs) == ["a.json", "b.json"]
    (a_run,) = [run for run in runs if run["file"] == "a.json"]
    assert (a_run["shows"], a_run["command"]) == ("second a", "a --again")
    assert [run["shows"] for run in runs if run["file"] == "b.json"] == ["b"]


def test_a_folder_result_is_file_dot_and_other_keys_of_the_manifest_are_kept(tmp_path):
    (tmp_path / MANIFEST_NAME).write_text(json.dumps({"notes": "NOTES.md", "runs": []}))
    record_result(tmp_path, "a whole folder", command=["study"], environment=ENVIRONMENT)
    manifest = read(tmp_path)
    assert manifest["notes"] == "NOTES.md"
    assert [run["file"] for run in manifest["runs"]] == ["."]


def test_without_an_environment_the_fingerprint_is_recorded(tmp_path):
    record_result(tmp_path / "x.json", "x", command=["x"])
    (run,) = read(tmp_path)["runs"]
    assert run["environment"]["torch"] and run["environment"]["transformers"]


def test_git_commit_is_the_checkouts_head(tmp_path):
    source = Path(environment.__file__).resolve()
    repo = Path(__file__).resolve().parents[1]
    if shutil.which("git") is None or not source.is_relative_to(repo) or not (repo / ".git").exists():
        pytest.skip("canvaslab is not imported from a git checkout")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                            capture_output=True, text=True, check=True).stdout.strip()
    record_result(tmp_path / "x.json", "x", command=["x"], environment=ENVIRONMENT)
    (run,) = read(tmp_path)["runs"]
    assert run["git_commit"] == head
    assert run["git_dirty"] is bool(status)
