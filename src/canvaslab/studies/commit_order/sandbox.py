"""Run untrusted, model-written Python (and the tests for it) in a limited child process.

The code scorers of the commit-order study must execute what a model generated. That code is never
executed in our own process: ``run_in_sandbox`` writes it into a fresh temporary directory and starts
a separate ``python -I -S`` process there, which a small bootstrap (``_BOOTSTRAP`` below) prepares
before it runs the code and then the tests.

What this module ENFORCES (each limit is a field of ``SandboxLimits``):

- a fresh interpreter: ``sys.executable -I -S`` (no PYTHON* variables, no user site, no
  site-packages: the standard library only), started in a new session so its whole process group can
  be killed; an environment with nothing but ``PATH``; stdin gives nothing to the code;
- a private working directory: a new temporary directory, removed afterwards with everything in it,
  so relative paths (``open("out.txt", "w")``) never land in the caller's working directory;
- wall-clock timeout (``timeout_s``, default 10 s): the process group is killed with SIGKILL;
- CPU time (``RLIMIT_CPU``, ``cpu_time_s``): the kernel sends SIGXCPU, then SIGKILL (reported as
  ``timed_out`` too). The kernel limits are set with ``resource.setrlimit`` in ``preexec_fn``;
- memory (``RLIMIT_AS``, ``memory_bytes``, default 512 MiB of address space): allocations beyond
  it fail, so a memory bomb ends in ``MemoryError``;
- file size (``RLIMIT_FSIZE``, ``max_file_bytes``): writes that would grow a file beyond it fail,
  the captured stdout and stderr included; no core dumps (``RLIMIT_CORE`` = 0); at most
  ``max_open_files`` descriptors (``RLIMIT_NOFILE``);
- processes (``RLIMIT_NPROC``, ``max_processes``): the child cannot start processes or threads once
  its user owns that many (the kernel counts every process of the user, and ignores the limit for
  root); the bootstrap also refuses ``os.fork``, ``os.system``, ``os.exec*``, ``os.posix_spawn``,
  ``subprocess`` and ``pty.spawn`` through an audit hook;
- no network, twice: the child runs inside a new, empty network namespace (``unshare --net``, or
  ``unshare --user --net`` for an unprivileged user) whenever that works here (detected once and
  cached; ``SandboxResult.network_namespace`` says whether it was used), AND the bootstrap replaces
  ``socket.socket`` (and the C-level ``_socket.socket``) and refuses every ``socket.*`` audit event,
  so no socket can be created even where namespaces are unavailable;
- no signals to other processes (``os.kill``, ``os.killpg``, ``signal.pthread_kill`` are refused),
  so the code cannot kill the process that scores it; ``ctypes`` is refused (it could undo the above);
- output: stdout and stderr go to files outside the sandbox directory and only their last
  ``max_output_chars`` characters are returned;
- a pass must be earned: ``passed`` is true only when the child exits with status 0 AND the bootstrap
  reports, through a private descriptor and a per-run nonce, that the tests ran to completion. Code
  that calls ``sys.exit(0)``/``os._exit(0)`` or ``unittest.main()`` before the tests does not pass;
  the code runs with ``__name__`` set to ``"solution"``, so its ``if __name__ == "__main__":`` block
  does not run.

What it does NOT enforce, and why this is NOT a security boundary:

- no filesystem isolation: by absolute path the code can read, and write, whatever the current user
  can (as root: everything). Run studies as an unprivileged user;
- the Python-level guards (socket replacement, audit hook) live in the same interpreter as the code;
  a determined attacker can get around them (e.g. through ``gc`` or a native extension). Only the
  kernel limits and the network namespace are outside its reach, and not even those when the child
  runs as root (root may raise its hard limits and re-enter the host's network namespace);
- processes that leave the process group (``setsid``) survive the final kill; ``RLIMIT_NPROC`` and
  the audit hook make them hard, not impossible, to create;
- no limits on CPU cores, disk space outside the file-size limit, or system calls (no seccomp).

It is a guard against accidents of model-written code (infinite loops, memory bombs, stray files,
network calls, early exits), not a jail for hostile code.
"""

from __future__ import annotations

import math
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import IO

