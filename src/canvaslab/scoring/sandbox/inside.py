"""The program that runs inside each jail, and the plain-data format that is the jails' only link.

This file is executed in the jails as ``python -I -S -c <this file's text> ROLE ...`` (standard library
only, nothing imported from canvaslab), in one of three roles:

- ``candidate``: loads the model's code and answers calls of its entry point, one JSON line per call.
  Nothing secret is in this process: it holds no test, no expected value, no token. Whatever it
  writes is read by the other side as plain data, so taking it over gains nothing.
- ``tests``: runs the trusted tests (the probe's test source, after the trusted prelude, e.g.
  HumanEval's prompt with its helpers) with the entry point's name bound to ``CandidateLink.call``,
  which sends the arguments to the candidate jail and decodes what comes back with
  ``from_plain``. It writes the verdict to its own descriptor, which only the scorer reads.
- ``selfcheck``: reports what the jail looks like from inside (``jail.require_isolation``).

Plain data is JSON: ``None``, ``bool``, ``int``, ``float`` (NaN and infinities included) and ``str``
as themselves, ``list`` as a JSON array, and ``{"tuple": [...]}``, ``{"set": [...]}``,
``{"frozenset": [...]}``, ``{"dict": [[key, value], ...]}`` for the rest. ``from_plain`` builds only
those exact builtin types, so a value that crossed cannot carry a method of the candidate's (an
``__eq__`` that is always true, a ``__del__``, a property). ``to_plain`` checks exact types
(``type(x) is int``, never ``isinstance``) and refuses everything else, subclasses included, except
three standard-library dicts an honest answer may return (``OrderedDict``, ``defaultdict``,
``Counter``), which are sent as plain dicts: the comparisons that follow are then a dict's. Integers
of more than 4300 digits are refused by ``json`` (Python's limit on int-string conversion).
"""

import json
import os
import sys

MAX_DEPTH = 100


class NotPlainData(TypeError):
    """A value that cannot cross between the jails."""


def to_plain(value, depth=0):
    """``value`` as JSON-ready plain data, or NotPlainData (exact types only)."""
    if depth > MAX_DEPTH:
        raise NotPlainData(f"nested deeper than {MAX_DEPTH} levels")
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is float or kind is str:
        return value
    if kind is list:
        return [to_plain(item, depth + 1) for item in value]
    if kind is tuple or kind is set or kind is frozenset:
        return {kind.__name__: [to_plain(item, depth + 1) for item in value]}
    if kind is dict or _is_stdlib_dict(kind):
        return {"dict": [[to_plain(k, depth + 1), to_plain(v, depth + 1)] for k, v in dict.items(value)]}
    raise NotPlainData(f"a value of type {kind.__module__}.{kind.__qualname__} is not plain data")


def _is_stdlib_dict(kind):
    import collections

    return kind is collections.OrderedDict or kind is collections.defaultdict or kind is collections.Counter


def from_plain(data, depth=0):
    """The Python value of decoded JSON ``data``; NotPlainData for anything but the format above."""
    if depth > MAX_DEPTH:
        raise NotPlainData(f"nested deeper than {MAX_DEPTH} levels")
    kind = type(data)
    if data is None or kind is bool or kind is int or kind is float or kind is str:
        return data
    if kind is list:
        return [from_plain(item, depth + 1) for item in data]
    if kind is not dict or len(data) != 1:
        raise NotPlainData("malformed plain data")
    (tag, items), = data.items()
    if type(items) is not list:
        raise NotPlainData("malformed plain data")
    try:
        if tag == "tuple":
            return tuple(from_plain(item, depth + 1) for item in items)
        if tag == "set":
            return {from_plain(item, depth + 1) for item in items}
        if tag == "frozenset":
            return frozenset(from_plain(item, depth + 1) for item in items)
        if tag == "dict" and all(type(pair) is list and len(pair) == 2 for pair in items):
            return {from_plain(k, depth + 1): from_plain(v, depth + 1) for k, v in items}
    except TypeError as error:  # an unhashable key or member
        raise NotPlainData(f"malformed plain data ({error})") from None
    raise NotPlainData("malformed plain data")


def encode(value):
    """One protocol line (bytes, ending in a newline)."""
    return json.dumps(to_plain(value), separators=(",", ":")).encode("utf-8") + b"\n"


