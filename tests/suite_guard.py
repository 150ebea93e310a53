"""A pytest plugin that makes a suite which stopped early say so in its last line.

pytest's closing summary counts only the tests that ran: after an internal error, an interrupt or ``-x`` it can
read "618 passed" with no failure in it while most of the suite never ran. This plugin compares the tests that
reported a result with the tests collected and, when they differ or pytest ended abnormally, prints one last
line that says how far the suite got and why it ended (tests/conftest.py loads it for every run of the suite).
"""

from __future__ import annotations

import pytest

_EXIT_REASONS = {
    pytest.ExitCode.INTERRUPTED: "interrupted",
    pytest.ExitCode.INTERNAL_ERROR: "pytest's internal error",
    pytest.ExitCode.USAGE_ERROR: "a usage error",
    pytest.ExitCode.NO_TESTS_COLLECTED: "no tests collected",
}


class SuiteGuard:
    """Counts the tests collected and the tests that reported a result, and prints the line at the end."""

    def __init__(self) -> None:
        self.collected: int | None = None
        self.finished: set[str] = set()
        self.exitstatus: int | None = None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.collected = len(session.items)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # a test has a result once its call ran, or once its setup failed or skipped it
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self.finished.add(report.nodeid)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.exitstatus = int(exitstatus)

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.exitstatus is None:
            return
        line = stopped_early_line(self.collected, len(self.finished), self.exitstatus)
        if line is not None:
            print(line, flush=True)


def stopped_early_line(collected: int | None, finished: int, exitstatus: int) -> str | None:
    """The last line for a suite that did not run to its end, or None when every collected test has a result."""
    reason = _EXIT_REASONS.get(exitstatus)
    if collected is None:
        return f"SUITE STOPPED EARLY: collection did not finish ({reason or f'exit status {exitstatus}'})"
    if reason is None and finished >= collected:
        return None
    why = reason or "stopped before the end"
    return (f"SUITE STOPPED EARLY: {finished} of {collected} collected tests ran ({why}, exit status {exitstatus}); "
            f"the summary above is not the whole suite's result")
