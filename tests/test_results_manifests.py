"""benchmarks/results/ holds only cited results, each folder with its manifest and raw files.

Every folder directly under benchmarks/results/ has a ``result.json`` (``canvaslab.environment.record_result``'s
shape) whose every run names the command, what it shows, canvaslab's version, the git commit, the date and the
environment, and whose every named file exists in the folder; no loose files beside the folders; no lock,
temporary or hidden files left behind by an interrupted or resumable run; no file over 5 MB in the tree.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from canvaslab.environment import MANIFEST_NAME

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
REQUIRED = ("file", "command", "shows", "canvaslab_version", "git_commit", "date", "environment")
LEFTOVER_SUFFIXES = (".lock", ".tmp", ".partial")
MAX_BYTES = 5 * 1024 * 1024
COMMIT = re.compile(r"[0-9a-f]{40}")


def manifest_problems(folder: Path) -> list[str]:
    """What is wrong with ``folder``'s manifest: missing, unreadable, a run without a required key, a named file
    that is not there."""
    manifest_path = folder / MANIFEST_NAME
    if not manifest_path.is_file():
        return [f"{folder.name}: no {MANIFEST_NAME}"]
    try:
        runs = json.loads(manifest_path.read_text(encoding="utf-8"))["runs"]
    except (ValueError, KeyError, TypeError) as error:
        return [f"{folder.name}/{MANIFEST_NAME}: not a manifest ({error!r})"]
    if not isinstance(runs, list) or not runs:
        return [f"{folder.name}/{MANIFEST_NAME}: no runs"]
    problems = []
    for index, run in enumerate(runs):
        where = f"{folder.name}/{MANIFEST_NAME} run {index}"
        if not isinstance(run, dict):
            problems.append(f"{where}: not an object")
            continue
        problems += [f"{where}: no {key!r}" for key in REQUIRED if not run.get(key)]
        if run.get("git_commit") and not COMMIT.fullmatch(str(run["git_commit"])):
            problems.append(f"{where}: git_commit {run['git_commit']!r} is not a full commit id")
        if run.get("environment") and not isinstance(run["environment"], dict):
            problems.append(f"{where}: environment is not an object")
        for name in [run.get("file"), *run.get("companions", [])]:
            if not name:
                continue
            path = (folder / name).resolve()
            if not path.is_relative_to(folder.resolve()) or not path.exists():
                problems.append(f"{where}: names {name!r}, which is not in the folder")
    return problems


def loose_files(results: Path) -> list[str]:
    return sorted(path.name for path in results.iterdir() if not path.is_dir())


def leftovers(results: Path) -> list[str]:
    """Lock, temporary and hidden files anywhere under ``results`` (hidden folders included)."""
    return sorted(str(path.relative_to(results)) for path in results.rglob("*")
                  if path.name.startswith(".") or (path.is_file() and path.name.endswith(LEFTOVER_SUFFIXES)))


def carried_files(results: Path) -> list[Path]:
    """The files under ``results`` the repository carries: tracked or about to be (not ignored); every file when
    this is not a git checkout."""
    try:
        listed = subprocess.run(["git", "-C", str(results), "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard", "."], capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return [path for path in results.rglob("*") if path.is_file()]
    return [results / name for name in listed.decode().split("\0") if name and (results / name).is_file()]


def oversized(results: Path) -> list[str]:
    return sorted(f"{path.relative_to(results)} ({path.stat().st_size:,} bytes)" for path in carried_files(results)
                  if path.stat().st_size > MAX_BYTES)


def result_folders(results: Path) -> list[Path]:
    return sorted(path for path in results.iterdir() if path.is_dir() and not path.name.startswith("."))


@pytest.mark.parametrize("folder", result_folders(RESULTS), ids=lambda path: path.name)
def test_every_result_folder_has_a_complete_manifest(folder):
    assert manifest_problems(folder) == []


def test_there_are_result_folders_and_no_loose_files():
    assert result_folders(RESULTS)
    assert loose_files(RESULTS) == []


def test_no_lock_temporary_or_hidden_files():
    assert leftovers(RESULTS) == []


def test_no_file_over_5_mb():
    assert oversized(RESULTS) == []


def test_the_checks_catch_what_they_guard_against(tmp_path):
    good = tmp_path / "good"
    (good / "sub").mkdir(parents=True)
    (good / "a.json").write_text("{}")
    (good / "sub" / "b.txt").write_text("b")
    run = {"file": "a.json", "command": "python bench.py --out a.json", "shows": "something",
           "canvaslab_version": "0.1.0", "git_commit": "0" * 40, "date": "2026-12-01T00:00:00+00:00",
           "environment": {"device": "cpu"}, "companions": ["sub/b.txt"]}
    (good / MANIFEST_NAME).write_text(json.dumps({"runs": [run]}))
    assert manifest_problems(good) == []

    bare = tmp_path / "bare"
    bare.mkdir()
    assert manifest_problems(bare) == ["bare: no result.json"]

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / MANIFEST_NAME).write_text(json.dumps({"runs": [
        {**run, "command": "", "git_commit": "abc", "companions": ["../good/a.json"]},
        {key: value for key, value in run.items() if key != "environment"} | {"file": "missing.json"}]}))
    problems = manifest_problems(broken)
    assert any("no 'command'" in problem for problem in problems)
    assert any("not a full commit id" in problem for problem in problems)
    assert any("'../good/a.json'" in problem for problem in problems)
    assert any("no 'environment'" in problem for problem in problems)
    assert any("'missing.json'" in problem for problem in problems)

    (tmp_path / "loose.json").write_text("{}")
    (good / "store").mkdir()
    for name in ("unit.lock", "batch_study.json.tmp", "x.partial", ".hidden"):
        (good / "store" / name).write_text("")
    assert loose_files(tmp_path) == ["loose.json"]
    assert leftovers(tmp_path) == ["good/store/.hidden", "good/store/batch_study.json.tmp", "good/store/unit.lock",
                                   "good/store/x.partial"]

    (good / "big.bin").write_bytes(b"\0" * (MAX_BYTES + 1))
    assert [entry.split(" ")[0] for entry in oversized(tmp_path)] == ["good/big.bin"]
