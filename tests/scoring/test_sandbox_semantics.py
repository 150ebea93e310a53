"""The sandbox's verdicts against plain Python's. Each construction runs as one process runs it
(HumanEval's execution: the candidate's code, then the tests, in one namespace; a pass is reaching the
end without an exception) and in the sandbox (``run_tests``). The verdicts agree (``AGREE``), or differ
as the sandbox's docstring says under "Differences from plain Python" (``PINNED``). The link's sharing
of objects is also checked in this process, against one process, on random mutations."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import uuid
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from canvaslab.scoring import sandbox
from canvaslab.scoring.sandbox import SandboxLimits, inside, run_tests

FAST = SandboxLimits(timeout_s=20, cpu_time_s=10)

# One process, as HumanEval's execution.py runs `check_program` (its reliability guard aside); the verdict
# goes out under a marker nobody else knows.
PLAIN_PYTHON = """
import json, os, sys
source = json.loads(sys.stdin.read())
namespace = {}
try:
    exec(compile(source["code"], "solution.py", "exec"), namespace)
    exec(compile(source["tests"], "tests.py", "exec"), namespace)
except BaseException:
    verdict = "failed"
else:
    verdict = "passed"
os.write(1, (source["marker"] + verdict + "\\n").encode())
"""


@dataclass(frozen=True)
class Case:
    code: str
    tests: str
    passes: bool  # plain Python's verdict


def _plain_python_passes(case: Case) -> bool:
    marker = f"verdict-{uuid.uuid4().hex}:"
    source = json.dumps({"code": textwrap.dedent(case.code), "tests": textwrap.dedent(case.tests), "marker": marker})
    ran = subprocess.run([sys.executable, "-I", "-c", PLAIN_PYTHON], input=source, capture_output=True,
                         text=True, timeout=60)
    return f"{marker}passed" in ran.stdout


def _sandbox_passes(case: Case) -> bool:
    result = run_tests(textwrap.dedent(case.code), "probe", textwrap.dedent(case.tests), limits=FAST)
    assert not result.timed_out, result.failure
    return result.passed


AGREE = {
    # --- exceptions: SystemExit and KeyboardInterrupt are not Exceptions, on either side
    "system_exit_passes_except_exception": Case(
        "def probe(x):\n    raise SystemExit(0)\n",
        "def check(candidate):\n    try:\n        candidate(1)\n    except Exception:\n        pass\ncheck(probe)\n",
        passes=False),
    "keyboard_interrupt_passes_except_exception": Case(
        "def probe(x):\n    raise KeyboardInterrupt\n",
        "try:\n    probe(1)\nexcept Exception:\n    pass\n",
        passes=False),
    "a_base_exception_of_the_candidates_passes_except_exception": Case(
        "class Stop(BaseException):\n    pass\ndef probe(x):\n    raise Stop()\n",
        "try:\n    probe(1)\nexcept Exception:\n    pass\n",
        passes=False),
    "a_test_that_catches_base_exception_sees_system_exit": Case(
        "def probe(x):\n    raise SystemExit(2)\n",
        "try:\n    probe(1)\nexcept BaseException as error:\n    assert type(error) is SystemExit\n"
        "else:\n    raise AssertionError('no exception')\n",
        passes=True),
    "exit_is_a_builtin_that_raises_system_exit": Case(
        "def probe(x):\n    exit(0)\n",
        "try:\n    probe(1)\nexcept Exception:\n    pass\n",
        passes=False),
    "the_candidate_catches_its_own_quit": Case(
        "def probe(x):\n    try:\n        quit()\n    except SystemExit:\n        return x + 1\n",
        "assert probe(1) == 2\n",
        passes=True),
    "a_bare_except_swallows_the_candidates_own_sys_exit": Case(
        "import sys\ndef probe(x):\n    try:\n        sys.exit(3)\n    except:\n        return x\n",
        "assert probe(4) == 4\n",
        passes=True),
    "exit_caught_while_the_code_loads": Case(
        "try:\n    exit(1)\nexcept SystemExit:\n    pass\ndef probe(x):\n    return x\n",
        "assert probe(3) == 3\n",
        passes=True),
    "sys_exit_while_the_code_loads": Case(
        "import sys\nsys.exit(0)\ndef probe(x):\n    return x\n",
        "assert probe(3) == 3\n",
        passes=False),
    "a_subclass_of_a_built_in_exception_is_caught_as_its_base": Case(
        "class Bad(ValueError):\n    pass\ndef probe(x):\n    raise Bad(x)\n",
        "try:\n    probe(1)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError('no ValueError')\n",
        passes=True),
    "a_missing_entry_point": Case(
        "def other(x):\n    return x\n",
        "def check(candidate):\n    pass\ncheck(probe)\n",
        passes=False),
    # --- arguments mutated in place: the tests see the mutation, in their own objects
    "mutating_an_argument_the_tests_keep": Case(
        "def probe(xs):\n    xs.sort()\n    return xs[0]\n",
        "def check(candidate):\n    data = [3, 1, 2]\n    assert candidate(data) == 1\n    assert data == [3, 1, 2]\n"
        "check(probe)\n",
        passes=False),
    "a_mutation_the_tests_expect": Case(
        "def probe(xs):\n    xs.append(len(xs))\n",
        "data = [7]\nprobe(data)\nassert data == [7, 1]\n",
        passes=True),
    "nested_mutations_of_lists_sets_and_dicts": Case(
        "def probe(d):\n    d['k'].append(1)\n    d['s'].add(2)\n    del d['gone']\n    d['new'] = [3]\n",
        "inner, members = [], set()\nd = {'k': inner, 's': members, 'gone': 0}\nprobe(d)\n"
        "assert inner == [1] and members == {2} and d['k'] is inner and d['s'] is members\n"
        "assert d == {'k': [1], 's': {2}, 'new': [3]}\n",
        passes=True),
    "a_mutation_before_an_exception": Case(
        "def probe(xs):\n    xs.append(1)\n    raise ValueError('after')\n",
        "xs = []\ntry:\n    probe(xs)\nexcept ValueError:\n    pass\nassert xs == [1]\n",
        passes=True),
    "a_list_inside_a_tuple_argument": Case(
        "def probe(pair):\n    pair[0].append(pair[1])\n",
        "inner = []\nprobe((inner, 2))\nassert inner == [2]\n",
        passes=True),
    "a_counter_argument_mutated_stays_a_counter": Case(
        "def probe(counts):\n    counts['a'] += 5\n",
        "from collections import Counter\nc = Counter('ab')\nprobe(c)\n"
        "assert type(c) is Counter and c == Counter(a=6, b=1)\n",
        passes=True),
    # --- identity: an argument returned is the tests' own object
    "returning_an_argument": Case(
        "def probe(xs):\n    return xs\n",
        "x = [1]\nassert probe(x) is x\n",
        passes=True),
    "a_copy_was_expected": Case(
        "def probe(xs):\n    return xs\n",
        "x = [1]\ny = probe(x)\nassert y == x and y is not x\n",
        passes=False),
    "returning_a_member_of_an_argument": Case(
        "def probe(rows):\n    return rows[1]\n",
        "rows = [[1], [2]]\nassert probe(rows) is rows[1]\n",
        passes=True),
    # --- aliasing, within a call and across calls
    "one_object_twice_in_one_call": Case(
        "def probe(a, b):\n    a.append(1)\n    return len(b), a is b\n",
        "x = []\nassert probe(x, x) == (1, True)\n",
        passes=True),
    "one_object_twice_inside_an_argument": Case(
        "def probe(pair):\n    pair[0].append(1)\n    return pair[1]\n",
        "x = []\nassert probe([x, x]) == [1]\n",
        passes=True),
    "one_object_in_two_calls": Case(
        "seen = []\ndef probe(xs):\n    seen.append(xs)\n    return len(seen) > 1 and seen[0] is xs\n",
        "x = [1]\nassert probe(x) is False\nassert probe(x) is True\n",
        passes=True),
    "a_kept_argument_changed_in_a_later_call": Case(
        "kept = []\ndef probe(xs):\n    for old in kept:\n        old.append('late')\n    kept.append(xs)\n"
        "    return len(xs)\n",
        "a = [1]\nassert probe(a) == 1\nassert probe([2]) == 1\nassert a == [1]\n",
        passes=False),
    "a_kept_return_value_changed_in_a_later_call": Case(
        "cache = []\ndef probe(x):\n    cache.append(x)\n    return cache\n",
        "first = probe(1)\nprobe(2)\nassert first == [1]\n",
        passes=False),
    "one_object_returned_by_two_calls": Case(
        "cache = []\ndef probe(x):\n    cache.append(x)\n    return cache\n",
        "assert probe(1) is probe(2)\n",
        passes=True),
    "the_tests_change_what_the_candidate_kept": Case(
        "state = {'n': 0}\ndef probe():\n    state['n'] += 1\n    return state\n",
        "s = probe()\ns['n'] = 10\nassert probe()['n'] == 11 and s['n'] == 11\n",
        passes=True),
    # --- NaN: one object or two, as in one process
    "a_returned_nan_of_an_argument": Case(
        "def probe(xs):\n    return [xs[0]]\n",
        "nan = float('nan')\nassert probe([nan]) == [nan]\n",
        passes=True),
    "fresh_nans_are_two_objects": Case(
        "def probe():\n    return float('nan')\n",
        "assert [probe()] == [probe()]\n",
        passes=False),
    "one_nan_object_returned_twice": Case(
        "import math\ndef probe():\n    return math.nan\n",
        "assert [probe()] == [probe()]\n",
        passes=True),
    "two_nan_arguments_stay_two": Case(
        "def probe(a, b):\n    return len({a, b}), a is b\n",
        "assert probe(float('nan'), float('nan')) == (2, False)\n",
        passes=True),
    "the_sign_of_a_nan": Case(
        "def probe():\n    return -float('nan')\n",
        "import math\nassert math.copysign(1, probe()) == -1\n",
        passes=True),
    # --- values
    "negative_zero": Case(
        "def probe():\n    return -0.0\n",
        "import math\nassert math.copysign(1, probe()) == -1 and str(probe()) == '-0.0'\n",
        passes=True),
    "large_ints_both_ways": Case(
        "def probe(n):\n    return n * 10\n",
        "big = 10 ** 5000\nassert probe(big) == big * 10\n",
        passes=True),
    "a_large_int_raises_nothing_in_the_tests": Case(
        "def probe(n):\n    return 0\n",
        "try:\n    probe(10 ** 5000)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError('no ValueError')\n",
        passes=False),
    "bool_and_int_stay_apart": Case(
        "def probe(kind):\n    return True if kind else 1\n",
        "assert probe(True) is True and probe(False) is not True and type(probe(False)) is int and probe(True) == 1\n",
        passes=True),
    "a_list_is_not_a_tuple": Case(
        "def probe():\n    return [1, 2]\n",
        "assert probe() == (1, 2)\n",
        passes=False),
    "a_counter_compared_with_a_dict": Case(
        "import collections\ndef probe(s):\n    return collections.Counter(s)\n",
        "assert probe('aab') == {'a': 2, 'b': 1}\n",
        passes=True),
    "an_argument_that_is_not_plain_data_fails_a_test_expecting_type_error": Case(
        "def probe(x):\n    return len(x)\n",
        "try:\n    probe(b'ab')\nexcept TypeError:\n    pass\nelse:\n    raise AssertionError('no TypeError')\n",
        passes=False),
    # --- the entry point's name rebound by the candidate: check() keeps the function it was given
    "a_rebound_entry_point_in_check": Case(
        "def probe(x):\n    global probe\n    probe = lambda x: 'second'\n    return 'first'\n",
        "def check(candidate):\n    assert candidate(1) == 'first'\n    assert candidate(2) == 'first'\ncheck(probe)\n",
        passes=True),
    "a_rebound_entry_point_in_asserts": Case(
        "def probe(x):\n    global probe\n    probe = lambda x: 'second'\n    return 'first'\n",
        "assert probe(1) == 'first'\nassert probe(2) == 'second'\n",
        passes=True),
}

# Differences from plain Python (the sandbox's docstring says why): plain Python's verdict is
# ``case.passes``, the sandbox's the other one.
PINNED = {
    "identity_of_an_immutable_value": Case(
        "def probe(s):\n    return s\n",
        "s = ''.join(['ab', 'cd'])\nassert probe(s) is s\n",
        passes=True),
    "identity_of_an_immutable_value_with_is_not": Case(
        "def probe(s):\n    return s\n",
        "s = ''.join(['ab', 'cd'])\nassert probe(s) is not s\n",
        passes=False),
    "a_value_that_contains_itself": Case(
        "def probe():\n    x = []\n    x.append(x)\n    return x\n",
        "r = probe()\nassert r[0] is r\n",
        passes=True),
    "stop_iteration_ends_a_map_quietly_in_python": Case(
        "def probe(x):\n    raise StopIteration\n",
        "assert all(map(probe, range(3)))\n",
        passes=True),
    "an_exceptions_message_is_prefixed": Case(
        "def probe():\n    raise ValueError('bad')\n",
        "try:\n    probe()\nexcept ValueError as error:\n    assert str(error) == 'bad'\n",
        passes=True),
    "a_namedtuple_is_not_plain_data": Case(
        "import collections\nPoint = collections.namedtuple('Point', 'x y')\ndef probe():\n    return Point(1, 2)\n",
        "assert probe() == (1, 2)\n",
        passes=True),
    "a_generator_is_not_plain_data": Case(
        "def probe(n):\n    yield from range(n)\n",
        "assert list(probe(3)) == [0, 1, 2]\n",
        passes=True),
    "the_candidate_and_the_tests_share_no_module": Case(
        "import math\nmath.isclose = lambda *args, **kwargs: True\ndef probe():\n    return 0\n",
        "import math\nassert math.isclose(probe(), 1)\n",
        passes=True),
    "a_counter_returned_crosses_as_a_dict": Case(
        "import collections\ndef probe():\n    return collections.Counter('ab')\n",
        "import collections\nassert type(probe()) is collections.Counter\n",
        passes=True),
    "a_defaultdict_returned_has_no_default": Case(
        "import collections\ndef probe():\n    counts = collections.defaultdict(int)\n    counts['a'] += 1\n"
        "    return counts\n",
        "assert probe()['b'] == 0\n",
        passes=True),
    # the sandbox passes what plain Python fails: an OrderedDict is compared with an OrderedDict in order,
    # a dict is not; a Counter with a Counter ignoring zero counts, a dict does not
    "an_ordered_dict_returned_crosses_as_a_dict": Case(
        "import collections\ndef probe():\n    return collections.OrderedDict([('b', 1), ('a', 2)])\n",
        "import collections\nassert probe() == collections.OrderedDict([('a', 2), ('b', 1)])\n",
        passes=False),
    "a_counter_returned_is_compared_as_a_dict": Case(
        "import collections\ndef probe():\n    return collections.Counter(a=1, b=0)\n",
        "import collections\nassert probe() != collections.Counter(a=1)\n",
        passes=False),
}


@pytest.mark.parametrize("name", sorted(AGREE))
def test_the_sandbox_agrees_with_plain_python(name):
    case = AGREE[name]
    assert _plain_python_passes(case) is case.passes  # the construction does what it is meant to
    assert _sandbox_passes(case) is case.passes


@pytest.mark.parametrize("name", sorted(PINNED))
def test_each_documented_difference_from_plain_python(name):
    case = PINNED[name]
    assert _plain_python_passes(case) is case.passes
    assert _sandbox_passes(case) is not case.passes


def test_the_docstring_names_each_difference():
    doc = " ".join(sandbox.__doc__.split())
    assert "Differences from plain Python" in doc
    for words in ("identity", "is not", "contains itself", "StopIteration", "prefixed", "namedtuple", "generator",
                  "no global", "OrderedDict", "Counter", "defaultdict"):
        assert words in doc, words


# --- the link's sharing of objects, in this process: the two jails' code joined by pipes ------------------


@contextlib.contextmanager
def _linked(code: str):
    """The tests' namespace, its entry point ``probe`` a proxy of ``inside.CandidateLink`` to an
    ``inside.CandidateServer`` running ``code`` in a thread: the link without the jails."""
    namespace = {"__name__": "solution"}
    exec(textwrap.dedent(code), namespace)
    server = inside.CandidateServer(namespace, "probe")
    requests_read, requests_write = os.pipe()
    replies_read, replies_write = os.pipe()

    def serve():
        with os.fdopen(requests_read, "rb") as requests, os.fdopen(replies_write, "wb") as replies:
            replies.write(inside._dumps({"entry": server.entry()}))
            replies.flush()
            for line in requests:
                replies.write(server.answer(line))
                replies.flush()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    tests = {"__name__": "tests"}
    link = inside.CandidateLink(requests_write, replies_read, 64 * 1024**2, tests, "probe")
    try:
        link.start()
        yield tests, link, server
    finally:
        link.requests.close()
        thread.join(10)
        link.replies.close()


# A candidate that mutates what it is given or kept, at random (seeded by the tests): lists, dicts and sets,
# objects added twice, new lists, NaNs old and new; it keeps some objects and returns one, or a new one.
MUTATING_CANDIDATE = """
import random
KEPT = []

