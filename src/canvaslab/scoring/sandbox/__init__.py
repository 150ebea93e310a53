"""Score model-written code under OS isolation, with a verdict the code cannot forge.

The code scorers of the commit-order study must run what a model wrote. That code is hostile input:
it may try to be scored correct without being correct, or to harm the machine. ``run_tests`` runs
one probe's tests against it in two bubblewrap jails (``jail``), joined by two pipes:

- the CANDIDATE jail runs the model's code and a small server (``inside.CandidateServer``) that calls
  the entry point with arguments it is sent and sends back the return value, or the exception raised,
  as plain data (JSON of None, bool, int, float, str, list, tuple, set, frozenset, dict, nothing else:
  ``inside.to_plain``). This process holds no test, no expected value, no token: there is nothing in
  it worth stealing or forging;
- the TESTS jail runs only trusted code: the probe's test source, unchanged (HumanEval's
  ``check(candidate)`` with its asserts, loops, random inputs and helper functions; our
  ``assert f(x) == y`` lines), after the trusted prelude (HumanEval's prompt, whose helpers such as
  ``poly`` the tests use), with the entry point's name bound to a proxy that makes each call a round
  trip to the candidate jail. Values coming back are rebuilt as exact builtin types
  (``inside.from_plain``), so the comparisons the tests make are the builtins' own. The lists, sets,
  dicts and NaNs that cross are shared as one process shares objects (``inside.Mirror``): an argument
  the candidate mutates, before returning or raising, is mutated in the tests' own object; an argument
  it returns is the tests' object itself; an object passed twice is one object to the candidate, in
  one call or in two; an object either side keeps shows the other side's later changes; a NaN is one
  object on both sides exactly when it is one. An exception comes back as its nearest built-in class
  (a test may expect one: the candidate's subclass of ValueError is a ValueError; SystemExit,
  KeyboardInterrupt and the candidate's own BaseExceptions pass ``except Exception``, as in one
  process), except ``StopIteration`` and ``StopAsyncIteration``, which would quietly end a test's loop
  over ``map()``: those, like an Exception of the candidate's own, become ``CandidateRaised``. Its
  verdict goes to a descriptor only this process reads;
- this process decides: a pass is a verdict of ``passed`` from the tests' jail that exited 0 before
  the time limit, with no broken link (the candidate ended, answered garbage, returned something
  that is not plain data, or answered more than ``max_message_bytes``; or the tests passed something
  that is not plain data).

Because the tests run whole in the trusted jail, no test needs to be taken apart into (call,
expected) pairs, and every kind of test is as unforgeable as the simplest one: the candidate can
only choose the plain values its calls return and change, in place, the objects it was given or
returned, as it could in one process. A test that needs more from the candidate (an object with
methods, a generator, a global other than the entry point) fails: the sandbox errs towards "not
correct". Every reference solution of the probe suite passes (164 HumanEval, 55 code-synthesis tasks:
tests/scoring/test_probes.py).

Differences from plain Python (one process running the candidate's code, then the tests, as
HumanEval's execution.py runs ``check(candidate)``): each is pinned by a test in
tests/scoring/test_sandbox_semantics.py, beside the constructions that agree (exceptions, arguments
mutated in place, identity, aliasing within and across calls, NaN, -0.0, large ints, bool and int,
tuple and list, the entry point rebound by the candidate). Where the verdicts differ the sandbox
fails what plain Python passes, except for a test of ``is not`` on an immutable value and for the
standard-library dicts (the last):

- identity of immutable values: a str, int, float other than NaN, tuple or frozenset crosses by
  value, so ``candidate(s) is s`` is False and ``is not`` True (Python leaves their identity to the
  implementation: equal values may or may not be one object);
- a new value that contains itself or is nested deeper than 100 levels does not cross, nor does a
  value of any other type (the candidate's classes, a namedtuple, a generator, bytes); an argument
  of such a type fails the run, rather than raise a TypeError a test might expect;
- StopIteration from the candidate is ``CandidateRaised``: in plain Python it quietly ends the
  ``map()`` a test loops over, so that ``assert all(map(candidate, xs))`` passes;
- an exception's message comes prefixed ("the candidate raised ValueError: ..."), and the class of
  a subclass of a built-in exception is that built-in;
- the candidate and the tests share no global and no module: a candidate that replaces
  ``math.isclose`` or a helper of the prompt changes nothing the tests use;
- ``Counter``, ``OrderedDict`` and ``defaultdict`` cross as plain dicts (the candidate gets a dict
  for one the tests pass, and what it changes there is written into the tests' own): one the
  candidate returns arrives as a dict, whose type, repr, methods, missing keys and equality are a
  dict's. Where a test compares the answer with an ``OrderedDict``, an ``OrderedDict`` in another
  order passes here and fails in plain Python (likewise ``!=`` against a ``Counter``, which ignores
  zero counts).

Why known attacks fail (each is a test in tests/scoring/test_sandbox.py):
a token read from a frame (``sys._getframe``, a traceback) or the harness's locals: there is none,
and the tests are in another process; replacing the tests: they are not in the candidate's process;
``sys.excepthook``, ``os._exit(0)``, ``sys.exit(0)``, printing "passed": the verdict is not the
candidate's exit status or output; an object whose ``__eq__`` is always true, a subclass of int or
str: not plain data, refused; switching off a guard flag (``__main__._DENIED``): the guards are the
kernel's, outside the process.

What each jail ENFORCES (bubblewrap flags, a system-call filter and kernel limits, ``jail.Isolation.command``):

- its own user, PID, network, IPC, UTS and cgroup namespaces (``--unshare-all --unshare-user``); no
  network but a loopback of its own; no further user namespaces (``--disable-userns``), so it cannot
  gain capabilities in a nested one or mount anything;
- an unprivileged user: uid 65534 inside; as root, the jail is started under a fresh uid of its own
  (1e9..2e9) with no groups, so nothing in the jail is root on the host; no capabilities,
  no_new_privs (set by bwrap), a new session (``--new-session``: no terminal injection);
- a seccomp filter (``seccomp.py``, built with libseccomp and loaded by bwrap, ``--seccomp FD``, in the
  jail's command and in its namespace's init) that denies with EPERM what scoring code never needs:
  the kernel's keys (``add_key``, ``keyctl``, ``request_key``); other processes (``ptrace``,
  ``process_vm_readv``/``writev``, ``pidfd_getfd``, ``kcmp``); System V IPC (``shm*``, ``msg*``,
  ``sem*``) and POSIX message queues; ``memfd_create``, ``userfaultfd``, ``splice``, ``vmsplice``,
  ``tee``, AIO and io_uring, ``timer_create``, inotify and fanotify; sockets of any family but
  ``AF_UNIX`` (``socket``, ``socketpair``: no AF_INET, AF_VSOCK, netlink...) and larger socket buffers
  (``SO_SNDBUF``, ``SO_RCVBUF``); ``mount``, ``umount2``, ``pivot_root``, ``chroot``, ``unshare``,
  ``setns``, the new mount API and ``clone`` with a namespace flag (``clone3`` answers ENOSYS, so the
  C library falls back to ``clone``); ``bpf``, ``perf_event_open``, kernel modules, ``kexec``,
  ``open_by_handle_at``, ``name_to_handle_at``, ``acct``, ``swapon``/``swapoff``, ``reboot``,
  ``quotactl``, ``syslog``, landlock, and ``personality`` turning off address randomisation. A call of
  another ABI (i386, x32) kills the process. A denied call fails the answer; scoring goes on;
- a read-only view of /usr (the interpreter and its libraries, with /bin, /lib... as on the host),
  the interpreter's prefix when it lies elsewhere, and /etc/ld.so.cache; nothing else of the host
  (no /etc/passwd, /root, /home, /work, the working directory or the host's /tmp); the folders of
  installed packages under them hidden behind empty read-only tmpfs; ``python -I -S`` (standard
  library only, no environment variables: ``--clearenv``);
- one writable place: its own /tmp, a tmpfs of ``tmp_bytes`` and ``tmp_files`` inodes (mounted by
  ``launch.py`` in a user and mount namespace of its own, as bwrap's ``--tmpfs`` takes no inode
  limit); HOME points there; the root is remounted read-only. Files written there vanish with the jail;
- kernel limits set by ``prlimit`` before bwrap starts, so the namespace's init has them too: CPU time
  (``RLIMIT_CPU``), address space (``RLIMIT_AS``: a 10 GB allocation fails), file size
  (``RLIMIT_FSIZE``), processes and threads (``RLIMIT_NPROC``, counted for the jail's own uid: a fork
  bomb stops there; as an ordinary user, beyond the user's processes at the start), open files
  (``RLIMIT_NOFILE``), no core dumps, no POSIX message queues, 1024 queued signals;
- memory, bounded in fact (``jail.memory_bound``, route by route, from the limits and the kernel's
  settings): per process, ``memory_bytes`` of address space and the page tables it can need (a page
  table and a middle directory, 8 KiB, per page mapped on its own, up to ``vm.max_map_count``
  mappings); 2 x ``net.core.wmem_default`` per open descriptor and as many more in flight; the user's
  pipe pages (``fs.pipe-user-pages-soft``) and epoll watches (``fs.epoll.max_user_watches``, 4% of
  RAM); ``tmp_bytes`` plus 4 KiB per inode of /tmp. With the default limits and kernel defaults:
  4 GiB of address space, 4 GiB of page tables, 0.9 GiB of socket buffers, 64 MiB of pipes, 80 MiB
  of /tmp: about 9.1 GiB plus 4% of RAM per jail, twice that for a run's two jails.
  An answer that pins memory by every route known (tests/scoring/test_sandbox_memory.py) stays
  below it, measured from the host;
- a wall-clock limit for the whole run, after which, and after every run, the init of each jail's
  PID namespace is killed: the kernel then kills every process in the namespace, children started
  in a new session included, before the init exits, and the run returns only once it has (bwrap
  itself may return earlier). If this process dies, ``--die-with-parent`` takes the jails with it.

Where isolation cannot be had (no ``bwrap`` or ``prlimit``, no libseccomp or ``pyseccomp``, bubblewrap
older than 0.8, user namespaces refused, an outside tool that does not answer within
``jail.TOOL_TIMEOUT_S``, or a jail that fails its self-check: ``jail.require_isolation`` starts one
once per process and checks uid, capabilities, no_new_privs, network, visible host paths, writable
places, the inode limit of /tmp, and that the filter is loaded and denies ``socket(AF_INET)``,
``memfd_create``, ``shmget`` and ``keyctl`` with EPERM), scoring raises ``SandboxUnavailable``, a
one-line ``CanvaslabError``; code is never run unprotected.

What is NOT enforced: the system calls the filter allows are reachable by the unprivileged user, so
a kernel bug in one of them is the remaining way out; memory has no single cap (no cgroup): the bound
above is a sum of per-route limits, dominated by address space and page tables, and scales with
``max_processes``; CPU cores are not pinned; world-readable system files under /usr and /proc's
view of the machine (CPU model, load) can be read; a jail's process can write into its namespace's
init (/proc/1/mem, same user), which has the jail's limits and filter. The Python-level guards of
the earlier sandbox (an audit hook, a replaced socket module) are gone: they lived in the
candidate's own process, which could switch them off.
"""

from canvaslab.scoring.sandbox.jail import SandboxLimits, SandboxUnavailable, require_isolation
from canvaslab.scoring.sandbox.run import SandboxResult, run_tests

__all__ = ["SandboxLimits", "SandboxResult", "SandboxUnavailable", "require_isolation", "run_tests"]
