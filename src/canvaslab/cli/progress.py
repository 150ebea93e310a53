"""Progress of a long command, counted in FINISHED units (runs, conditions, generations).

On a terminal: rich's bar on stderr, gone when the command ends. Otherwise (a log file, a pipe, CI) a bar
would print nothing useful, so plain lines go to stderr: one when the work starts, one when a unit finishes
(at most one per ``min_gap`` seconds, and always the last), and a heartbeat every ``heartbeat`` seconds
while a long unit runs, so a log never sits silent for minutes. Where the total is known, each line and the bar
say about how long is left, at the pace of the units finished so far in this run (units a resumed study skips
do not count). Every study calls
``progress(done, total, doing)``, ``doing`` naming the unit now running, or a later phase of other units
(``Phased``: the commit-order study's ``baseline``, counted in probes). ``doing`` may hold a prompt id or
other text from outside: it is shown with its control characters escaped and never read as markup.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, Optional, TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from canvaslab.terminal import printable


def _clock_text(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"


class PlainProgress:
    """Periodic plain lines for a log (see the module docstring)."""

    def __init__(self, description: str, unit: str, stream: TextIO, min_gap: float = 10.0, heartbeat: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        self.description, self.unit, self.stream = description, unit, stream
        self.min_gap, self.heartbeat, self.clock = min_gap, heartbeat, clock
        self.done, self.total, self.doing = 0, None, ""
        self.started = self.last_line = clock()
        self.pace_from: Optional[tuple[int, float]] = None  # (done, time) of the first report: the ETA's start
        self.last_finished = self.started
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: Optional[threading.Thread] = None

    def __enter__(self) -> "PlainProgress":
        self._print()
        if self.heartbeat > 0:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()

    def __call__(self, done: int, total: Optional[int], doing: str = "") -> None:
        with self._lock:
            finished_one = done != self.done
            self.done, self.total, self.doing = done, total, doing
            now = self.clock()
            if self.pace_from is None:
                self.pace_from = (done, now)
            if finished_one:
                self.last_finished = now
            if finished_one and (now - self.last_line >= self.min_gap or done == total):
                self._print()

    def _tick(self) -> None:
        while not self._stop.wait(min(self.heartbeat, 1.0)):
            self.beat()

    def beat(self) -> None:
        """A line if none was printed for ``heartbeat`` seconds (the ticker calls this once a second)."""
        with self._lock:
            if self.clock() - self.last_line >= self.heartbeat:
                self._print()

    def line(self) -> str:
        elapsed = _clock_text(self.clock() - self.started)
        if self.total is None:
            return f"{self.description}: started, {elapsed}"
        text = f"{self.description}: {self.done}/{self.total} {self.unit} finished, {elapsed}"
        left = self.seconds_left()
        if left is not None:
            text += f", about {_clock_text(left)} left"
        return text + (f"; running {printable(self.doing)}" if self.doing and self.done != self.total else "")

    def seconds_left(self) -> Optional[float]:
        """The units left times the mean time of a unit finished in this run, less the time the current one has
        already run; None before one finished or once all did."""
        if self.total is None or self.pace_from is None or self.done >= self.total:
            return None
        first_done, first_time = self.pace_from
        finished = self.done - first_done
        if finished <= 0:
            return None
        per_unit = (self.last_finished - first_time) / finished
        return max(0.0, per_unit * (self.total - self.done) - (self.clock() - self.last_finished))

    def _print(self) -> None:
        print(self.line(), file=self.stream, flush=True)
        self.last_line = self.clock()


class BarProgress:
    """rich's bar, on stderr, transient."""

    def __init__(self, description: str, unit: str, console: Console):
        self.description = description
        self.bar = Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                            TextColumn(f"{{task.completed}}/{{task.total}} {unit}"), TimeElapsedColumn(),
                            TextColumn("left"), TimeRemainingColumn(),
                            console=console, transient=True)
        self.task = None

    def __enter__(self) -> "BarProgress":
        self.bar.__enter__()
        self.task = self.bar.add_task(printable(self.description), total=None)
        return self

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)

    def __call__(self, done: int, total: Optional[int], doing: str = "") -> None:
        self.bar.update(self.task, completed=done, total=total, description=printable(doing or self.description))


def progress(description: str, unit: str, stream: Optional[TextIO] = None):
    """A context manager whose value is the ``progress(done, total, doing)`` callback of a study."""
    stream = stream or sys.stderr
    console = Console(file=stream)
    if console.is_terminal:
        return BarProgress(description, unit, console)
    return PlainProgress(description, unit, stream)


class Deferred:
    """A progress display started by the first report, not before: what fails while a study is checked and its
    model loaded (a bad prompt file, a damaged folder, a missing model) is one line with no progress line."""

    def __init__(self, display):
        self.display, self.started = display, False

    def __enter__(self) -> "Deferred":
        return self

    def __exit__(self, *exc) -> None:
        if self.started:
            self.display.__exit__(*exc)

    def __call__(self, done: int, total: Optional[int], doing: str = "") -> None:
        if not self.started:
            self.display.__enter__()
            self.started = True
        self.display(done, total, doing)


class Phased:
    """One progress callback for a study with later phases of other units: a report whose ``doing`` names a
    phase (``phases``: name -> unit) ends the display so far and counts on in a display of that phase's own, so
    that the commit-order study's baseline probes are not shown as its generations."""

    def __init__(self, display, phases: dict[str, str], stream: Optional[TextIO] = None):
        self.display, self.phases, self.stream, self.phase = display, phases, stream, None

    def __enter__(self) -> "Phased":
        return self

    def __exit__(self, *exc) -> None:
        self.display.__exit__(*exc)

    def __call__(self, done: int, total: Optional[int], doing: str = "") -> None:
        if doing in self.phases and doing != self.phase:
            self.display.__exit__(None, None, None)
            self.display, self.phase = Deferred(progress(doing, self.phases[doing], self.stream)), doing
        self.display(done, total, "" if doing == self.phase else doing)
