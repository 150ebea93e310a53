"""Bubblewrap jails for Python: how one is built, started, checked and killed (package docstring: why).

A jail is ``prlimit`` (kernel limits) becoming ``python -I -S -c <launch.py>`` (a private /tmp bounded
in bytes and inodes) becoming ``bwrap`` (namespaces, a read-only filesystem view, the system-call
filter of ``seccomp.py``) running ``python -I -S -c <inside.py>``: one process until bwrap starts the
namespace's init. As root, the chain is started under a fresh uid of its own, so the jail's processes
are an unprivileged host user that owns nothing; as an ordinary user they are that user, mapped to
65534 in a user namespace.
"""

from __future__ import annotations

import glob
import json
import os
import re
import secrets
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import IO

from canvaslab.errors import CanvaslabError
from canvaslab.scoring.sandbox import seccomp

INSIDE_SOURCE_PATH = Path(__file__).with_name("inside.py")
LAUNCH_SOURCE_PATH = Path(__file__).with_name("launch.py")
SANDBOX_UID = 65534  # the jail's uid as seen inside ("nobody")
_HOST_UIDS = (1_000_000_000, 2_000_000_000)  # as root: each jail's processes get a fresh uid from here
_NAMESPACES = ("--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session")
TOOL_TIMEOUT_S = 10.0  # each call of an outside tool while looking for the isolation (bwrap --help, ...)
SELF_CHECK_TIMEOUT_S = 30.0  # the self-check's jail, from its start to its report


class SandboxUnavailable(CanvaslabError):
    """OS isolation cannot be had here, so code is not scored (never run unprotected)."""


@dataclass(frozen=True)
class SandboxLimits:
    """The limits of one scoring run; each jail (candidate, tests) gets them."""

    timeout_s: float = 10.0  # wall clock for the whole run: then every process of both jails is killed
    cpu_time_s: int = 10  # RLIMIT_CPU per process
    memory_bytes: int = 512 * 1024**2  # RLIMIT_AS per process
    max_file_bytes: int = 16 * 1024**2  # RLIMIT_FSIZE: no file (or captured output) grows beyond it
    tmp_bytes: int = 64 * 1024**2  # size of the jail's private /tmp (a tmpfs)
    tmp_files: int = 4096  # inodes of that /tmp (files, folders, links): each holds kernel memory of its own
    max_processes: int = 8  # RLIMIT_NPROC: processes and threads of the jail's own uid (bwrap's two included)
    max_open_files: int = 256  # RLIMIT_NOFILE
    max_output_chars: int = 4000  # how much of each jail's output the result keeps
    max_message_bytes: int = 4 * 1024**2  # the largest answer the candidate may send for one call


