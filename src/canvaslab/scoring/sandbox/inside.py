"""The program that runs inside each jail, and the plain-data format that is the jails' only link.

This file is executed in the jails as ``python -I -S -c <this file's text> ROLE ...`` (standard library
only, nothing imported from canvaslab), in one of three roles:

- ``candidate``: loads the model's code, says whether it defines the entry point, then answers calls of
  it, one JSON line per call (``CandidateServer``). Nothing secret is in this process: it holds no test,
  no expected value, no token. Whatever it writes is read by the other side as plain data, so taking it
  over gains nothing.
- ``tests``: runs the trusted tests (the probe's test source, after the trusted prelude, e.g.
  HumanEval's prompt with its helpers) with the entry point's name bound to a proxy of
  ``CandidateLink.call``, which sends the arguments to the candidate jail and decodes what comes back.
  It writes the verdict to its own descriptor, which only the scorer reads.
- ``selfcheck``: reports what the jail looks like from inside (``jail.require_isolation``).

A VALUE in plain data (``to_plain``, ``from_plain``) is JSON: ``None``, ``bool``, ``int``, ``float`` and
``str`` as themselves (an int of 2**1000 or more in size as ``{"int": hex}``, JSON's decimal digits being
limited; infinities as JSON's ``Infinity``; a NaN as ``{"nan": its 8 bytes in hex}``, sign and payload
kept), ``list`` as a JSON array, and ``{"tuple": [...]}``, ``{"set": [...]}``, ``{"frozenset": [...]}``,
``{"dict": [[key, value], ...]}`` for the rest. Reading builds only those exact builtin types, so a value
that crossed cannot carry a method of the candidate's (an ``__eq__`` that is always true, a ``__del__``,
a property). Writing checks exact types (``type(x) is int``, never ``isinstance``) and refuses everything
else, subclasses included, and a value nested deeper than ``MAX_DEPTH``, except three standard-library
dicts an honest answer may return (``OrderedDict``, ``defaultdict``, ``Counter``), which cross as plain
dicts: the comparisons that follow are then a dict's (a Counter the tests passed stays their Counter:
what the candidate changed in it is written into it).

The LINK shares objects as one process would (``Mirror``). Every list, set, dict and NaN that crosses
is numbered (the tests' with even ids, the candidate's with odd ones): a new one is written as a value,
taking the writer's next id before its members are written, and the reader numbers what it reads in the
same order; one the other side has is written ``{"ref": id}``. Each message then carries, as
``objects: [[id, contents], ...]``, the new contents of every shared object that changed since the last
message (mutated in place by the candidate during a call, or by the tests between calls), which the
reader writes into its own object in place. An object has changed when it no longer holds the very
objects it held after the last message (a snapshot of its slots, taken once a message is read, before
any other code runs). Hence, as in one process: an argument the candidate mutates (before returning or
raising) is mutated where the tests hold it; an argument the candidate returns is the tests' own object;
an object passed twice, in one call or in two calls to a candidate that kept it, is one object to the
candidate; an object the candidate returned and kept changes where the tests hold it when the candidate
changes it later, and the other way round; two NaNs are one object on the other side exactly when they
are one here. An object stops being shared (``Mirror.prune``, after each message written) once this
side holds it only through the table, as counted by ``sys.getrefcount``: this side can no longer see or
change it, and the other side is told to forget it (``dropped``, runs of ids). Other values cross by
value: the identity (``is``) of a str, int, float other than NaN, tuple or frozenset is not kept. A new
value that contains itself is refused like one nested deeper than ``MAX_DEPTH``; an object both sides
share may come to contain itself, as in one process.

Messages, one JSON line each: the candidate's first line ``{"entry": E}`` (``E``: a handle of what the
entry point's name is bound to, null where it is unbound); a request ``{"callee": E, "args": [...],
"kwargs": [[name, value], ...], "objects": [...], "dropped": [...]}``; a reply ``{"returned": value}``
or ``{"raised": class name, "builtin": its nearest built-in class, "message": text}``, each with
``objects``, ``dropped`` and ``entry``, or ``{"unsendable": why}``. Each is read in the order written:
arguments (or the value), then ``objects``. A handle changes when the candidate rebinds its entry
point's name: the tests' global name follows, while a function that was given the entry point keeps
calling what it was given.
"""

