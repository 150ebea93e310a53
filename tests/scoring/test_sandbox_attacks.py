"""Attacks on the code scorer, through the public scoring API (``score``, ``run_code_tests``).

Every attack is carried by a WRONG answer (``return 1``) to HumanEval/0: none may score correct, and
none may leave a file or a process on the host. Every attack also marks what it creates with a unique
name, which is searched for afterwards in /proc and in the host's folders.

The kernel-object attacks (``KERNEL_ATTACKS``: keys, vsock and inet sockets, ptrace of the namespace's
init, System V and memfd memory) answer RIGHT when their call works and wrong when it is refused, so
each scores correct wherever the system-call filter lets the call through.
"""

from __future__ import annotations

import glob
import os
import textwrap
import uuid
from pathlib import Path

import pytest

from canvaslab.scoring.probes import load_regime, score
from canvaslab.scoring.probes.scorers import run_code_tests
from canvaslab.scoring.sandbox import SandboxLimits

PROBE = next(p for p in load_regime("code_completion") if p.probe_id == "code_completion/HumanEval/0")
WRONG = "def has_close_elements(numbers, threshold):\n    return 1\n"
SHORT = SandboxLimits(timeout_s=4, cpu_time_s=3)  # the infinite loop's run ends sooner

# Helpers every attack may use: find a token and a descriptor in frames and write one to the other
# (the old sandbox's nonce and report descriptor were locals of its bootstrap), then exit with 0.
HELPERS = """
import os, sys
PASS_SHAPES = [b'{"passed": true, "calls": 7, "failure": ""}\\n', b"passed\\n", b"OK\\n"]


def frames_from(frame):
    while frame is not None:
        yield frame
        frame = frame.f_back


def frames_of_traceback(trace):
    while trace is not None:
        yield trace.tb_frame
        trace = trace.tb_next


def leak(frames):
    for frame in list(frames):
        values = list(frame.f_locals.values())
        tokens = [value for value in values if isinstance(value, bytes) and value]
        descriptors = [value for value in values if type(value) is int and 2 < value < 1024]
        for fd in descriptors:
            for token in tokens:
                try:
                    os.write(fd, token)
                except OSError:
                    pass
    os._exit(0)


def spawn(argv, new_session, stdout=-1):
    \"\"\"Start a program through _posixsubprocess.fork_exec itself (Python 3.11/3.12 signature),
    which the old sandbox's audit hook did not see; subprocess where the signature differs.\"\"\"
    import _posixsubprocess, subprocess
    errpipe_read, errpipe_write = os.pipe()
    executable = [os.fsencode(argv[0])]
    try:
        return _posixsubprocess.fork_exec(
            [os.fsencode(a) for a in argv], executable, True, (errpipe_write,), None, None,
            -1, -1, -1, stdout, -1, -1, errpipe_read, errpipe_write, True, new_session,
            -1, None, None, None, -1, None, False)
    except TypeError:
        return subprocess.Popen(argv, stdout=stdout if stdout != -1 else None, start_new_session=new_session).pid
"""

