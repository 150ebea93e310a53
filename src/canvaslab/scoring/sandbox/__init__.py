"""Score model-written code under OS isolation, with a verdict the code cannot forge.

The code scorers of the commit-order study must run what a model wrote. That code is hostile input:
it may try to be scored correct without being correct, or to harm the machine. ``run_tests`` runs
one probe's tests against it in two bubblewrap jails (``jail``), joined by two pipes:

- the CANDIDATE jail runs the model's code and a small server (``inside.serve_candidate``) that calls
  the entry point with arguments it is sent and sends back the return value, or the name of the
  exception raised, as plain data (JSON of None, bool, int, float, str, list, tuple, set, frozenset,
  dict, nothing else: ``inside.to_plain``). This process holds no test, no expected value, no token:
  there is nothing in it worth stealing or forging;
- the TESTS jail runs only trusted code: the probe's test source, unchanged (HumanEval's
  ``check(candidate)`` with its asserts, loops, random inputs and helper functions; our
  ``assert f(x) == y`` lines), after the trusted prelude (HumanEval's prompt, whose helpers such as
  ``poly`` the tests use), with the entry point's name bound to a proxy that makes each call a round
  trip to the candidate jail. Values coming back are rebuilt by ``inside.from_plain`` as exact
  builtin types, so the comparisons the tests make are the builtins' own; an exception's name comes back
  as that built-in exception (a test may expect one), except ``StopIteration`` and ``StopAsyncIteration``,
  which would quietly end a test's loop over ``map()``: those, like any other name, become
  ``CandidateRaised``. Its verdict goes to a
  descriptor only this process reads;
- this process decides: a pass is a verdict of ``passed`` from the tests' jail that exited 0 before
  the time limit, with no broken link (the candidate ended, answered garbage, returned something
  that is not plain data, or answered more than ``max_message_bytes``).

Because the tests run whole in the trusted jail, no test needs to be taken apart into (call,
expected) pairs, and every kind of test is as unforgeable as the simplest one: the candidate can
only choose the plain values its calls return. A test that needs more from the candidate (an object
with methods, a generator, an argument mutated in place, a global other than the entry point) fails:
the sandbox errs towards "not correct". Every reference solution of the probe suite passes (164
HumanEval, 55 code-synthesis tasks: tests/studies/commit_order/test_probes.py).

Why known attacks fail (each is a test in tests/studies/commit_order/test_sandbox.py):
a token read from a frame (``sys._getframe``, a traceback) or the harness's locals: there is none,
and the tests are in another process; replacing the tests: they are not in the candidate's process;
``sys.excepthook``, ``os._exit(0)``, ``sys.exit(0)``, printing "passed": the verdict is not the
candidate's exit status or output; an object whose ``__eq__`` is always true, a subclass of int or
str: not plain data, refused; switching off a guard flag (``__main__._DENIED``): the guards are the
kernel's, outside the process.

What each jail ENFORCES (bubblewrap flags and kernel limits, ``jail.Isolation.command``):

- its own user, PID, network, IPC, UTS and cgroup namespaces (``--unshare-all --unshare-user``); no
  network but a loopback of its own; no further user namespaces (``--disable-userns``), so it cannot
  gain capabilities in a nested one or mount anything;
- an unprivileged user: uid 65534 inside; as root, bwrap itself runs under a fresh uid of its own
  (1e9..2e9) with no groups, so nothing in the jail is root on the host; no capabilities,
  no_new_privs (set by bwrap), a new session (``--new-session``: no terminal injection);
- a read-only view of /usr (the interpreter and its libraries, with /bin, /lib... as on the host),
  the interpreter's prefix when it lies elsewhere, and /etc/ld.so.cache; nothing else of the host
  (no /etc/passwd, /root, /home, /work, the working directory or the host's /tmp); the folders of
  installed packages under them hidden behind empty read-only tmpfs; ``python -I -S`` (standard
  library only, no environment variables: ``--clearenv``);
- one writable place: its own /tmp, a tmpfs of ``tmp_bytes`` (HOME points there); the root is
  remounted read-only. Files written there vanish with the jail;
- kernel limits set by ``prlimit`` before Python starts: CPU time (``RLIMIT_CPU``), address space
  (``RLIMIT_AS``: a 10 GB allocation fails), file size (``RLIMIT_FSIZE``), processes and threads
  (``RLIMIT_NPROC``, counted for the jail's own uid: a fork bomb stops there), open files
  (``RLIMIT_NOFILE``), no core dumps;
- a wall-clock limit for the whole run, after which, and after every run, the init of each jail's
  PID namespace is killed: the kernel then kills every process in the namespace, children started
  in a new session included, before the init exits, and the run returns only once it has (bwrap
  itself may return earlier). If this process dies, ``--die-with-parent`` takes the jails with it.

Where isolation cannot be had (no ``bwrap`` or ``prlimit``, bubblewrap older than 0.8, user
namespaces refused, or a jail that fails its self-check: ``jail.require_isolation`` starts one once
per process and checks uid, capabilities, no_new_privs, network, visible host paths and writable
places), scoring raises ``SandboxUnavailable``, a one-line ``CanvaslabError``; code is never run
unprotected.

What is NOT enforced: no seccomp filter (the kernel's system calls are all reachable by the
unprivileged user, so a kernel bug is the remaining way out); memory is limited per process, so the
worst case is ``max_processes`` x ``memory_bytes`` plus the /tmp tmpfs (no cgroup); CPU cores are not
pinned; world-readable system files under /usr and /proc's view of the machine (CPU model, load)
can be read. The Python-level guards of the earlier sandbox (an audit hook, a replaced socket
module) are gone: they lived in the candidate's own process, which could switch them off.
"""

from canvaslab.scoring.sandbox.jail import SandboxLimits, SandboxUnavailable, require_isolation
from canvaslab.scoring.sandbox.run import SandboxResult, run_tests

__all__ = ["SandboxLimits", "SandboxResult", "SandboxUnavailable", "require_isolation", "run_tests"]