def memory_bound(limits: SandboxLimits) -> dict[str, int]:
    """The most memory one jail can hold (bytes), route by route, with ``"total"``; a run has two jails.

    Every route is bounded by a kernel limit (the filter of ``seccomp.py`` closes the others: System V
    and POSIX shared memory, memfd, keys, io_uring and AIO rings, splice, larger socket buffers). Read
    from this kernel's settings; with the default limits and kernel defaults about 9.1 GiB plus 4% of
    RAM, 4 GiB of it page tables: a process can map 65530 single pages 1 GiB apart, two page-table
    pages each, in 256 MiB of address space (tests/scoring/test_sandbox_memory.py)."""
    page = os.sysconf("SC_PAGE_SIZE")
    processes, descriptors = limits.max_processes, limits.max_open_files
    bound = {
        # RLIMIT_AS: heap, stacks, mapped files, copies on write, huge pages: all of a process's memory
        "address_space": processes * limits.memory_bytes,
        # a page-table page and a page-middle-directory page for each mapped page (counted by RLIMIT_AS) in
        # a mapping of its own, up to vm.max_map_count mappings; whole mappings need 1/512 of their size
        "page_tables": processes * (2 * page * min(_sysctl("vm/max_map_count", 65530), limits.memory_bytes // page)
                                    + limits.memory_bytes // 256),
        # per process: task, kernel stack, descriptor table, upper page tables, its seccomp filter
        "processes": processes * 2 * 1024**2,
        # a socket's send buffer (net.core.wmem_default: SO_SNDBUF is denied), a pipe's or epoll's share:
        # open descriptors of every process, and as many more in flight in AF_UNIX messages
        "descriptors": (processes + 1) * descriptors * 2 * _sysctl("net/core/wmem_default", 212992),
        # pipes grown beyond their default (F_SETPIPE_SZ): fs.pipe-user-pages-soft pages per user
        "pipes": page * _sysctl("fs/pipe-user-pages-soft", 16384),
        # epoll watches: fs.epoll.max_user_watches per user (4% of low memory, the kernel's own choice)
        "epoll_watches": 200 * _sysctl("fs/epoll/max_user_watches", os.sysconf("SC_PHYS_PAGES") * page // 25 // 200),
        # the private /tmp: its blocks, and an inode, a dentry and xattr space for each of its inodes
        "tmp": limits.tmp_bytes + limits.tmp_files * 4096,
    }
    bound["total"] = sum(bound.values())
    return bound


def _sysctl(name: str, default: int) -> int:
    try:
        return int(Path("/proc/sys", name).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return default


@dataclass(frozen=True)
class Isolation:
    """What a jail is made of on this machine (found and self-checked once: ``require_isolation``)."""

    bwrap: str
    bwrap_version: str
    prlimit: str
    python: str
    python_version: str
    filesystem: tuple[str, ...]
    setpriv: str | None  # as root: the tool that starts bwrap under a fresh uid
    seccomp_bpf: bytes  # the compiled system-call filter (seccomp.bpf_program)

    def command(self, argv: list[str], limits: SandboxLimits, info_fd: int, seccomp_fd: int) -> list[str]:
        """The jail's command line. The kernel limits are set first, so bwrap and the namespace's init
        have them too: a jail's process that writes into the init's memory (/proc/1/mem: same user) gains
        no memory, process or CPU time the others lack."""
        cpu = max(1, int(limits.cpu_time_s))
        processes = limits.max_processes + (0 if self.setpriv else _processes_of_our_user())
        kernel_limits = [
            f"--cpu={cpu}:{cpu + 1}",
            f"--as={limits.memory_bytes}:{limits.memory_bytes}",
            f"--fsize={limits.max_file_bytes}:{limits.max_file_bytes}",
            f"--nproc={processes}:{processes}",
            f"--nofile={limits.max_open_files}:{limits.max_open_files}",
            "--core=0:0",
            "--msgqueue=0:0",  # POSIX message queues (their calls are denied too)
            "--sigpending=1024:1024",  # queued signals, each a little kernel memory
        ]
        return [
            *_host_user(self.setpriv), self.prlimit, *kernel_limits, "--",
            self.python, "-I", "-S", "-c", _launch_source(), str(limits.tmp_bytes), str(limits.tmp_files),
            self.bwrap, *_NAMESPACES, "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
            "--hostname", "sandbox", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
            *self.filesystem,
            "--bind", "/tmp", "/tmp", "--chdir", "/tmp", "--remount-ro", "/",  # /tmp: launch.py's bounded tmpfs
            "--seccomp", str(seccomp_fd), "--info-fd", str(info_fd),
            "--", self.python, "-I", "-S", "-u", "-X", "utf8", "-c", _inside_source(), *argv,
        ]  # fmt: skip

    def start(self, argv: list[str], limits: SandboxLimits, output: IO[bytes], pass_fds: tuple[int, ...]) -> Jail:
        """Start a jail running inside.py's ``argv``; stdout and stderr go to ``output``."""
        info_read, info_write = os.pipe()
        filter_read, filter_write = os.pipe()  # bwrap reads the filter to its end: the write end is closed first
        try:
            os.write(filter_write, self.seccomp_bpf)  # at most a page (seccomp.MAX_BYTES): within any pipe's buffer
            os.close(filter_write)
            filter_write = -1
            process = subprocess.Popen(
                self.command(argv, limits, info_write, filter_read),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                pass_fds=(*pass_fds, info_write, filter_read),
                env={"PATH": "/usr/bin:/bin"},
            )
        finally:
            for fd in (info_write, filter_read, filter_write):
                if fd >= 0:
                    os.close(fd)
        return Jail(process, os.fdopen(info_read, "rb"))


class Jail:
    """A started jail. ``kill`` ends its whole PID namespace and returns once nothing of it is left.

    ``attach`` (reading the namespace init's pid from bwrap) is separate from the start, so several
    jails can be started before waiting for any of them to be set up; ``kill`` attaches if needed.
    """

    def __init__(self, process: subprocess.Popen[bytes], info: IO[bytes]):
        self.process = process
        self.info: IO[bytes] | None = info
        self.init_pidfd: int | None = None

    def attach(self, timeout_s: float = 10.0) -> None:
        """Take a pidfd of the namespace's init, while bwrap (its parent) is not yet reaped."""
        if self.info is None:
            return
        with self.info:
            if self.process.returncode is None:
                self.init_pidfd = _namespace_init(self.process, self.info, deadline=time.monotonic() + timeout_s)
        self.info = None

    def wait(self, timeout_s: float) -> bool:
        """True when the jail ended by itself within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        self.attach(min(10.0, max(0.0, timeout_s)))
        timeout_s = deadline - time.monotonic()
        try:
            self.process.wait(timeout=max(0.0, timeout_s))
        except subprocess.TimeoutExpired:
            return False
        return True

    def kill(self) -> int:
        """SIGKILL the namespace's init: the kernel then kills every process in the namespace (a
        ``setsid`` child included) before the init has exited, which is what this waits for. bwrap, our
        child, cannot be waited for instead: it returns as soon as the jail's command ends, while the init
        may still be killing the rest (a run's process then outlived it, seen in CI)."""
        self.attach()
        if self.init_pidfd is not None:
            try:
                signal.pidfd_send_signal(self.init_pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            select.select([self.init_pidfd], [], [], 10)  # a pidfd turns readable once its process has exited
            os.close(self.init_pidfd)
            self.init_pidfd = None
        elif self.process.poll() is None:  # no init known (bwrap never reported one): bwrap goes, the rest with it
            self.process.kill()
        try:
            return self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # bwrap itself stuck: --die-with-parent ends the rest
            self.process.kill()
            return self.process.wait()

    def __enter__(self) -> Jail:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def _namespace_init(process: subprocess.Popen[bytes], info: IO[bytes], deadline: float) -> int | None:
    """A pidfd of the PID namespace's init (bwrap reports its pid on ``--info-fd``); None when the jail
    failed to start or already ended. The pid is checked to be bwrap's child after the pidfd is opened,
    so a pid reused in between cannot be signalled by mistake."""
    data = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([info], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(info.fileno(), 4096) if ready else b""
        data += chunk
        if not chunk:
            break
        try:
            pid = int(json.loads(data)["child-pid"])
        except (ValueError, KeyError, TypeError):
            continue
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return None
        if _parent_pid(pid) == process.pid:
            return pidfd
        os.close(pidfd)
        return None
    return None


def _parent_pid(pid: int) -> int | None:
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat_line.rsplit(")", 1)[1].split()[1])


def _processes_of_our_user() -> int:
    """Processes and threads of our real uid (RLIMIT_NPROC counts them all): as an ordinary user, the jail
    may start ``max_processes`` beyond those running when it starts."""
    uid, count = str(os.getuid()), 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = dict(line.split(":", 1) for line in Path(entry.path, "status").read_text().splitlines())
            except (OSError, ValueError):
                continue
            if fields.get("Uid", "").split()[:1] == [uid]:
                count += int(fields.get("Threads", "1"))
    return count


def _host_user(setpriv: str | None) -> list[str]:
    """As root, the jail is started by ``setpriv`` under a fresh unprivileged uid (and gid, no groups), so
    nothing in the jail is root on the host, and its process count (RLIMIT_NPROC) is its own. (setpriv
    rather than Popen's ``user=``: that makes CPython fork instead of vfork, ~0.1 s for a process that
    has imported torch.)"""
    if setpriv is None:
        return []
    uid = _HOST_UIDS[0] + secrets.randbelow(_HOST_UIDS[1] - _HOST_UIDS[0])
    return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


@lru_cache(maxsize=1)
def _inside_source() -> str:
    return INSIDE_SOURCE_PATH.read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _launch_source() -> str:
    return LAUNCH_SOURCE_PATH.read_text(encoding="utf-8")


# --- finding and checking the isolation ---------------------------------------------------------------


@lru_cache(maxsize=1)
def require_isolation() -> Isolation:
    """The isolation of this machine, self-checked once per process; SandboxUnavailable if none."""
    isolation = _find_isolation()
    problems = _self_check(isolation)
    if problems:
        raise SandboxUnavailable(f"code scoring refused: the sandbox is not isolated here ({'; '.join(problems)})")
    return isolation


def _find_isolation() -> Isolation:
    bwrap, prlimit = shutil.which("bwrap"), shutil.which("prlimit")
    if bwrap is None:
        raise SandboxUnavailable("code scoring refused: bubblewrap is not installed (apt-get install bubblewrap)")
    if prlimit is None:
        raise SandboxUnavailable("code scoring refused: prlimit is not installed (apt-get install util-linux)")
    try:
        bpf = seccomp.bpf_program()
    except seccomp.FilterUnavailable as error:
        raise SandboxUnavailable(f"code scoring refused: no system-call filter ({error}; "
                                 "apt-get install libseccomp2, pip install 'canvaslab[sandbox]')") from None
    usage = _tool_output([bwrap, "--help"])
    version = _tool_output([bwrap, "--version"]).strip()
    missing = [flag for flag in ("--disable-userns", "--info-fd", "--seccomp") if flag not in usage]
    if missing:
        raise SandboxUnavailable(f"code scoring refused: {version or bwrap} lacks {', '.join(missing)} "
                                 "(bubblewrap >= 0.8 is needed)")
    as_root = os.geteuid() == 0
    setpriv = shutil.which("setpriv") if as_root else None
    if as_root and setpriv is None:
        raise SandboxUnavailable("code scoring refused: setpriv is not installed (apt-get install util-linux)")
    python, prefix = _interpreter(as_root)
    version_text = _tool_output([python, "-I", "-S", "-c", "import sys; print(sys.version.split()[0])"]).strip()
    return Isolation(bwrap, version, prlimit, python, version_text, tuple(_filesystem(prefix)), setpriv, bpf)


def _tool_output(argv: list[str]) -> str:
    """What a tool prints on stdout, given ``TOOL_TIMEOUT_S``; a hang (or a tool that cannot start) is
    SandboxUnavailable. The tool runs in a session of its own, which is killed whole on a hang."""
    try:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    except OSError as error:
        raise SandboxUnavailable(f"code scoring refused: cannot run {argv[0]} ({error.strerror})") from None
    try:
        return process.communicate(timeout=TOOL_TIMEOUT_S)[0]
    except subprocess.TimeoutExpired:
        _kill_session(process)
        raise SandboxUnavailable(f"code scoring refused: `{' '.join(argv[:2])}` did not answer within "
                                 f"{TOOL_TIMEOUT_S:g} s") from None


def _kill_session(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.kill()
    process.communicate()


def _interpreter(as_root: bool) -> tuple[str, str]:
    """The Python the jails run, and the prefix to show them: ours, or (as root, when ours lies where
    the jail's unprivileged user cannot read it, e.g. pyenv under /root) the system's of our version."""
    ours = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    prefix = os.path.realpath(sys.base_prefix)
    if ours.startswith(prefix + os.sep) and (not as_root or _readable_by_all(prefix)):
        return ours, prefix
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if os.access(system, os.X_OK) and _readable_by_all("/usr"):
        return system, "/usr"
    raise SandboxUnavailable(f"code scoring refused: the sandbox's user cannot read {ours}, and there is no {system}")


def _readable_by_all(path: str) -> bool:
    """Every directory from / to ``path`` can be entered by any user, and ``path`` read."""
    current = Path(path)
    for directory in (current, *current.parents):
        mode = os.stat(directory).st_mode
        if not mode & stat.S_IXOTH:
            return False
    return bool(os.stat(current).st_mode & stat.S_IROTH)


def _filesystem(prefix: str) -> list[str]:
    """The jail's view: /usr (and the top-level links or folders into it), the interpreter's prefix,
    the loader's cache, all read-only; no other file of the host. Package folders are hidden (-S does
    not use them; a dataset installed there, HumanEval's, would hand out the reference solutions)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    roots = ["/usr"]
    if not prefix.startswith("/usr/") and prefix != "/usr":
        for parent in reversed(Path(prefix).parents[:-1]):
            args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", prefix, prefix]
        roots.append(prefix)
    for folder in _package_folders(roots):
        args += ["--tmpfs", folder, "--remount-ro", folder]
    return [*args, "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"]  # /dev/shm: no unbounded tmpfs


def _package_folders(roots: list[str]) -> list[str]:
    patterns = ("lib/python3*/site-packages", "lib/python3*/dist-packages", "lib/python3/dist-packages",
                "local/lib/python3*/site-packages", "local/lib/python3*/dist-packages")
    found = {path for root in roots for pattern in patterns for path in glob.glob(os.path.join(root, pattern))}
    return sorted(path for path in found if os.path.isdir(path) and not os.path.islink(path))


def _self_check(isolation: Isolation) -> list[str]:
    """Start one jail and compare what it sees with what it must see; the problems found."""
    limits = SandboxLimits(timeout_s=SELF_CHECK_TIMEOUT_S)
    with tempfile.NamedTemporaryFile(prefix="canvaslab-host-") as host_file, tempfile.TemporaryFile() as output:
        # The host's temporary file shows whether the jail's /tmp is the host's.
        report, said, ended = _jail_report(isolation, limits, _host_paths(isolation, host_file.name), output)
    if report is None:
        last = said.strip().splitlines()[-1:] or ["no output"]
        how = "could not start a jail" if ended else f"gave no jail's report within {limits.timeout_s:g} s"
        return [f"{isolation.bwrap} {how}: {last[0]}"]
    return _problems(report, limits)


def _host_paths(isolation: Isolation, host_file: str) -> list[str]:
    """Paths of the host the jail must not see; those the jail has of its own (its /tmp, /usr, the
    folders leading to the interpreter) are left out, as they exist there whatever the host holds."""
    candidates = {str(Path.cwd()), str(Path.home()), sys.prefix, str(INSIDE_SOURCE_PATH.parent), host_file,
                  "/etc/passwd", "/etc/shadow", "/root", "/home", "/work", "/var", "/run"}
    own = ("/tmp", "/usr", "/proc", "/dev")
    ancestors = {str(parent) for parent in Path(isolation.python).parents}
    return sorted(path for path in candidates
                  if path not in ancestors and not any(path == o or path.startswith(o + "/") for o in own)
                  or path == host_file)


def _jail_report(isolation: Isolation, limits: SandboxLimits, host_paths: list[str],
                 output: IO[bytes]) -> tuple[dict | None, str, bool]:
    """The self-check jail's report (None if none), its last output, and whether it ended in time."""
    deadline = time.monotonic() + limits.timeout_s
    report_read, report_write = os.pipe()
    try:
        jail = isolation.start(["selfcheck", str(report_write), json.dumps(host_paths)], limits, output,
                               (report_write,))
    finally:
        os.close(report_write)
    with jail, os.fdopen(report_read, "rb") as report_file:
        ended = jail.wait(deadline - time.monotonic())
        report_bytes = report_file.read() if ended else b""
    output.seek(0)
    said = output.read()[-300:].decode("utf-8", errors="replace")
    try:
        return json.loads(report_bytes), said, ended
    except ValueError:
        return None, said, ended


def _problems(report: dict[str, object], limits: SandboxLimits) -> list[str]:
    expected_version = list(sys.version_info[:2])
    tmp_options = str(report["tmp_options"]).split(",")
    denied: dict[str, str] = report["denied"]  # type: ignore[assignment]
    allowed = sorted(call for call, outcome in denied.items() if outcome != "EPERM")
    checks = [
        (report["version"] == expected_version, f"python {report['version']} inside, {expected_version} here"),
        (report["uid"] == SANDBOX_UID, f"uid {report['uid']} inside"),
        (all(re.fullmatch("0+", cap) for cap in report["capabilities"]), "capabilities left"),  # type: ignore
        (report["no_new_privs"] == "1", "no_new_privs not set"),
        (report["interfaces"] == ["lo"], f"network interfaces {report['interfaces']}"),
        (not report["visible_host_paths"], f"host paths visible: {report['visible_host_paths']}"),
        (report["writable"] == ["/tmp"], f"writable: {report['writable']}"),
        (report["nested_user_namespace"] is False, "user namespaces can be created inside"),
        (report["seccomp"] == "2", f"no system-call filter (Seccomp: {report['seccomp']})"),
        (len(denied) >= 3 and not allowed, f"the filter does not deny {allowed or 'its calls'}"),
        (f"nr_inodes={limits.tmp_files}" in tmp_options, f"/tmp is not limited in inodes ({report['tmp_options']})"),
    ]
    return [problem for ok, problem in checks if not ok]