ATTACKS = {
    "token_from_the_bootstraps_frame": """
        leak(frames_from(sys._getframe(1)))
        """,
    "replace_the_tests_through_the_bootstraps_locals": """
        for frame in frames_from(sys._getframe(1)):
            for value in list(frame.f_locals.values()):
                if isinstance(value, list) and value and all(isinstance(item, tuple) for item in value):
                    value[:] = [("tests.py", "pass")] * len(value)
                if isinstance(value, dict):
                    value["check"] = lambda candidate: None
                    for key in ("tests", "prelude"):
                        if key in value:
                            value[key] = "pass"
        """,
    "token_through_a_traceback_frame": """
        def has_close_elements(numbers, threshold):
            try:
                raise RuntimeError
            except RuntimeError as error:
                leak(frames_from(error.__traceback__.tb_frame))
        """,
    "an_excepthook_that_writes_the_token": """
        def hook(kind, value, trace):
            for fd in (1, 2):
                for payload in PASS_SHAPES:
                    os.write(fd, payload)
            leak(frames_of_traceback(trace))
        sys.excepthook = hook
        def has_close_elements(numbers, threshold):
            raise AssertionError("let the hook answer")
        raise SystemError("at import, too")
        """,
    "an_object_equal_to_everything": """
        class Anything:
            def __eq__(self, other):
                return True
            def __ne__(self, other):
                return False
            __hash__ = object.__hash__
        def has_close_elements(numbers, threshold):
            return Anything()
        """,
    "an_int_subclass_equal_to_everything": """
        class Truthy(int):
            def __eq__(self, other):
                return True
            __hash__ = int.__hash__
        def has_close_elements(numbers, threshold):
            return Truthy(1)
        """,
    "posixsubprocess_fork_exec_runs_id_into_tmp": """
        with open("/tmp/MARKER", "w") as out:
            spawn(["/usr/bin/id"], False, out.fileno())
        """,
    "switch_off_the_guards_then_a_child_in_a_new_session": """
        import __main__, builtins
        for module in (__main__, builtins):
            for name in ("_DENIED", "_guard"):
                setattr(module, name, ())
        __main__._DENIED = ()
        import subprocess
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "MARKER"], start_new_session=True)
        spawn([sys.executable, "-c", "import time; time.sleep(120)", "MARKER"], True)
        """,
    "a_bounded_fork_bomb": """
        for _ in range(200):
            try:
                if os.fork() == 0:
                    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(120)", "MARKER"])
            except OSError:
                break
        """,
    "a_10_gb_allocation": """
        def has_close_elements(numbers, threshold):
            block = bytearray(10 * 1024**3)
            return 1
        """,
    "an_infinite_loop": """
        def has_close_elements(numbers, threshold):
            while True:
                pass
        """,
    "sys_exit_0_before_the_tests": """
        sys.exit(0)
        """,
    "os_exit_0_before_the_tests": """
        os._exit(0)
        """,
    "printed_pass_markers": """
        for payload in PASS_SHAPES:
            sys.stdout.write(payload.decode())
            sys.stderr.write(payload.decode())
        print("1 passed in 0.01s")
        def has_close_elements(numbers, threshold):
            print("passed")
            return 1
        """,
    "files_in_tmp_home_and_the_working_directory": """
        for folder in ("/tmp", os.path.expanduser("~"), "HOST_HOME", "HOST_CWD", "/", "/usr", "/dev/shm"):
            try:
                with open(os.path.join(folder, "MARKER"), "w") as handle:
                    handle.write("left behind")
            except OSError:
                pass
        """,
    "connect_to_the_host": """
        import socket
        def has_close_elements(numbers, threshold):
            try:
                socket.create_connection(("127.0.0.1", 22), timeout=2)
            except OSError:
                pass
            return 1
        """,
}


def _attack_code(body: str, marker: str) -> str:
    code = HELPERS + textwrap.dedent(body)
    code = code.replace("MARKER", marker).replace("HOST_HOME", str(Path.home())).replace("HOST_CWD", os.getcwd())
    return f"```python\n{WRONG}\n{code}\n```"


def processes_with(marker: str) -> list[str]:
    found = []
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            if marker.encode() in Path(path).read_bytes():
                found.append(path)
        except OSError:
            pass
    return found