import collections
import functools
import itertools
import json
import operator
import os
import struct
import sys

MAX_DEPTH = 100
BIG_INT = 1 << 1000  # from this size on an int crosses as hex: JSON's decimal digits are limited (4300)
TESTS, CANDIDATE = 0, 1  # the parity of the ids each side gives its objects
_SEPARATORS = (",", ":")
_UNBOUND = object()
_is_some = functools.partial(operator.is_not, None)


class NotPlainData(TypeError):
    """A value that cannot cross between the jails."""


def to_plain(value):
    """``value`` as JSON-ready plain data (a tree: no object shared), or NotPlainData."""
    return _Writer().value(value)


def from_plain(data):
    """The Python value of decoded JSON ``data``; NotPlainData for anything but the format above."""
    return _Reader().value(data)


def encode(value):
    """One line of plain data (bytes, ending in a newline)."""
    return _dumps(to_plain(value))


def decode(line):
    """The value of one line of plain data; NotPlainData when it is not plain data."""
    return from_plain(_loads(line))


def _dumps(data):
    return json.dumps(data, separators=_SEPARATORS).encode("utf-8") + b"\n"


def _loads(line):
    try:
        return json.loads(line, parse_constant=_constant)
    except (ValueError, RecursionError) as error:  # bad JSON, an int of too many digits, deep nesting
        raise NotPlainData(f"not a plain-data message ({type(error).__name__})") from None


def _constant(name):
    if name == "NaN":  # a NaN crosses as its bits
        raise ValueError("NaN")
    return float(name.replace("Infinity", "inf"))


def _stdlib_dicts():
    return collections.OrderedDict, collections.defaultdict, collections.Counter


class _Writer:
    """Values into plain data. With a mirror, a list, set, dict or NaN the other side has is written as
    ``{"ref": id}``, and a new one as its contents, numbered with this side's next id before its members
    are written (the reader numbers it in the same order); ``finish`` then writes the contents of every
    shared object that changed."""

    def __init__(self, mirror=None):
        self.mirror = mirror
        self.first_new = mirror.next_id if mirror is not None else 0
        self.objects = []  # [id, contents] of the changed shared objects
        self.changed = []  # their ids
        self.checked = set()
        self.queue = []  # shared objects met, to check for changes
        self.dicts = _stdlib_dicts()

    def value(self, value, depth=0):
        if depth > MAX_DEPTH:
            raise NotPlainData(f"nested deeper than {MAX_DEPTH} levels")
        kind = type(value)
        if value is None or kind is bool or kind is str:
            return value
        if kind is int:
            return value if -BIG_INT < value < BIG_INT else {"int": hex(value)}
        if kind is float and value == value:
            return value
        if kind is tuple or kind is frozenset:
            return {kind.__name__: [self.value(item, depth + 1) for item in value]}
        if not (kind is float or kind is list or kind is set or kind is dict or kind in self.dicts):
            raise NotPlainData(f"a value of type {kind.__module__}.{kind.__qualname__} is not plain data")
        mirror = self.mirror
        if mirror is None:
            return self.contents(value, depth)
        sid = mirror.sids.get(id(value))
        if sid is None:  # new: shared once written, so a value that contains itself nests deeper and deeper
            sid = mirror.next_id
            mirror.next_id += 2
            contents = self.contents(value, depth)
            mirror.register(sid, value)
            return contents
        if sid not in self.checked:
            self.checked.add(sid)
            self.queue.append(sid)
        return {"ref": sid}

    def contents(self, value, depth):
        kind = type(value)
        if kind is float:
            return {"nan": struct.pack(">d", value).hex()}
        if kind is list:
            return list(value) if _plain_scalars(value) else [self.value(item, depth + 1) for item in value]
        if kind is set:
            return {"set": list(value) if _plain_scalars(value) else
                    [self.value(item, depth + 1) for item in value]}
        return {"dict": [[self.value(key, depth + 1), self.value(item, depth + 1)] for key, item in value.items()]}

    def finish(self):
        """Write the contents of each shared object that changed since the last message: those met first,
        then the rest (the other side may hold any)."""
        self._drain()
        first_new, ours = self.first_new, self.first_new % 2
        rest = [sid for sid in self.mirror.objects
                if sid not in self.checked and (sid < first_new or sid % 2 != ours)]
        self.checked.update(rest)
        self.queue = rest[::-1]
        self._drain()

    def _drain(self):
        mirror = self.mirror
        while self.queue:
            sid = self.queue.pop()
            value = mirror.objects[sid]
            if type(value) is not float and not mirror.unchanged(sid, value):
                self.objects.append([sid, self.contents(value, 0)])
                self.changed.append(sid)

    def written(self):
        """The ids of the objects this message wrote: new and changed."""
        return [*range(self.first_new, self.mirror.next_id, 2), *self.changed]


