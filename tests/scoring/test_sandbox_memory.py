"""The memory a jail can hold, measured from the host while an answer pins all it can by every route
known, against the bound the package documents (``jail.memory_bound``)."""

from __future__ import annotations

import json
import shutil
import statistics
import textwrap
import threading
import time
from pathlib import Path

import pytest

from canvaslab.scoring.sandbox import SandboxLimits, run_tests
from canvaslab.scoring.sandbox.jail import memory_bound

MiB = 1024**2
LIMITS = SandboxLimits(timeout_s=50, cpu_time_s=30, memory_bytes=128 * MiB, max_processes=6, max_open_files=64,
                       tmp_bytes=8 * MiB, tmp_files=4096)
SLACK = 64 * MiB  # the host's own noise over a second or two, and the other (idle) jail's interpreter

# Runs in the candidate's jail. Routes the filter must deny are tried and their outcomes reported; the
# others are filled: /tmp (blocks, then empty files with long names until the inode limit or 4 s), then
# every process the limit allows, each holding its address space as single pages 1 GiB apart (page
# tables) or as plain heap, and its descriptors as stuffed socket pairs and pipes, more socket pairs
# in flight in AF_UNIX messages. The timeline (the host's monotonic clock) says when each phase held.
PINNER = r'''
import ctypes, errno, fcntl, mmap, os, socket, time

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
PAGE = mmap.PAGESIZE


def name_of(number):
    return errno.errorcode.get(number, str(number))


def by_libc(result):
    return "allowed" if result not in (-1, None) else name_of(ctypes.get_errno())


def by_python(call):
    try:
        call()
    except OSError as error:
        return name_of(error.errno)
    return "allowed"


def denied_routes():
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    outcomes = {
        "shmget": by_libc(libc.shmget(0, 64 << 20, 0o1600)),
        "memfd_create": by_python(lambda: os.memfd_create("pin")),
        "mq_open": by_libc(libc.mq_open(b"/canvaslab-pin", 0o102, 0o600, None)),
        "inotify_init1": by_libc(libc.inotify_init1(0)),
        "setsockopt(SO_SNDBUF)": by_python(lambda: unix.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)),
        "socket(AF_INET)": by_python(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
        "socket(AF_NETLINK)": by_python(lambda: socket.socket(16, socket.SOCK_RAW, 0)),
        "splice": by_libc(libc.splice(0, None, 1, None, 4096, 0)),
    }
    if os.uname().machine == "x86_64":
        context = ctypes.c_ulong(0)
        outcomes["io_setup"] = by_libc(libc.syscall(206, 4096, ctypes.byref(context)))
        outcomes["io_uring_setup"] = by_libc(libc.syscall(425, 8, ctypes.create_string_buffer(120)))
    unix.close()
    return outcomes


def fill_tmp(seconds):
    written = files = 0
    try:
        for index in range(1000):
            with open(f"/tmp/block{index}", "wb") as handle:
                handle.write(b"x" * (1 << 20))
            written += 1 << 20
    except OSError:
        pass
    stem = "/tmp/" + "n" * 200
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            for _ in range(500):
                os.close(os.open(f"{stem}{files}", os.O_CREAT | os.O_WRONLY, 0o600))
                files += 1
    except OSError as error:
        stopped = name_of(error.errno)
    else:
        stopped = "time"
    return {"bytes": written, "empty_files": files, "stopped": stopped}


def pin_page_tables():
    maps, address = 0, 1 << 40
    while True:
        got = libc.mmap(address, PAGE, 3, 0x22 | 0x100000, -1, 0)  # PRIVATE|ANONYMOUS|FIXED_NOREPLACE
        if got != address:
            return maps
        ctypes.memset(got, 1, 1)
        maps += 1
        address += 1 << 30


def pin_heap():
    blocks = []
    try:
        while True:
            blocks.append(b"\x01" * (4 << 20))
    except MemoryError:
        pass
    return blocks


def stuff(sock):
    sock.setblocking(False)
    for size in (65536, 4096, 1):
        try:
            while True:
                sock.send(b"x" * size)
        except OSError:
            pass


def stuffed_pair():
    a, b = socket.socketpair()
    stuff(a)
    stuff(b)
    return [a, b]


def stuffed_pipe():
    read, write = os.pipe()
    try:
        fcntl.fcntl(write, 1031, 1 << 20)  # F_SETPIPE_SZ: refused beyond the user's soft limit
    except OSError:
        pass
    os.set_blocking(write, False)
    try:
        while True:
            os.write(write, b"x" * 65536)
    except OSError:
        pass
    return [read, write]


def pin_descriptors():
    held, in_flight = [], 0
    try:
        carrier = socket.socketpair()
        while True:
            held.append(stuffed_pair())
            held.append(stuffed_pipe())
    except OSError:
        pass
    pairs = [kept for kept in held if type(kept[0]) is socket.socket]
    try:  # send stuffed pairs away (the kernel keeps them in flight), make new ones in their place
        while pairs:
            pair = pairs.pop()
            socket.send_fds(carrier[0], [b"x"], [s.fileno() for s in pair])
            in_flight += 2
            for s in pair:
                s.close()
            pairs.append(stuffed_pair())
    except OSError:
        pass
    return held, pairs, carrier, in_flight


def child(kind, ready, hold_s):
    reserve = bytearray(8 << 20)  # address space for what follows the page tables
    pinned = pin_page_tables() if kind == "page_tables" else len(pin_heap())
    del reserve
    kept = pin_descriptors()
    os.write(ready, f"{kind}:{pinned}:{kept[-1]}\n".encode())
    time.sleep(hold_s)
    os._exit(0)


def probe():
    timeline = {"start": time.monotonic()}
    denied = denied_routes()
    time.sleep(0.4)
    timeline["tmp_start"] = time.monotonic()
    tmp = fill_tmp(4.0)
    timeline["tmp_end"] = time.monotonic()
    time.sleep(0.6)
    read, write = os.pipe()
    children = 0
    for index in range(16):
        try:
            if os.fork() == 0:
                child("heap" if index == 2 else "page_tables", write, 2.5)
            children += 1
        except OSError:
            break
    os.close(write)
    kept = pin_descriptors()
    reports = b""
    while reports.count(b"\n") < children:
        chunk = os.read(read, 4096)
        if not chunk:
            break
        reports += chunk
    timeline["hold_start"] = time.monotonic()
    time.sleep(1.5)
    timeline["hold_end"] = time.monotonic()
    return {"timeline": timeline, "denied": denied, "tmp": tmp, "children": reports.decode().split(),
            "parent_in_flight": kept[-1]}
'''