def decode(line):
    """The value of one protocol line; NotPlainData when it is not plain data."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as error:  # bad JSON, an int of too many digits, deep nesting
        raise NotPlainData(f"not a plain-data message ({type(error).__name__})") from None
    return from_plain(data)


# --- role "candidate": untrusted; whatever happens here can only change the values it sends -----------


def serve_candidate(code_fd, requests_fd, replies_fd, entry_point):
    with os.fdopen(code_fd, "rb") as handle:
        code = handle.read().decode("utf-8", errors="replace")
    requests = os.fdopen(requests_fd, "rb")
    replies = os.fdopen(replies_fd, "wb")
    namespace = {"__name__": "solution"}
    exec(compile(code, "solution.py", "exec"), namespace)
    for line in requests:
        replies.write(_answer(namespace, entry_point, line))
        replies.flush()


def _answer(namespace, entry_point, line):
    args, kwargs = decode(line)
    try:
        value = namespace[entry_point](*args, **kwargs)
        return encode({"returned": value})
    except NotPlainData as error:
        return encode({"unsendable": str(error)})
    except BaseException as error:  # noqa: BLE001 - the candidate's exception is an answer too
        return encode({"raised": type(error).__name__, "message": _safe_str(error)})


def _safe_str(error):
    try:
        return str(error)[:300]
    except BaseException:  # noqa: BLE001
        return ""


# --- role "tests": trusted code only; its inputs from the candidate are plain data -------------------


class CandidateRaised(Exception):
    """The candidate raised an exception that is not one of Python's built-in ones."""


class LinkBroken(BaseException):
    """The candidate's answer is not an answer (ended, too large, not plain data). A BaseException so
    that a test's ``except Exception`` cannot swallow it; the verdict also records it."""


class CandidateLink:
    """Calls of the candidate, each a round trip of plain data to the candidate's jail."""

    def __init__(self, requests_fd, replies_fd, max_message_bytes):
        self.requests = os.fdopen(requests_fd, "wb")
        self.replies = os.fdopen(replies_fd, "rb")
        self.max_message_bytes = max_message_bytes
        self.calls = 0
        self.broken = ""

    def call(self, *args, **kwargs):
        if self.broken:
            raise LinkBroken(self.broken)
        self.calls += 1
        try:
            self.requests.write(encode([list(args), kwargs]))
            self.requests.flush()
        except BrokenPipeError:
            self._break("the candidate's process ended before answering")
        reply = self._read_reply()
        if "raised" in reply:
            raise _exception(reply["raised"], reply.get("message", ""))
        return reply["returned"]

    def _read_reply(self):
        line = self.replies.readline(self.max_message_bytes + 1)
        if not line.endswith(b"\n"):
            self._break("the candidate's process ended before answering" if len(line) <= self.max_message_bytes
                        else f"an answer longer than {self.max_message_bytes} bytes")
        try:
            reply = decode(line)
        except NotPlainData as error:
            self._break(f"an answer that is not plain data: {error}")
        keys = reply.keys() if type(reply) is dict else None
        if keys == {"returned"}:
            return reply
        if keys == {"raised", "message"} and type(reply["raised"]) is str and type(reply["message"]) is str:
            return reply
        if keys == {"unsendable"}:
            self._break(f"the candidate returned what is not plain data: {str(reply['unsendable'])[:200]}")
        self._break("a malformed answer")

    def _break(self, reason):
        self.broken = reason
        raise LinkBroken(reason)


# Exceptions Python itself takes as control flow: a StopIteration raised from a call inside map() or a
# custom __next__ quietly ends the tests' loop, so `assert all(map(...))` would pass for any answer.
_CONTROL_FLOW = (StopIteration, StopAsyncIteration)


def _exception(name, message):
    """A built-in exception of that name (a test may expect one), else CandidateRaised. Never a
    BaseException that is not an Exception (SystemExit would end the tests), nor one the interpreter
    takes as control flow (``_CONTROL_FLOW``)."""
    import builtins

    kind = getattr(builtins, name, None) if name.isidentifier() else None
    text = f"the candidate raised {name}: {message}"
    if isinstance(kind, type) and issubclass(kind, Exception) and not issubclass(kind, _CONTROL_FLOW):
        try:
            return kind(text)
        except Exception:  # noqa: BLE001 - a built-in exception that needs other arguments
            pass
    return CandidateRaised(text)


