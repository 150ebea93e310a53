"""The suite's last line says when it stopped early (tests/suite_guard.py), and the suite runs with native
tracebacks (the CPython 3.11 ``ast`` crash in pytest's traceback formatting)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

TESTS = Path(__file__).parent

_CONFTEST = '''
import pytest
from suite_guard import SuiteGuard

def pytest_configure(config):
    config.pluginmanager.register(SuiteGuard(), "guard")

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if item.name == "test_b" and call.when == "call":
        raise RuntimeError("a crash inside pytest's own reporting")
'''


def _run_suite(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(folder)],
                          capture_output=True, text=True, cwd=folder, timeout=300,
                          env={"PYTHONPATH": str(TESTS), "PATH": "/usr/bin:/bin"})


def _suite(tmp_path: Path, crash: bool) -> Path:
    (tmp_path / "conftest.py").write_text(_CONFTEST if crash else _CONFTEST.split("@pytest.hookimpl")[0])
    (tmp_path / "test_three.py").write_text("def test_a(): pass\ndef test_b(): pass\ndef test_c(): pass\n")
    return tmp_path


def test_an_internal_error_ends_with_the_stopped_early_line(tmp_path):
    done = _run_suite(_suite(tmp_path, crash=True))
    assert done.returncode == 3, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("SUITE STOPPED EARLY: 1 of 3 collected tests ran (pytest's internal error"), last


def test_stopping_at_the_first_failure_is_said(tmp_path):
    (tmp_path / "conftest.py").write_text(_CONFTEST.split("@pytest.hookimpl")[0])
    (tmp_path / "test_three.py").write_text("def test_a(): assert False\ndef test_b(): pass\n")
    done = _run_suite(tmp_path, "-x")
    assert done.stdout.strip().splitlines()[-1].startswith("SUITE STOPPED EARLY: 1 of 2 collected tests ran"), done.stdout


def test_a_whole_run_adds_no_line(tmp_path):
    done = _run_suite(_suite(tmp_path, crash=False))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "STOPPED EARLY" not in done.stdout
    assert "3 passed" in done.stdout.strip().splitlines()[-1]


def test_the_suite_uses_native_tracebacks():
    config = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())
    assert "--tb=native" in config["tool"]["pytest"]["ini_options"]["addopts"].split()