def _used_bytes() -> int:
    """Memory in use on the host: all but free memory and file caches (tmpfs's pages, slab, page tables,
    socket buffers and anonymous memory all count; reclaimable slab too, which can only overstate)."""
    info = {}
    with open("/proc/meminfo") as handle:
        for line in handle:
            key, value = line.split(":")
            info[key] = int(value.split()[0]) * 1024
    return info["MemTotal"] - info["MemFree"] - info["Buffers"] - info["Cached"] + info["Shmem"]


def _our_cgroup_memory() -> Path | None:
    """The file holding our memory cgroup's usage (the jails are in it too), if there is one: less noisy
    than the host's memory, but blind to socket buffers, so used only where those are not pinned."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if path == "/":
            continue
        if "memory" in controllers.split(","):  # cgroup v1
            candidates = [Path(f"/sys/fs/cgroup/memory{path}/memory.usage_in_bytes")]
        elif controllers == "":  # cgroup v2, alone or beside v1
            candidates = [Path(f"/sys/fs/cgroup{root}{path}/memory.current") for root in ("", "/unified")]
        else:
            continue
        for candidate in candidates:
            if candidate.exists():
                return candidate
    return None


class Sampler(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.samples: list[tuple[float, int, int]] = []
        self.cgroup = _our_cgroup_memory()
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            ours = int(self.cgroup.read_text()) if self.cgroup else 0
            self.samples.append((time.monotonic(), _used_bytes(), ours))
            time.sleep(0.02)

    def between(self, start: float, end: float, ours: bool = False) -> list[int]:
        """The host's memory in use (or, with ``ours`` and where there is one, our cgroup's) in that time."""
        column = 2 if ours and self.cgroup else 1
        return [sample[column] for sample in self.samples if start <= sample[0] <= end]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_an_answer_that_pins_memory_by_every_route_stays_within_the_documented_bound():
    bound = memory_bound(LIMITS)
    sampler = Sampler()
    sampler.start()
    time.sleep(0.5)
    before = statistics.median(sampler.between(0, time.monotonic()))
    result = run_tests(textwrap.dedent(PINNER), "probe", "import json\nprint('REPORT' + json.dumps(probe()))",
                       limits=LIMITS)
    time.sleep(0.2)
    sampler.done.set()
    sampler.join()
    assert "REPORT" in result.tests_output, (result.failure, result.candidate_output[-1500:])
    report = json.loads(result.tests_output.split("REPORT", 1)[1].splitlines()[0])
    timeline = report["timeline"]

    # routes the filter closes
    assert set(report["denied"].values()) == {"EPERM"}, report["denied"]
    # /tmp: its blocks and its inodes (empty files stop at nr_inodes, not after hundreds of MiB)
    tmp_before = statistics.median(sampler.between(timeline["start"], timeline["tmp_start"], ours=True))
    tmp_rise = max(sampler.between(timeline["tmp_end"], timeline["tmp_end"] + 0.5, ours=True)) - tmp_before
    assert tmp_rise < bound["tmp"] + SLACK, (tmp_rise / MiB, report["tmp"])
    assert report["tmp"]["stopped"] == "ENOSPC" and report["tmp"]["empty_files"] < LIMITS.tmp_files, report["tmp"]
    # everything at once
    rise = max(sampler.between(timeline["hold_start"], timeline["hold_end"])) - before
    children = report["children"]
    print(f"held: {rise / MiB:.0f} MiB (bound {bound['total'] / MiB:.0f} MiB), /tmp {tmp_rise / MiB:.0f} MiB "
          f"(bound {bound['tmp'] / MiB:.0f} MiB); {report}")
    assert len(children) >= 2 and any(c.startswith("page_tables") for c in children), children
    assert rise > LIMITS.memory_bytes, rise / MiB  # the control: the answer did pin memory, and it was seen
    assert rise < bound["total"] + SLACK, ({k: v // MiB for k, v in bound.items()}, rise / MiB, report)