# Runs first in the child: reads the nonce (stdin) and both sources, installs the guards, runs
# solution.py then tests.py in one namespace, and writes the nonce to the report descriptor only if
# both ran to their end. Sources are read before anything runs, so the code cannot rewrite the tests.
_BOOTSTRAP = r'''
import os, sys


def _no_network(*args, **kwargs):
    raise OSError("network access is disabled in the canvaslab sandbox")


def _disable_network():
    import socket, _socket
    for module in (socket, _socket):
        for name in ("socket", "SocketType", "create_connection", "create_server", "fromfd",
                     "socketpair", "getaddrinfo", "gethostbyname", "gethostbyname_ex"):
            if hasattr(module, name):
                setattr(module, name, _no_network)


_DENIED = ("socket.", "subprocess.", "os.system", "os.exec", "os.fork", "os.forkpty",
           "os.posix_spawn", "os.spawn", "os.kill", "os.killpg", "signal.pthread_kill",
           "pty.spawn", "ctypes.", "os.startfile")


def _guard(event, args):
    if event.startswith(_DENIED):
        raise PermissionError(f"{event} is disabled in the canvaslab sandbox")


def _read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _main():
    nonce = sys.stdin.buffer.read()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    report_fd = int(sys.argv[1])
    sources = [(name, _read(name)) for name in ("solution.py", "tests.py")]
    _disable_network()
    sys.addaudithook(_guard)
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        for name, source in sources:
            exec(compile(source, name, "exec"), namespace)
    except SystemExit as exit_request:
        print(f"canvaslab sandbox: the program exited ({exit_request.code!r}) before the tests completed",
              file=sys.stderr)
        sys.exit(3)
    sys.stdout.flush()
    os.write(report_fd, nonce)


_main()
'''


@dataclass(frozen=True)
class SandboxLimits:
    """The limits of one sandboxed run (module docstring: what each one does and does not stop)."""

    timeout_s: float = 10.0
    cpu_time_s: float = 10.0
    memory_bytes: int = 512 * 1024**2
    max_file_bytes: int = 16 * 1024**2
    max_processes: int = 32
    max_open_files: int = 256
    max_output_chars: int = 4000
    use_network_namespace: bool = True


@dataclass(frozen=True)
class SandboxResult:
    """What a sandboxed run did. ``passed`` = exit status 0 and the tests ran to their end."""

    passed: bool
    timed_out: bool
    returncode: int
    stdout_tail: str
    stderr_tail: str
    elapsed_s: float
    network_namespace: bool


def run_in_sandbox(code: str, tests: str = "", limits: SandboxLimits | None = None) -> SandboxResult:
    """Run ``code`` and then ``tests`` (same namespace) in a fresh limited child process."""
    limits = limits or SandboxLimits()
    prefix = network_namespace_prefix() if limits.use_network_namespace else ()
    workdir = Path(tempfile.mkdtemp(prefix="canvaslab-sandbox-"))
    try:
        _write_program(workdir, code, tests)
        command = [*prefix, sys.executable, "-I", "-S", "bootstrap.py"]
        return _run_program(command, workdir, limits, network_namespace=bool(prefix))
    finally:
        _remove_tree(workdir)


@lru_cache(maxsize=1)
def network_namespace_prefix() -> tuple[str, ...]:
    """The ``unshare`` command prefix that gives a child an empty network namespace here, or ``()``.

    Tried once per process: ``unshare --net`` (needs CAP_SYS_ADMIN, e.g. root), then
    ``unshare --user --net`` (an unprivileged user namespace, where the kernel allows it).
    """
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    for flags in (("--net",), ("--user", "--net")):
        candidate = (unshare, *flags)
        try:
            probe = subprocess.run([*candidate, "true"], capture_output=True, timeout=5, check=False)
        except (OSError, subprocess.SubprocessError):
            continue
        if probe.returncode == 0:
            return candidate
    return ()


def _write_program(workdir: Path, code: str, tests: str) -> None:
    (workdir / "bootstrap.py").write_text(_BOOTSTRAP, encoding="utf-8")
    (workdir / "solution.py").write_text(code, encoding="utf-8")
    (workdir / "tests.py").write_text(tests, encoding="utf-8")


