"""One scoring run: the candidate's jail, the tests' jail, the pipes between them, the verdict."""

from __future__ import annotations

import json
import os
import signal
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from typing import IO

from canvaslab.scoring.sandbox.jail import Isolation, Jail, SandboxLimits, require_isolation

_CPU_LIMIT_STATUSES = {128 + signal.SIGXCPU, -signal.SIGXCPU}  # bwrap reports a signal's death as 128 + signal
# A candidate that ignores SIGXCPU meets the hard limit a second later, which is SIGKILL; so can one that
# kills itself. Either way its answer is none, and the failure says so rather than "the link broke".
_KILLED_STATUSES = {128 + signal.SIGKILL, -signal.SIGKILL}


@dataclass(frozen=True)
class SandboxResult:
    """What a scoring run did. ``passed``: the trusted tests ran to their end and every call of the
    candidate came back as plain data (``failure`` says why not, in one line)."""

    passed: bool
    timed_out: bool
    failure: str
    calls: int
    candidate_output: str  # the tail of what the candidate printed (stdout and stderr)
    tests_output: str  # the tail of the tests' output (a failing test's traceback)
    elapsed_s: float


def run_tests(
    code: str, entry_point: str, tests: str, prelude: str = "", limits: SandboxLimits | None = None
) -> SandboxResult:
    """Run ``tests`` (trusted, after the trusted ``prelude``) against ``entry_point`` of ``code``
    (untrusted), each in its own jail; raises SandboxUnavailable where jails cannot be had."""
    limits = limits or SandboxLimits()
    isolation = require_isolation()
    start = time.monotonic()
    with ExitStack() as stack:
        code_file, setup_file, candidate_output, tests_output, verdict_file = (
            stack.enter_context(tempfile.TemporaryFile()) for _ in range(5)
        )
        # surrogatepass: a lone surrogate (possible in text reloaded from JSON) reaches the jail as the
        # invalid UTF-8 it is, where compiling fails: a failed verdict, not an error here
        _fill(code_file, code.encode("utf-8", errors="surrogatepass"))
        _fill(setup_file, json.dumps({"entry_point": entry_point, "tests": tests, "prelude": prelude}).encode())
        candidate, tester = _start_jails(isolation, stack, limits, entry_point, code_file, setup_file,
                                         (candidate_output, tests_output), verdict_file)
        candidate.attach()  # both started before either is waited for: their setups overlap
        finished = tester.wait(limits.timeout_s - (time.monotonic() - start))
        candidate_status = candidate.process.poll()  # None: still serving, as it should be
        tests_status = tester.kill()
        verdict = _read_verdict(verdict_file) if finished and tests_status == 0 else None
        if candidate_status is None and verdict is not None and str(verdict["failure"]).startswith("LinkBroken"):
            candidate.wait(2.0)  # the link broke as the candidate died: how it died, once bwrap reports it
            candidate_status = candidate.process.poll()
        candidate.kill()
        elapsed = time.monotonic() - start
        timed_out = not finished or bool({tests_status, candidate_status} & _CPU_LIMIT_STATUSES)
        return SandboxResult(
            passed=verdict is not None and verdict["passed"] is True and not timed_out,
            timed_out=timed_out,
            failure=_failure(verdict, finished, tests_status, timed_out, candidate_status),
            calls=verdict["calls"] if verdict else 0,
            candidate_output=_tail(candidate_output, limits.max_output_chars),
            tests_output=_tail(tests_output, limits.max_output_chars),
            elapsed_s=elapsed,
        )


def _start_jails(isolation: Isolation, stack: ExitStack, limits: SandboxLimits, entry_point: str,
                 code_file: IO[bytes], setup_file: IO[bytes], outputs: tuple[IO[bytes], IO[bytes]],
                 verdict_file: IO[bytes]) -> tuple[Jail, Jail]:
    """The candidate's jail and the tests' jail, joined by a pipe each way; killed when ``stack`` ends."""
    requests_read, requests_write = os.pipe()
    replies_read, replies_write = os.pipe()
    try:
        candidate_fds = (code_file.fileno(), requests_read, replies_write)
        candidate = stack.enter_context(isolation.start(
            ["candidate", *map(str, candidate_fds), entry_point], limits, outputs[0], candidate_fds))
        tests_fds = (setup_file.fileno(), requests_write, replies_read, verdict_file.fileno())
        tester = stack.enter_context(isolation.start(
            ["tests", *map(str, tests_fds), str(limits.max_message_bytes)], limits, outputs[1], tests_fds))
    finally:  # the jails hold their own copies
        for fd in (requests_read, requests_write, replies_read, replies_write):
            os.close(fd)
    return candidate, tester


def _fill(handle: IO[bytes], data: bytes) -> None:
    handle.write(data)
    handle.flush()
    handle.seek(0)


def _read_verdict(handle: IO[bytes]) -> dict[str, object] | None:
    """The tests' verdict, if it is exactly the shape the tests' jail writes."""
    handle.seek(0)
    try:
        verdict = json.loads(handle.read(64 * 1024))
    except ValueError:
        return None
    if not isinstance(verdict, dict) or verdict.keys() != {"passed", "calls", "failure"}:
        return None
    return verdict


def _failure(verdict: dict[str, object] | None, finished: bool, tests_status: int, timed_out: bool,
             candidate_status: int | None) -> str:
    if verdict is not None and verdict["passed"] is True and not timed_out:
        return ""
    if timed_out:
        return "time limit reached" if not finished else "CPU time limit reached"
    if candidate_status in _KILLED_STATUSES:
        return ("the candidate's process was killed (SIGKILL): its CPU-time hard limit after an ignored "
                "SIGXCPU, or the candidate itself")
    if verdict is None:
        return f"the tests' jail ended with status {tests_status} without a verdict"
    return str(verdict["failure"])


def _tail(handle: IO[bytes], max_chars: int) -> str:
    """The last ``max_chars`` characters of a captured stream (read from the end: it may be large)."""
    handle.seek(0, os.SEEK_END)
    size = handle.tell()
    handle.seek(max(0, size - 4 * max_chars))
    return handle.read().decode("utf-8", errors="replace")[-max_chars:]