def probe(root, seed):
    rng = random.Random(seed)
    found = []
    def walk(value):
        if any(value is seen for seen in found):
            return
        if type(value) in (list, dict, set) or (type(value) is float and value != value):
            found.append(value)
        if type(value) in (list, tuple):
            for item in value:
                walk(item)
        elif type(value) is dict:
            for item in value.values():
                walk(item)
    walk(root)
    for kept in KEPT:
        walk(kept)
    containers = [value for value in found if type(value) is not float]
    nans = [value for value in found if type(value) is float]
    def leaf(target):  # a container that holds none: added anywhere but to itself, it makes no cycle
        leaves = [c for c in containers if c is not target and not any(
            type(item) in (list, dict, set, tuple) for item in (c.values() if type(c) is dict else c))]
        return rng.choice(leaves) if leaves else []
    for _ in range(rng.randrange(5)):
        target = rng.choice(containers)
        op = rng.randrange(7)
        if type(target) is list:
            if op == 0:
                target.append(rng.randrange(5))
            elif op == 1 and target:
                target.pop(rng.randrange(len(target)))
            elif op == 2:
                target.append(leaf(target))
            elif op == 3:
                target.append([rng.randrange(3), (leaf(target),)])
            elif op == 4:
                target.append(rng.choice(nans) if nans and rng.random() < 0.5 else float("nan"))
            elif op == 5 and target:
                target[rng.randrange(len(target))] = {"n": rng.randrange(3)}
            else:
                target.reverse()
        elif type(target) is dict:
            key = rng.choice(["a", "b", "c", 1, (1, 2)])
            if op < 3:
                target[key] = rng.choice([leaf(target), 0, 1.5, -0.0])
            elif op < 5:
                target.pop(key, None)
            else:
                target[key] = True
        elif op < 4:
            target.add(rng.randrange(6))
        else:
            target.discard(rng.randrange(6))
    if rng.random() < 0.3:
        KEPT.append(rng.choice(containers))
    choice = rng.randrange(4)
    if choice == 0:
        return rng.choice(found)
    if choice == 1:
        return [rng.choice(found), rng.choice(found)]
    if choice == 2:
        return (rng.randrange(3), rng.choice(containers))
    return KEPT[-1] if KEPT else None
