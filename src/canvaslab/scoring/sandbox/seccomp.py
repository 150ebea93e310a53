"""The jails' system-call filter: what scoring code never needs is refused with EPERM (package docstring).

The filter allows by default and denies, with ``EPERM``, the calls listed below: kernel objects that no
namespace covers (keys, System V IPC, POSIX message queues), other processes (ptrace and its kin),
memory that escapes ``RLIMIT_AS`` (memfd, splice into pipes, io_uring and AIO rings, larger socket
buffers), sockets of any family but ``AF_UNIX``, namespaces and mounts, and the kernel's administrative
interfaces. ``clone3`` answers ``ENOSYS`` (its flags lie in memory a filter cannot read), so the C
library falls back to ``clone``, whose namespace flags are refused. System calls of another ABI than
the native one (i386 and x32 on x86_64) kill the process: libseccomp's filter checks the
architecture first.

It is built with libseccomp (``pyseccomp``) once per process and handed to bubblewrap as a compiled
BPF program (``bwrap --seccomp FD``), which loads it in the jail's init and in its command. Where it
cannot be built, ``SandboxUnavailable``.
"""

from __future__ import annotations

import errno
import tempfile
from functools import lru_cache

# Refused in every form. A name the local libseccomp does not know is an error for these.
DENIED = (
    # kernel objects namespaces do not cover
    "add_key", "keyctl", "request_key",
    "shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl",
    "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
    # other processes, the namespace's init included
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    # memory outside the process's address space (RLIMIT_AS)
    "memfd_create", "userfaultfd", "splice", "vmsplice", "tee", "io_setup", "io_submit",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "timer_create",
    "inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init",
    # namespaces, mounts, roots
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    # the kernel's own interfaces
    "perf_event_open", "bpf", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "open_by_handle_at", "name_to_handle_at", "acct", "swapon", "swapoff", "reboot", "quotactl", "syslog",
    "lookup_dcookie", "vhangup",
)  # fmt: skip
# Refused where the architecture has them and libseccomp knows them (newer calls, x86-only calls).
DENIED_WHERE_KNOWN = (
    "memfd_secret", "process_madvise", "quotactl_fd", "landlock_create_ruleset", "landlock_add_rule",
    "landlock_restrict_self", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
    "mount_setattr", "uselib", "iopl", "ioperm", "modify_ldt", "umount", "ipc",
)  # fmt: skip

AF_UNIX = 1
SOL_SOCKET = 1
SOCKET_BUFFER_OPTIONS = (7, 8, 32, 33)  # SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE
CLONE_NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
PERSONALITY_FLAGS = (0x0040000, 0x0400000)  # ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC
_INT = 0xFFFFFFFF  # an int argument: compare its low 32 bits only (the kernel ignores the rest)
MAX_BYTES = 4096  # the program goes through a pipe, written whole before bwrap starts (~1.2 KiB on x86_64)


class FilterUnavailable(Exception):
    """The filter cannot be built here (no libseccomp, or one that does not know a call)."""


@lru_cache(maxsize=1)
def bpf_program() -> bytes:
    """The compiled filter (BPF instructions for the native architecture); FilterUnavailable if none."""
    try:
        import pyseccomp as seccomp
    except Exception as error:  # noqa: BLE001 - ImportError, or RuntimeError/OSError: no libseccomp.so
        raise FilterUnavailable(f"pyseccomp/libseccomp unavailable: {' '.join(str(error).split())}") from None
    try:
        return _build(seccomp)
    except (OSError, ValueError) as error:
        raise FilterUnavailable(f"libseccomp could not build the filter: {' '.join(str(error).split())}") from None


def _build(seccomp) -> bytes:  # noqa: ANN001 - the pyseccomp module
    deny = seccomp.ERRNO(errno.EPERM)
    syscalls = seccomp.SyscallFilter(seccomp.ALLOW)
    syscalls.set_attr(seccomp.Attr.ACT_BADARCH, seccomp.KILL_PROCESS)
    for name in (*DENIED, *DENIED_WHERE_KNOWN):
        number = _number(seccomp, name)
        if number is None:
            if name in DENIED:
                raise FilterUnavailable(f"libseccomp does not know the system call {name}")
            continue
        syscalls.add_rule(deny, number)
    for name in ("socket", "socketpair"):  # any family but AF_UNIX (the high bits set count as another family)
        syscalls.add_rule(deny, name, seccomp.Arg(0, seccomp.NE, AF_UNIX))
    for option in SOCKET_BUFFER_OPTIONS:  # buffers stay at net.core.wmem_default: a known bound per socket
        syscalls.add_rule(deny, "setsockopt", seccomp.Arg(1, seccomp.MASKED_EQ, _INT, SOL_SOCKET),
                          seccomp.Arg(2, seccomp.MASKED_EQ, _INT, option))
    for flag in CLONE_NAMESPACE_FLAGS:
        syscalls.add_rule(deny, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    for flag in PERSONALITY_FLAGS:
        syscalls.add_rule(deny, "personality", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    if _number(seccomp, "clone3") is not None:
        syscalls.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as handle:
        syscalls.export_bpf(handle)
        handle.seek(0)
        program = handle.read()
    if not 0 < len(program) <= MAX_BYTES:
        raise FilterUnavailable(f"a filter of {len(program)} bytes (at most {MAX_BYTES})")
    return program


def _number(seccomp, name: str) -> int | None:  # noqa: ANN001
    """The native number of a system call, a libseccomp pseudo-number for a multiplexed one, None if unknown."""
    number = seccomp.resolve_syscall(seccomp.Arch.NATIVE, name)
    return None if number == -1 else number