def _run_program(
    command: list[str], workdir: Path, limits: SandboxLimits, network_namespace: bool
) -> SandboxResult:
    """Run the bootstrap with a fresh nonce; stdio and the report go to anonymous files outside
    ``workdir`` (files, not pipes: a leftover grandchild holding a pipe open could block the read)."""
    nonce = secrets.token_hex(16).encode()
    with ExitStack() as stack:
        stdin, stdout, stderr, report = (stack.enter_context(tempfile.TemporaryFile()) for _ in range(4))
        stdin.write(nonce)
        stdin.seek(0)
        returncode, timed_out, elapsed = _run_child(
            [*command, str(report.fileno())], workdir, limits, (stdin, stdout, stderr), report
        )
        report.seek(0)
        completed = report.read() == nonce
        timed_out = timed_out or returncode == -signal.SIGXCPU
        return SandboxResult(
            passed=completed and returncode == 0 and not timed_out,
            timed_out=timed_out,
            returncode=returncode,
            stdout_tail=_tail(stdout, limits.max_output_chars),
            stderr_tail=_tail(stderr, limits.max_output_chars),
            elapsed_s=elapsed,
            network_namespace=network_namespace,
        )


def _run_child(
    command: list[str],
    workdir: Path,
    limits: SandboxLimits,
    stdio: tuple[IO[bytes], IO[bytes], IO[bytes]],
    report: IO[bytes],
) -> tuple[int, bool, float]:
    """Start the child under the limits, wait up to the timeout, then kill its process group.

    Returns (returncode, timed_out, elapsed seconds). The group is killed even after a normal exit,
    so nothing the code left running in the background outlives the run.
    """
    stdin, stdout, stderr = stdio
    start = time.monotonic()
    child = subprocess.Popen(
        command,
        cwd=workdir,
        env={"PATH": os.environ.get("PATH", os.defpath)},
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        pass_fds=(report.fileno(),),
        start_new_session=True,
        preexec_fn=_limit_setter(limits),
    )
    timed_out = False
    try:
        child.wait(timeout=limits.timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _signal_group(child.pid)
    returncode = child.wait()
    elapsed = time.monotonic() - start
    _kill_group(child.pid)
    return returncode, timed_out, elapsed


def _limit_setter(limits: SandboxLimits) -> Callable[[], None]:
    """The ``preexec_fn``: applies the kernel limits in the forked child, just before ``exec``.

    Everything is computed here, in the parent, so the forked child only calls ``setrlimit``.
    (CPython warns that ``preexec_fn`` can deadlock in a multi-threaded parent: to score in
    parallel, use processes rather than threads.)
    """
    cpu_seconds = max(1, math.ceil(limits.cpu_time_s))
    wanted = (
        (resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 1),
        (resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes),
        (resource.RLIMIT_FSIZE, limits.max_file_bytes, limits.max_file_bytes),
        (resource.RLIMIT_NPROC, limits.max_processes, limits.max_processes),
        (resource.RLIMIT_NOFILE, limits.max_open_files, limits.max_open_files),
        (resource.RLIMIT_CORE, 0, 0),
    )

    def apply() -> None:
        for which, soft, hard in wanted:
            _, current_hard = resource.getrlimit(which)
            if current_hard != resource.RLIM_INFINITY:  # an unprivileged process cannot raise it
                soft, hard = min(soft, current_hard), min(hard, current_hard)
            resource.setrlimit(which, (soft, hard))

    return apply


def _signal_group(pgid: int) -> bool:
    """SIGKILL the process group once; False when it has no process left."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _kill_group(pgid: int) -> None:
    """After the child is reaped: kill whatever it left in its group, until nothing is left.

    A fork loop can add processes while a kill is delivered, hence the loop (bounded).
    """
    for _ in range(100):
        if not _signal_group(pgid):
            return
        time.sleep(0.005)


def _tail(handle: IO[bytes], max_chars: int) -> str:
    """The last ``max_chars`` characters of a captured stream (read from the end: it may be large)."""
    handle.seek(0, os.SEEK_END)
    size = handle.tell()
    handle.seek(max(0, size - 4 * max_chars))
    return handle.read().decode("utf-8", errors="replace")[-max_chars:]


def _remove_tree(path: Path) -> None:
    """Delete the sandbox directory even where the code made parts of it unreadable or read-only."""
    for root, dirs, _files in os.walk(path):
        for name in dirs:
            try:
                os.chmod(os.path.join(root, name), 0o700)
            except OSError:
                pass
    shutil.rmtree(path, ignore_errors=True)