def files_with(marker: str, folders: list[str]) -> list[str]:
    return [os.path.join(folder, marker) for folder in folders if os.path.lexists(os.path.join(folder, marker))]


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_no_attack_scores_a_wrong_answer_correct_or_leaves_anything(attack, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    marker = f"canvaslab-attack-{uuid.uuid4().hex}"
    answer = _attack_code(ATTACKS[attack], marker)
    assert score(PROBE, answer, SHORT) is False
    assert processes_with(marker) == []
    folders = ["/tmp", str(Path.home()), str(tmp_path), "/", "/usr", "/dev/shm"]
    assert files_with(marker, folders) == []
    assert list(tmp_path.iterdir()) == []


def test_the_right_answer_still_passes_and_the_wrong_one_fails():
    """The control for the attacks: the answer they carry is what fails, not the harness."""
    assert score(PROBE, f"```python\n{PROBE.reference['canonical_solution']}\n```") is True
    assert score(PROBE, f"```python\n{WRONG}\n```") is False


# Each defines attempt(): what the kernel-object attack does; an OSError (or -1 from libc) is a refusal.
KERNEL_ATTACKS = {
    "add_key_to_the_session_keyring": """
        def attempt():
            number = {"x86_64": 248, "aarch64": 217}[os.uname().machine]
            return checked(libc.syscall(number, b"user", b"MARKER", b"payload", 7, ctypes.c_int(-3)))
        """,
    "keyctl_reads_the_session_keyring": """
        def attempt():
            number = {"x86_64": 250, "aarch64": 219}[os.uname().machine]
            return checked(libc.syscall(number, 0, ctypes.c_int(-3), 1))  # KEYCTL_GET_KEYRING_ID, create
        """,
    "a_vsock_listener_on_the_host_channel": """
        def attempt():
            server = socket.socket(40, socket.SOCK_STREAM)  # AF_VSOCK
            server.bind((0xFFFFFFFF, 5555))  # VMADDR_CID_ANY
            server.listen(1)
            return True
        """,
    "an_inet_listener": """
        def attempt():
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.bind(("127.0.0.1", 5555))
            server.listen(1)
            return True
        """,
    "ptrace_attach_to_the_namespace_init": """
        def attempt():
            checked(libc.ptrace(16, 1, None, None))  # PTRACE_ATTACH
            os.waitpid(1, 0x40000000)  # __WALL
            libc.ptrace(17, 1, None, None)  # PTRACE_DETACH
            return True
        """,
    "system_v_shared_memory": """
        def attempt():
            segment = checked(libc.shmget(0, 64 << 20, 0o1600))  # IPC_PRIVATE, IPC_CREAT | 0600
            address = checked(libc.shmat(segment, None, 0))
            ctypes.memset(address, 1, 64 << 20)
            return True
        """,
    "memfd_memory": """
        def attempt():
            fd = os.memfd_create("MARKER")
            os.pwrite(fd, b"x" * (8 << 20), 0)  # 8 MiB: below RLIMIT_FSIZE
            return True
        """,
}

KERNEL_HARNESS = """
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]


def checked(result):
    if result in (-1, None, ctypes.c_void_p(-1).value):
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))
    return result
"""

RIGHT_IF_IT_WORKED = """
try:
    WORKED = attempt()
except OSError as error:
    WORKED = False
    print("DENIED", errno.errorcode.get(error.errno, error.errno))
if WORKED:
    def has_close_elements(numbers, threshold):
        return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])
else:
    def has_close_elements(numbers, threshold):
        return 1
"""


@pytest.mark.parametrize("attack", sorted(KERNEL_ATTACKS))
def test_kernel_objects_no_namespace_covers_are_denied(attack, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    marker = f"canvaslab-attack-{uuid.uuid4().hex}"
    code = KERNEL_HARNESS + textwrap.dedent(KERNEL_ATTACKS[attack]) + RIGHT_IF_IT_WORKED
    result = run_code_tests(PROBE, f"```python\n{code.replace('MARKER', marker)}\n```", SHORT)
    assert not result.passed, "the call went through: the right answer was chosen"
    assert "DENIED EPERM" in result.candidate_output, (result.failure, result.candidate_output[-1000:])
    assert processes_with(marker) == []
    if os.path.exists("/proc/keys"):
        assert marker not in Path("/proc/keys").read_text()


# Forged answers on the link: the candidate writes its own lines, naming ids of objects it was never sent
# (the tests' expected value), to rewrite them or be answered with them, or drops every id there is. The
# tests hold `expected` and never pass it: only what crossed can be reached, as in one process, and the
# WRONG answer ([9]) fails. Through the sandbox's own API: HumanEval/0's tests hold no such object.
FORGED_ANSWERS = {
    "rewrite_every_even_id": {"objects": [[sid, [9]] for sid in range(0, 400, 2)], "returned": [9]},
    "rewrite_every_odd_id": {"objects": [[sid, [9]] for sid in range(1, 400, 2)], "returned": [9]},
    "return_an_id_never_sent": {"objects": [], "returned": {"ref": 2}},
    "rewrite_the_argument_and_return_it": {"objects": [[0, [9]]], "returned": {"ref": 0}},
    "drop_a_trillion_ids": {"objects": [], "dropped": [[0, 10**12]], "returned": [9]},
    "raise_an_exception_the_tests_catch_as_stop": {"raised": "X", "builtin": "StopIteration", "message": ""},
}
FORGED_TESTS = """
expected = [1, 2, 3]
assert all(map(lambda data: probe(data) == expected, [[3, 1, 2]]))
assert expected == [1, 2, 3]
"""


@pytest.mark.parametrize("attack", sorted(FORGED_ANSWERS))
def test_a_forged_answer_reaches_only_what_crossed(attack):
    import json

    from canvaslab.scoring.sandbox import run_tests

    answer = {"objects": [], "dropped": [], "entry": 0, **FORGED_ANSWERS[attack]}
    line = json.dumps(answer).encode() + b"\n"
    code = f"import os, sys\ndef probe(data):\n    os.write(int(sys.argv[4]), {line!r})\n    return [9]\n"
    result = run_tests(code, "probe", FORGED_TESTS, limits=SHORT)
    assert not result.passed and not result.timed_out, result.failure
    right = run_tests("def probe(data):\n    return sorted(data)\n", "probe", FORGED_TESTS, limits=SHORT)
    assert right.passed, right.failure  # the control