def _plain_scalars(items):
    """Whether ``items`` are all None, bool, str, int below ``BIG_INT`` and float but NaN: themselves in
    plain data (a quick path for long lists, in C loops)."""
    if len(items) < 32:
        return False
    types = set(map(type, items))
    if not types <= _SCALARS:
        return False
    if int in types or float in types:
        numbers = [item for item in items if type(item) is int or type(item) is float] \
            if types & {str, type(None)} else items
        return (not numbers or (-BIG_INT < min(numbers) and max(numbers) < BIG_INT)) and \
            (float not in types or all(map(operator.eq, numbers, numbers)))
    return True


class _Reader:
    """Plain data into values: exact builtin types only. With a mirror, a reference is the shared
    object, and a list, set, dict or NaN written out is a new shared object with the writer's next id."""

    def __init__(self, mirror=None):
        self.mirror = mirror
        self.first_made = mirror.peer_next if mirror is not None else 0
        self.touched = []  # ids of the objects changed: snapshots due, as for those made

    def value(self, data, depth=0):
        if depth > MAX_DEPTH:
            raise NotPlainData(f"nested deeper than {MAX_DEPTH} levels")
        kind = type(data)
        if data is None or kind is bool or kind is int or kind is float or kind is str:
            return data
        mirror = self.mirror
        if kind is list:
            if mirror is not None:
                return self._fill(self._made([]), data, depth)
            return list(data) if set(map(type, data)) <= _SCALARS else [self.value(item, depth + 1) for item in data]
        if kind is not dict or len(data) != 1:
            raise NotPlainData("malformed plain data")
        (tag, items), = data.items()
        if tag == "ref" and type(items) is int and mirror is not None:
            found = mirror.objects.get(items)
            if found is None:
                raise NotPlainData(f"malformed plain data (no shared object {items})")
            return found
        if tag == "int" and type(items) is str:
            return _int(items)
        if tag == "nan" and type(items) is str:
            return _nan(items) if mirror is None else self._made(_nan(items))
        if type(items) is not list:
            raise NotPlainData("malformed plain data")
        if tag == "tuple":
            return tuple(self.value(item, depth + 1) for item in items)
        try:
            if tag == "frozenset":
                return frozenset(self.value(item, depth + 1) for item in items)
            if tag == "set" or tag == "dict":
                return self._fill(set() if tag == "set" else {}, data, depth) if mirror is None else \
                    self._fill(self._made(set() if tag == "set" else {}), data, depth)
        except TypeError as error:  # an unhashable key or member
            raise NotPlainData(f"malformed plain data ({error})") from None
        raise NotPlainData("malformed plain data")

    def _made(self, value):
        """``value`` shared under the writer's next id (made before its members are read: the writer
        numbered it before writing them)."""
        mirror = self.mirror
        mirror.register(mirror.peer_next, value)
        mirror.peer_next += 2
        return value

    def _fill(self, target, contents, depth):
        """Write ``contents`` (of ``target``'s kind) into ``target``, in place."""
        if type(target) is list:
            if type(contents) is not list:
                raise NotPlainData("malformed shared object")
            target[:] = contents if set(map(type, contents)) <= _SCALARS else \
                [self.value(item, depth + 1) for item in contents]
            return target
        tag = "set" if type(target) is set else "dict"
        if type(contents) is not dict or contents.keys() != {tag} or type(contents[tag]) is not list:
            raise NotPlainData("malformed shared object")
        try:
            if tag == "set":
                members = [self.value(item, depth + 1) for item in contents["set"]]
                target.clear()
                target.update(members)
                return target
            if not all(type(pair) is list and len(pair) == 2 for pair in contents["dict"]):
                raise NotPlainData("malformed shared object")
            pairs = [(self.value(key, depth + 1), self.value(item, depth + 1)) for key, item in contents["dict"]]
            if len(target) != len(pairs) or not all(map(_same, target, (key for key, _ in pairs))):
                target.clear()  # keys changed; where only values did, the keys stay, as an iteration over them would
            for key, item in pairs:
                target[key] = item
        except TypeError as error:  # an unhashable key or member
            raise NotPlainData(f"malformed plain data ({error})") from None
        return target

    def objects(self, entries):
        """Write the changed contents of shared objects into them, in place."""
        mirror = self.mirror
        if type(entries) is not list:
            raise NotPlainData("malformed shared objects")
        done = set()
        for entry in entries:
            if type(entry) is not list or len(entry) != 2 or type(entry[0]) is not int or entry[0] in done:
                raise NotPlainData("malformed shared objects")
            sid, contents = entry
            target = mirror.objects.get(sid)
            if target is None or type(target) is float:
                raise NotPlainData(f"malformed shared object {sid}")
            done.add(sid)
            self._fill(target, contents, 0)
            self.touched.append(sid)

    def finish(self, dropped):
        """Stop sharing what the writer dropped (runs ``[[first, last], ...]`` of ids, in steps of 2);
        take the snapshots due (the state both sides now have)."""
        mirror = self.mirror
        if type(dropped) is not list or not all(type(run) is list and len(run) == 2 and type(run[0]) is int
                                                and type(run[1]) is int and run[0] <= run[1] for run in dropped):
            raise NotPlainData("malformed list of dropped objects")
        for first, last in dropped:
            if (last - first) // 2 < len(mirror.objects):
                mirror.forget(range(first, last + 1, 2))
            else:  # a run longer than the table: only what the table holds
                mirror.forget([sid for sid in mirror.objects if first <= sid <= last and (sid - first) % 2 == 0])
        mirror.snapshot([*range(self.first_made, mirror.peer_next, 2), *self.touched])