"""

# Tests that record, after each call, what they hold: values, types, and which objects are one object.
RECORDING_TESTS = """
def canonical(roots):
    numbers = {}
    def walk(value):
        kind = type(value)
        if kind in (list, dict, set) or (kind is float and value != value):
            if id(value) in numbers:
                return ("ref", numbers[id(value)])
            numbers[id(value)] = number = len(numbers)
            if kind is list:
                return ("list", number, [walk(item) for item in value])
            if kind is set:
                return ("set", number, sorted(map(repr, value)))
            if kind is dict:
                return ("dict", number, [(walk(key), walk(item)) for key, item in value.items()])
            return ("nan", number)
        if kind is tuple:
            return ("tuple", [walk(item) for item in value])
        return (kind.__name__, repr(value))
    return walk(roots)

def record(seeds):
    nan = float("nan")
    inner = [1, 2]
    x = [inner, {"k": inner, "s": {1, 2}}, (inner, 3), nan, [nan], {"d": []}]
    results, trace = [], []
    for i, seed in enumerate(seeds):
        results.append(probe(x, seed))
        trace.append(canonical([x, results]))
        if i % 3 == 1 and type(results[-1]) is list:
            results[-1].append("changed by the tests")
        if i % 4 == 2:
            x.append(i)
        if i % 5 == 3 and len(results) > 2:
            del results[0]
    trace.append(canonical([x, results]))
    return trace
