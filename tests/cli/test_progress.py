"""Progress counts finished units; without a terminal it is periodic plain lines on stderr."""

from __future__ import annotations

import io
import time

from canvaslab.cli.progress import BarProgress, PlainProgress, progress


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_on_start_on_finished_units_and_at_the_end():
    clock, out = FakeClock(), io.StringIO()
    with PlainProgress("study", "runs", out, min_gap=10, heartbeat=0, clock=clock) as report:
        report(0, 3, "a: B=2")        # a run starts: nothing finished, no line
        clock.now = 12
        report(1, 3, "b: B=2")        # one finished, 12 s since the last line: printed
        clock.now = 14
        report(2, 3, "c: B=2")        # finished, but 2 s after the last line: held back
        clock.now = 15
        report(3, 3, "")              # the last one is always printed
    assert out.getvalue().splitlines() == [
        "study: started, 0:00:00",
        "study: 1/3 runs finished, 0:00:12, about 0:00:24 left; running b: B=2",
        "study: 3/3 runs finished, 0:00:15",
    ]


def test_heartbeat_while_a_long_unit_runs():
    clock, out = FakeClock(), io.StringIO()
    report = PlainProgress("study", "runs", out, heartbeat=30, clock=clock)
    report(0, 2, "a: B=1 reference")
    clock.now = 29
    report.beat()
    assert out.getvalue() == ""
    clock.now = 31
    report.beat()
    assert out.getvalue().splitlines() == ["study: 0/2 runs finished, 0:00:31; running a: B=1 reference"]


def test_heartbeat_thread_prints_without_any_update():
    out = io.StringIO()
    with PlainProgress("study", "runs", out, heartbeat=0.05) as report:
        report(0, 2, "a")
        time.sleep(1.5)
    lines = out.getvalue().splitlines()
    assert lines[0] == "study: started, 0:00:00"
    assert any(line.startswith("study: 0/2 runs finished") for line in lines[1:]), lines


def test_progress_is_plain_without_a_terminal_and_a_bar_on_one():
    assert isinstance(progress("study", "runs", io.StringIO()), PlainProgress)

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert isinstance(progress("study", "runs", Terminal()), BarProgress)


def test_time_left_at_the_pace_of_the_units_finished_in_this_run():
    clock, out = FakeClock(), io.StringIO()
    report = PlainProgress("study", "runs", out, min_gap=0, heartbeat=30, clock=clock)
    clock.now = 5
    report(4, 10, "e")                # a resumed study: 4 done before, not timed here
    assert report.seconds_left() is None
    clock.now = 25
    report(6, 10, "g")                # 2 runs in 20 s: 4 left, about 40 s
    assert report.seconds_left() == 40
    clock.now = 35                    # 10 s into the next run
    assert report.seconds_left() == 30
    report.beat()                     # no heartbeat yet (10 s since the last line)
    clock.now = 56
    report.beat()
    assert out.getvalue().splitlines()[-1] == "study: 6/10 runs finished, 0:00:56, about 0:00:09 left; running g"
    clock.now = 200                   # slower than the pace so far: never a negative time
    assert report.seconds_left() == 0
    report(10, 10, "")
    assert report.seconds_left() is None and out.getvalue().splitlines()[-1] == "study: 10/10 runs finished, 0:03:20"


def test_the_bar_shows_the_time_left():
    from rich.console import Console

    bar = BarProgress("study", "runs", Console(file=io.StringIO()))
    assert any(type(column).__name__ == "TimeRemainingColumn" for column in bar.bar.columns)