def _runs(ids):
    """``ids`` (of one side, ascending) as runs ``[[first, last], ...]``."""
    runs = []
    for sid in ids:
        if runs and runs[-1][1] + 2 == sid:
            runs[-1][1] = sid
        else:
            runs.append([sid, sid])
    return runs


def _int(text):
    digits = text[3:] if text.startswith("-0x") else text[2:] if text.startswith("0x") else ""
    if not digits or digits.strip("0123456789abcdef"):
        raise NotPlainData("malformed plain data (an int)")
    return int(text, 16)  # hex: no limit on digits


def _nan(text):
    try:
        value = struct.unpack(">d", bytes.fromhex(text))[0] if len(text) == 16 else 0.0
    except ValueError:
        value = 0.0
    if value == value:
        raise NotPlainData("malformed plain data (a NaN)")
    return value


def _same(a, b):
    """Whether two keys are the same key, types, zero's sign and NaN's identity included."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if type(a) is tuple:
        return len(a) == len(b) and all(map(_same, a, b))
    if type(a) is float:
        return struct.pack(">d", a) == struct.pack(">d", b)
    return a == b


def _slots(value):
    """What a shared object holds directly, one reference per slot, in order (a dict's keys, then values)."""
    kind = type(value)
    if kind is list or kind is set:
        return value
    if kind is float:
        return ()
    return [*value.keys(), *value.values()]  # an OrderedDict's own order


_SCALARS = frozenset({type(None), bool, int, float, str})


class Mirror:
    """The objects shared with the other jail, by id (see the module's docstring)."""

    def __init__(self, parity):
        self.next_id = parity  # this side's next id
        self.peer_next = 1 - parity  # the other side's
        self.objects = {}  # id -> object
        self.sids = {}  # id(object) -> id
        self.synced = {}  # id -> its slots (members; a dict's keys, then values) after the last message
        self.due = []  # ids written since: their snapshots are taken after the next message read

    def register(self, sid, value):
        self.objects[sid] = value
        self.sids[id(value)] = sid

    def forget(self, ids):
        objects, sids, synced = self.objects, self.sids, self.synced
        for sid in ids:
            value = objects.pop(sid, None)
            if value is not None:
                del sids[id(value)]
                synced.pop(sid, None)

    def snapshot(self, touched):
        """Record the slots of the objects written or read since the last snapshot, as they are now
        (nothing has run between: ``_Reader.finish``), to tell later whether they changed."""
        for sid in (*self.due, *touched):
            value = self.objects.get(sid)
            if value is not None and type(value) is not float:
                self.synced[sid] = tuple(_slots(value))
        self.due = []

    def unchanged(self, sid, value):
        """Whether ``value`` holds the very objects it held at its snapshot, in the same slots (a set: the
        same objects). The snapshot holds them, so an id met in both is one object."""
        synced = self.synced.get(sid)
        if synced is None or len(synced) != len(value) * (1 if type(value) in (list, set) else 2):
            return False
        if type(value) is set:
            return set(map(id, value)) == set(map(id, synced))
        return all(map(operator.is_, _slots(value), synced))

    def prune(self):
        """Stop sharing what this side holds only through the table (directly, or through other objects
        held so): it can no longer see or change them. Their ids, as runs, for the other side to forget.
        Again while some go: what they held (in a tuple, say) is let go with them."""
        dropped = []
        while True:
            gone = self._prune()
            if not gone:
                break
            dropped += gone
        ours = self.next_id % 2
        return _runs(sorted(sid for sid in dropped if sid % 2 == ours)) + \
            _runs(sorted(sid for sid in dropped if sid % 2 != ours))

    def _prune(self):
        objects = self.objects
        if not objects:
            return []
        objects[-1] = []  # held by the table alone: its count is the table's own
        counts = list(map(sys.getrefcount, objects.values()))  # each counted the same way (C loops throughout)
        del objects[-1]
        own = counts.pop()
        # references from shared objects and from their snapshots (an OrderedDict's second one to a key is
        # not counted: kept)
        inside = collections.Counter(self._shared_members(objects.values()))
        inside.update(self._shared_members(self.synced.values(), snapshots=True))
        live = {sid for sid, count in zip(objects, counts) if count - own > inside[sid]}
        held = set(live)
        while live:
            live = set(self._shared_members(map(objects.__getitem__, live))) - held
            held |= live
        dropped = [sid for sid in objects if sid not in held]
        self.forget(dropped)
        return dropped

    def _shared_members(self, values, snapshots=False):
        """The ids of the shared objects that ``values`` hold directly, once per reference."""
        members = itertools.chain.from_iterable(values if snapshots else map(_slots, values))
        return filter(_is_some, map(self.sids.get, map(id, members)))

    def wrote(self, writer):
        """After a message is written: forget what this side no longer holds; snapshots of what it wrote
        are due after the next message read."""
        dropped = self.prune()
        self.due.extend(writer.written())
        return dropped


def _add_site_builtins():
    """``exit`` and ``quit``, which ``site`` gives a plain interpreter and ``-S`` (the jails') leaves out:
    code that calls them raises SystemExit, as in plain Python."""
    import site

    site.setquit()


# --- role "candidate": untrusted; whatever happens here can only change the values it sends -----------


def serve_candidate(code_fd, requests_fd, replies_fd, entry_point):
    with os.fdopen(code_fd, "rb") as handle:
        code = handle.read().decode("utf-8", errors="replace")
    requests = os.fdopen(requests_fd, "rb")
    replies = os.fdopen(replies_fd, "wb")
    _add_site_builtins()
    namespace = {"__name__": "solution"}
    exec(compile(code, "solution.py", "exec"), namespace)
    server = CandidateServer(namespace, entry_point)
    replies.write(_dumps({"entry": server.entry()}))
    replies.flush()
    for line in requests:
        replies.write(server.answer(line))
        replies.flush()


class CandidateServer:
    """Calls of the entry point (or of what its name was bound to since: ``entry``) with the arguments
    of a request, and the reply."""

    def __init__(self, namespace, entry_point):
        self.namespace = namespace
        self.entry_point = entry_point
        self.mirror = Mirror(CANDIDATE)
        self.functions = []  # by handle

    def entry(self):
        """The handle of what the entry point's name is bound to now; None where it is unbound."""
        current = self.namespace.get(self.entry_point, _UNBOUND)
        if current is _UNBOUND:
            return None
        if not self.functions or self.functions[-1] is not current:
            self.functions.append(current)
        return len(self.functions) - 1

    def answer(self, line):
        function, args, kwargs = self._request(line)
        try:
            value = function(*args, **kwargs)
            reply = None
        except BaseException as error:  # noqa: BLE001 - the candidate's exception is an answer too
            reply = _raised(error)
            value = None
        # nothing here may hold the arguments or the value once written: what only the table holds is dropped
        function = args = kwargs = None
        try:
            writer = _Writer(self.mirror)
            if reply is None:
                reply = {"returned": writer.value(value)}
            value = None
            writer.finish()
            reply.update(objects=writer.objects, dropped=self.mirror.wrote(writer), entry=self.entry())
            return _dumps(reply)
        except BaseException as error:  # noqa: BLE001 - not plain data, or anything the candidate's state does
            return _dumps({"unsendable": _safe_str(error)})

    def _request(self, line):
        request = _loads(line)
        reader = _Reader(self.mirror)  # in the order written: arguments, then changed objects
        args = [reader.value(item) for item in request["args"]]
        kwargs = {name: reader.value(item) for name, item in request["kwargs"]}
        reader.objects(request["objects"])
        reader.finish(request["dropped"])
        return self.functions[request["callee"]], args, kwargs


def _raised(error):
    """The reply for an exception: its class's name, and its nearest built-in class (the tests raise that)."""
    import builtins

    kind = type(error)
    builtin = next((base.__name__ for base in kind.__mro__ if getattr(builtins, base.__name__, None) is base),
                   "BaseException")
    return {"raised": str(kind.__name__), "builtin": builtin, "message": _safe_str(error)}


def _safe_str(error):
    try:
        return str(error)[:300]
    except BaseException:  # noqa: BLE001
        return ""


# --- role "tests": trusted code only; its inputs from the candidate are plain data -------------------


class CandidateRaised(Exception):
    """The candidate raised an Exception that is none of Python's built-in ones, nor derived from one."""


class CandidateRaisedBaseException(BaseException):
    """The candidate raised a BaseException that is not an Exception, none of Python's built-in ones
    (SystemExit, KeyboardInterrupt, GeneratorExit), nor derived from one: ``except Exception`` lets it
    through, as in plain Python."""


class LinkBroken(BaseException):
    """The link cannot carry a call: the candidate's answer is not an answer (ended, too large, not plain
    data), or the tests passed what is not plain data. A BaseException so that a test's ``except
    Exception`` cannot swallow it; the verdict also records it."""


_REPLY_KEYS = ({"objects", "dropped", "entry", "returned"},
               {"objects", "dropped", "entry", "raised", "builtin", "message"})


class CandidateLink:
    """Calls of the candidate, each a round trip of plain data to the candidate's jail."""

    def __init__(self, requests_fd, replies_fd, max_message_bytes, namespace, entry_point):
        self.requests = os.fdopen(requests_fd, "wb")
        self.replies = os.fdopen(replies_fd, "rb")
        self.max_message_bytes = max_message_bytes
        self.namespace = namespace
        self.entry_point = entry_point
        self.mirror = Mirror(TESTS)
        self.entry = _UNBOUND
        self.calls = 0
        self.broken = ""

    def start(self):
        """Bind the entry point's name as the candidate's code left it (once that code has run)."""
        hello = self._read_reply()
        if hello.keys() != {"entry"}:
            self._break("a malformed answer")
        self._bind(hello["entry"])

    def call(self, callee, args, kwargs):
        if self.broken:
            raise LinkBroken(self.broken)
        self.calls += 1
        try:
            writer = _Writer(self.mirror)
            request = {"callee": callee, "args": [writer.value(item) for item in args],
                       "kwargs": [[name, writer.value(item)] for name, item in kwargs.items()]}
            writer.finish()
            request.update(objects=writer.objects, dropped=self.mirror.wrote(writer))
            line = _dumps(request)
        except Exception as error:  # noqa: BLE001 - e.g. NotPlainData: a TypeError the test might expect
            self._break(f"the tests passed what is not plain data: {_safe_str(error)}")
        try:
            self.requests.write(line)
            self.requests.flush()
        except BrokenPipeError:
            self._break("the candidate's process ended before answering")
        reply = self._read_reply()
        if reply.keys() not in _REPLY_KEYS or not all(
                type(reply.get(key, "")) is str for key in ("raised", "builtin", "message")):
            self._break("a malformed answer")
        try:
            reader = _Reader(self.mirror)  # in the order written: the value, then changed objects
            value = reader.value(reply["returned"]) if "returned" in reply else None
            reader.objects(reply["objects"])
            reader.finish(reply["dropped"])
        except Exception as error:  # noqa: BLE001
            self._break(f"an answer that is not plain data: {_safe_str(error)}")
        self._bind(reply["entry"])
        if "raised" in reply:
            raise _exception(reply["raised"], reply["builtin"], reply["message"])
        return value

    def _bind(self, entry):
        if entry is not None and (type(entry) is not int or entry < 0):
            self._break("a malformed answer")
        if entry == self.entry:
            return
        self.entry = entry
        if entry is None:
            self.namespace.pop(self.entry_point, None)
        else:
            self.namespace[self.entry_point] = self._proxy(entry)

    def _proxy(self, callee):
        def candidate(*args, **kwargs):
            return self.call(callee, args, kwargs)

        candidate.__name__ = candidate.__qualname__ = self.entry_point
        return candidate

    def _read_reply(self):
        line = self.replies.readline(self.max_message_bytes + 1)
        if not line.endswith(b"\n"):
            self._break("the candidate's process ended before answering" if len(line) <= self.max_message_bytes
                        else f"an answer longer than {self.max_message_bytes} bytes")
        try:
            reply = _loads(line)
        except NotPlainData as error:
            self._break(f"an answer that is not plain data: {error}")
        if type(reply) is not dict:
            self._break("a malformed answer")
        if reply.keys() == {"unsendable"}:
            self._break(f"the candidate returned what is not plain data: {str(reply['unsendable'])[:200]}")
        return reply

    def _break(self, reason):
        self.broken = reason
        raise LinkBroken(reason)


# Exceptions Python itself takes as control flow: a StopIteration raised from a call inside map() or a
# custom __next__ quietly ends the tests' loop, so `assert all(map(...))` would pass for any answer.
_CONTROL_FLOW = (StopIteration, StopAsyncIteration)


def _exception(name, builtin, message):
    """What the tests see for the candidate's exception: its nearest built-in class that takes a message
    (``except ValueError`` catches the candidate's subclass of ValueError; SystemExit and KeyboardInterrupt
    pass ``except Exception`` as in plain Python), else CandidateRaised or CandidateRaisedBaseException;
    never one the interpreter takes as control flow (``_CONTROL_FLOW``): those become CandidateRaised."""
    import builtins

    text = f"the candidate raised {name}: {message}"
    kind = getattr(builtins, builtin, None) if builtin.isidentifier() else None
    if not isinstance(kind, type) or not issubclass(kind, BaseException) or issubclass(kind, _CONTROL_FLOW):
        return CandidateRaised(text)
    for base in kind.__mro__:
        if base is Exception or base is BaseException:
            if name == base.__name__:
                return base(text)
            return CandidateRaised(text) if base is Exception else CandidateRaisedBaseException(text)
        try:
            return base(text)
        except Exception:  # noqa: BLE001 - a built-in exception that needs other arguments: its base
            pass
    return CandidateRaised(text)


def run_tests(setup_fd, requests_fd, replies_fd, verdict_fd, max_message_bytes):
    with os.fdopen(setup_fd, "rb") as handle:
        setup = json.loads(handle.read())
    verdict = os.fdopen(verdict_fd, "w")
    _add_site_builtins()
    namespace = {"__name__": "tests"}
    link = CandidateLink(requests_fd, replies_fd, max_message_bytes, namespace, setup["entry_point"])
    failure = ""
    try:
        exec(compile(setup["prelude"], "prelude.py", "exec"), namespace)
        link.start()
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