"""


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 10**9), min_size=1, max_size=12))
def test_the_link_shares_objects_as_one_process_does(seeds):
    one_process = {}
    exec(MUTATING_CANDIDATE, one_process)
    exec(RECORDING_TESTS, one_process)
    expected = one_process["record"](seeds)
    with _linked(MUTATING_CANDIDATE) as (tests, link, _):
        exec(RECORDING_TESTS, tests)
        assert tests["record"](seeds) == expected
        assert not link.broken


def test_objects_neither_side_holds_stop_being_shared():
    code = """
        KEPT = []
        def probe(xs, keep=False):
            xs.append(float("nan"))
            if keep:
                KEPT.append(xs)
            return [xs, (xs,), {"k": [1.5]}]
        """
    with _linked(code) as (tests, link, server):
        exec("for i in range(50):\n    r = probe([i], keep=i % 2 == 0)\n", tests)
        tests["probe"]([0])  # each side forgets, before its next message, what it no longer holds
        assert link.mirror.objects == server.mirror.objects == {}
        exec("for i in range(50):\n    r = probe([i], keep=True)\n", tests)
        # shared: what both hold, the candidate in KEPT and the tests in r: the last call's argument and the
        # one before it (in r until the last call returned), each with its NaN
        assert set(link.mirror.objects) == set(server.mirror.objects)
        assert len(server.mirror.objects) == 4 and len(server.namespace["KEPT"]) == 75
        assert not link.broken