def run_tests(setup_fd, requests_fd, replies_fd, verdict_fd, max_message_bytes):
    with os.fdopen(setup_fd, "rb") as handle:
        setup = json.loads(handle.read())
    verdict = os.fdopen(verdict_fd, "w")
    link = CandidateLink(requests_fd, replies_fd, max_message_bytes)
    namespace = {"__name__": "tests"}
    failure = ""
    try:
        exec(compile(setup["prelude"], "prelude.py", "exec"), namespace)
        namespace[setup["entry_point"]] = link.call
        exec(compile(setup["tests"], "tests.py", "exec"), namespace)
    except BaseException as error:  # noqa: BLE001 - any failure of the tests is the verdict
        failure = _describe(error)
        import traceback

        traceback.print_exc()
    failure = failure if not link.broken else f"LinkBroken: {link.broken}"
    json.dump({"passed": not failure, "calls": link.calls, "failure": failure}, verdict)
    verdict.flush()


def _describe(error):
    """One line: the exception, where in the tests, its message."""
    line = None
    trace = error.__traceback__
    while trace is not None:
        if trace.tb_frame.f_code.co_filename == "tests.py":
            line = trace.tb_lineno
        trace = trace.tb_next
    where = f" at tests.py line {line}" if line else ""
    message = " ".join(_safe_str(error).split())[:200]
    return f"{type(error).__name__}{where}" + (f": {message}" if message else "")


# --- role "selfcheck" -------------------------------------------------------------------------------


def self_check(report_fd, host_paths):
    """What the jail looks like from inside: the scorer compares it with what it must be."""
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    with open("/proc/net/dev") as handle:
        interfaces = [line.split(":")[0].strip() for line in handle.read().splitlines()[2:]]
    report = {
        "version": list(sys.version_info[:2]),
        "uid": os.getuid(),
        "capabilities": [status[key].strip() for key in ("CapPrm", "CapEff", "CapBnd", "CapAmb")],
        "no_new_privs": status["NoNewPrivs"].strip(),
        "interfaces": interfaces,
        "visible_host_paths": [path for path in host_paths if os.path.lexists(path)],
        "writable": [path for path in ("/", "/usr", "/dev", "/dev/shm", "/tmp") if _can_create(path)],
        "pid": os.getpid(),
        "nested_user_namespace": _can_create_user_namespace(),
        "seccomp": status.get("Seccomp", "").strip(),
        "denied": _denied_calls(),
        "tmp_options": _mount_options("/tmp"),
    }
    with os.fdopen(report_fd, "w") as handle:
        json.dump(report, handle)


def _can_create_user_namespace():
    """Whether unshare(CLONE_NEWUSER) succeeds here (it must not: --disable-userns)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).unshare(0x10000000) == 0
    except (ImportError, OSError, AttributeError):
        return None


# keyctl's number where the architecture is known (the other checks need none)
_KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "ppc64le": 280, "s390x": 280}


def _denied_calls():
    """How calls the system-call filter must refuse ended here: an errno name each ("EPERM"), or "allowed"."""
    import ctypes
    import errno
    import socket

    libc = ctypes.CDLL(None, use_errno=True)

    def by_libc(result):
        return "allowed" if result >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")

    def by_python(call):
        try:
            os.close(call())
        except OSError as error:
            return errno.errorcode.get(error.errno, "?")
        return "allowed"

    outcomes = {
        "socket(AF_INET)": by_python(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).detach()),
        "memfd_create": by_python(lambda: os.memfd_create("canvaslab-check")),
        "shmget": by_libc(libc.shmget(0, 4096, 0o1600)),  # IPC_PRIVATE, IPC_CREAT | 0600
    }
    number = _KEYCTL.get(os.uname().machine)
    if number is not None:  # KEYCTL_GET_KEYRING_ID of the session keyring (-3)
        outcomes["keyctl"] = by_libc(libc.syscall(number, 0, -3, 0))
    return outcomes


def _mount_options(mount_point):
    """The superblock options of what is mounted at ``mount_point`` (from /proc/self/mountinfo)."""
    options = ""
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            fields = line.split()
            if fields[4] == mount_point:
                options = fields[-1]  # the last one mounted there is what is seen
    return options


def _can_create(directory):
    path = os.path.join(directory, ".canvaslab-write-check")
    try:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    except OSError:
        return False
    os.unlink(path)
    return True


def main(argv):
    role, *args = argv
    if role == "candidate":
        serve_candidate(int(args[0]), int(args[1]), int(args[2]), args[3])
    elif role == "tests":
        run_tests(*(int(arg) for arg in args))
    elif role == "selfcheck":
        self_check(int(args[0]), json.loads(args[1]))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
