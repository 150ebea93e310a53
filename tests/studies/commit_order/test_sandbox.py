"""The sandbox that runs model-written code: limits hold, no network, no trace left, never in-process."""

from __future__ import annotations

import builtins
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from canvaslab.studies.commit_order import sandbox
from canvaslab.studies.commit_order.sandbox import SandboxLimits, network_namespace_prefix, run_in_sandbox

FAST = SandboxLimits(timeout_s=5, cpu_time_s=5)


@pytest.fixture
def listener():
    """A TCP server in OUR network namespace that an unsandboxed process can reach (positive control)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    yield server.getsockname()[1]
    server.close()


def test_correct_code_passes():
    result = run_in_sandbox("def add(a, b):\n    return a + b\n", "assert add(2, 3) == 5\nprint('ran')", FAST)
    assert result.passed and not result.timed_out and result.returncode == 0
    assert result.stdout_tail == "ran\n"


def test_a_failing_assert_fails():
    result = run_in_sandbox("def add(a, b):\n    return a - b\n", "assert add(2, 3) == 5", FAST)
    assert not result.passed and not result.timed_out and result.returncode == 1
    assert "AssertionError" in result.stderr_tail


def test_an_infinite_loop_times_out():
    result = run_in_sandbox("while True:\n    pass\n", "", SandboxLimits(timeout_s=1, cpu_time_s=30))
    assert result.timed_out and not result.passed
    assert result.elapsed_s < 5


def test_the_cpu_time_limit_stops_a_busy_loop_before_the_wall_clock():
    result = run_in_sandbox("while True:\n    pass\n", "", SandboxLimits(timeout_s=30, cpu_time_s=1))
    assert result.timed_out and not result.passed
    assert result.elapsed_s < 10


def test_a_memory_bomb_is_stopped():
    limits = SandboxLimits(memory_bytes=256 * 1024**2)
    at_once = run_in_sandbox("blob = bytearray(4 * 1024**3)\n", "", limits)
    grow = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 1024**2))\n"
    growing = run_in_sandbox(grow, "", limits)
    for result in (at_once, growing):
        assert not result.passed and not result.timed_out
        assert "MemoryError" in result.stderr_tail


def test_the_listener_is_reachable_without_the_sandbox(listener):
    code = f"import socket; socket.create_connection(('127.0.0.1', {listener}), timeout=5).close()"
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)
    assert plain.returncode == 0, plain.stderr  # so the failures below are the sandbox's doing


@pytest.mark.parametrize(
    "code",
    [
        "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5).close()",
        "import _socket\ns = _socket.socket()\ns.connect(('127.0.0.1', {port}))",
    ],
)
@pytest.mark.parametrize("namespace", [True, False])
def test_network_attempts_fail_inside_the_sandbox(listener, code, namespace):
    limits = SandboxLimits(timeout_s=5, use_network_namespace=namespace)
    result = run_in_sandbox(code.format(port=listener), "", limits)
    assert not result.passed and result.returncode != 0
    assert "network access is disabled" in result.stderr_tail
    assert result.network_namespace == (namespace and bool(network_namespace_prefix()))


def test_the_network_namespace_alone_blocks_the_network(listener):
    prefix = network_namespace_prefix()
    if not prefix:
        pytest.skip("unshare cannot create a network namespace for this user here")
    code = f"import socket; socket.create_connection(('127.0.0.1', {listener}), timeout=5)"
    isolated = subprocess.run([*prefix, sys.executable, "-I", "-c", code], capture_output=True, timeout=30)
    assert isolated.returncode != 0
    assert b"Network is unreachable" in isolated.stderr or b"ConnectionRefusedError" in isolated.stderr


def test_files_written_by_the_code_stay_in_the_temporary_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = textwrap.dedent(
        """
        import os
        with open("leak.txt", "w") as handle:
            handle.write("x")
        os.makedirs("nested/dir")
        print(os.getcwd())
        """
    )
    result = run_in_sandbox(code, "", FAST)
    assert result.passed
    sandbox_dir = result.stdout_tail.strip()
    assert sandbox_dir != str(tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing landed in our working directory
    assert not os.path.exists(sandbox_dir)  # and the sandbox directory is gone


def test_the_temporary_directory_is_removed_even_when_the_code_locks_it():
    code = "import os\nos.makedirs('locked/inner')\nos.chmod('locked', 0)\nprint(os.getcwd())"
    result = run_in_sandbox(code, "", FAST)
    assert result.passed
    assert not os.path.exists(result.stdout_tail.strip())


def test_the_code_never_runs_in_our_process(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the sandbox compiled or executed code in the calling process")

    monkeypatch.setattr(builtins, "exec", refuse)
    monkeypatch.setattr(builtins, "compile", refuse)
    code = textwrap.dedent(
        """
        import builtins, os
        builtins.CANVASLAB_SANDBOX_PROBE = 1
        FAST = None
        print(os.getpid())
        """
    )
    result = run_in_sandbox(code, "", FAST)
    monkeypatch.undo()
    assert result.passed
    assert int(result.stdout_tail) != os.getpid()
    assert not hasattr(builtins, "CANVASLAB_SANDBOX_PROBE")
    assert FAST.timeout_s == 5  # our module's global is untouched


def test_the_environment_is_empty_but_for_path(monkeypatch):
    monkeypatch.setenv("CANVASLAB_SECRET_TOKEN", "do-not-leak")
    result = run_in_sandbox("import os\nprint(sorted(os.environ))", "", FAST)
    names = set(eval(result.stdout_tail))  # noqa: S307 (a list literal printed by the child)
    assert "CANVASLAB_SECRET_TOKEN" not in names
    assert names <= {"PATH", "LC_CTYPE"}  # LC_CTYPE: Python's own locale coercion in the child


@pytest.mark.parametrize(
    "code",
    [
        "import sys\nsys.exit(0)",
        "import os\nos._exit(0)",
        "import unittest\nunittest.main(argv=['x'])",
    ],
)
def test_exiting_before_the_tests_is_not_a_pass(code):
    result = run_in_sandbox(code, "assert False", FAST)
    assert not result.passed


def test_a_main_block_in_the_answer_does_not_run():
    code = "def f():\n    return 1\n\nif __name__ == '__main__':\n    raise SystemExit(0)\n"
    result = run_in_sandbox(code, "assert f() == 1", FAST)
    assert result.passed


@pytest.mark.parametrize(
    "code",
    [
        "import os\nos.kill(os.getppid(), 9)",
        "import os\nos.fork()",
        "import subprocess\nsubprocess.run(['true'])",
        "import os\nos.system('true')",
        "import ctypes",
    ],
)
def test_processes_signals_and_ctypes_are_refused(code):
    result = run_in_sandbox(code, "", FAST)
    assert not result.passed
    assert "disabled in the canvaslab sandbox" in result.stderr_tail


def test_output_is_captured_and_truncated():
    limits = SandboxLimits(timeout_s=5, max_output_chars=100)
    result = run_in_sandbox("import sys\nprint('a' * 50000)\nprint('b' * 50000, file=sys.stderr)", "", limits)
    assert result.passed
    assert result.stdout_tail == "a" * 99 + "\n"
    assert result.stderr_tail == "b" * 99 + "\n"


def test_the_docstring_states_what_is_and_is_not_enforced():
    doc = sandbox.__doc__
    assert "NOT a security boundary" in doc
    for limit in ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_NPROC", "unshare --net"):
        assert limit in doc
