"""Continuous batching for ``canvaslab serve``: one denoising pass is the scheduling unit.

Between two passes, on the event loop, the rows whose client went away leave and the oldest waiting rows take the
free places (up to ``max_batch`` rows). Then, on the model thread, each joining row's prompt is encoded alone and
one decoder pass runs over every present row (``canvaslab.generation.stepper``). A row that finished its last
canvas leaves at once: its answer is delivered and its place is free for the next pass. Rows that need different
numbers of canvases, at different passes of different canvases, share a pass.

A row's random stream is keyed by the row (``row_key``), and in invariant mode the pass is batch-invariant, so a
row's tokens, text, stop point and stream chunks are the bytes it gets alone, whoever joins or leaves around it.

A pass that raises is rerun row by row, so one bad row fails only its own request; a row whose prompt cannot be
encoded fails alone too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from canvaslab.generation.stepper import PassReport, PassStepper, RowState
    from canvaslab.serving.engine import Engine, Row, RowStream

log = logging.getLogger("canvaslab.serving")


@dataclass(eq=False)
class _Running:
    """A row in the running batch: its request's row, its generation state, its stream and where it ran."""

    row: "Row"
    state: "RowState"
    stream: Optional["RowStream"]
    joined: float
    widest: int = 0  # the most rows a pass of it had


@dataclass
class _PassResult:
    joined: list[_Running] = field(default_factory=list)
    failed: list[tuple["Row", BaseException]] = field(default_factory=list)
    seconds: float = 0.0


class ContinuousBatching:
    """The engine's batching task in continuous mode (see the module)."""

    def __init__(self, engine: "Engine"):
        from canvaslab.generation.stepper import PassStepper

        self.engine = engine
        self.stepper: PassStepper = PassStepper(engine.loaded, mode=engine.settings.mode)
        self.running: list[_Running] = []

    async def run(self) -> None:
        engine, loop = self.engine, asyncio.get_running_loop()
        while True:
            self.running = [entry for entry in self.running if not entry.row.cancelled]
            joining = self._joining()
            if not self.running and not joining:
                if engine.closing:
                    return
                engine._arrived.clear()
                await engine._arrived.wait()
                continue
            engine.metrics.queue_rows.set(len(engine._pending))
            try:
                result = await loop.run_in_executor(engine._worker, self._pass, joining, loop)
            except Exception as error:  # the worker itself failed (a pass's own failures are caught there)
                log.exception("the model thread failed")
                result = _PassResult(failed=[(entry.row, error) for entry in self.running] +
                                     [(row, error) for row in joining])
                self.running = []
            for row, error in result.failed:
                engine._deliver(row, error)
            self._leave(loop)

    def _joining(self) -> list["Row"]:
        """The oldest waiting rows, as many as there are free places, taken from the queue."""
        engine = self.engine
        joining = []
        while engine._pending and len(self.running) + len(joining) < engine.settings.max_batch:
            row = engine._pending.popleft()
            if not row.cancelled:
                joining.append(row)
        return joining

    def _leave(self, loop) -> None:
        """Deliver the rows that finished; the rest stay for the next pass."""
        engine, staying = self.engine, []
        now = loop.time()
        for entry in self.running:
            if not entry.state.done:
                staying.append(entry)
                continue
            result = self.stepper.result(entry.state)
            outcome = engine._outcome(entry.row, result, entry.widest, self._slot(entry))
            engine.metrics.tokens.inc(len(outcome.token_ids))
            seconds = now - entry.joined
            engine._batch_seconds = seconds if not engine._batch_seconds else \
                0.8 * engine._batch_seconds + 0.2 * seconds
            engine._deliver(entry.row, outcome)
        self.running = staying
        engine.metrics.running_rows.set(len(staying))

    def _slot(self, entry: _Running) -> int:
        return self.running.index(entry)

    # ---- the model thread ----------------------------------------------------------------------------------

    def _pass(self, joining: list["Row"], loop) -> _PassResult:
        """The joining rows started, then passes over every running row until one waits, leaves or fails."""
        engine, result = self.engine, _PassResult()
        for row in joining:
            try:
                state = self.stepper.start(row.prompt_ids, row.key, engine.generation_settings(row))
            except Exception as error:
                log.exception("a row's prompt could not be encoded")
                engine.metrics.failed_rows.inc()
                result.failed.append((row, RuntimeError(f"the model raised while encoding the prompt "
                                                        f"({type(error).__name__})")))
                continue
            stream = engine.row_stream(row, loop)
            self.running.append(_Running(row, state, stream, loop.time()))
        # Until a row leaves, is cancelled or a waiting row has a free place, the next pass follows on this thread:
        # a return to the event loop between passes would leave the model idle while the loop serves connections.
        while self.running and self._one_pass(result) and not self._place_for_waiting() and not any(
                entry.state.done or entry.row.cancelled for entry in self.running):
            pass
        return result

    def _place_for_waiting(self) -> bool:
        engine = self.engine
        return bool(engine._pending) and len(self.running) < engine.settings.max_batch

    def _one_pass(self, result: _PassResult) -> bool:
        """One pass over the running rows; False when a row failed (its error is to be delivered)."""
        engine = self.engine
        started = time.perf_counter()
        try:
            reports = self.stepper.step([entry.state for entry in self.running])
        except Exception:
            log.exception("a pass of %d rows failed%s", len(self.running),
                          "; rerunning its rows one by one" if len(self.running) > 1 else "")
            reports = self._alone(result)
        result.seconds = time.perf_counter() - started
        engine.metrics.passes.inc()
        engine.metrics.pass_rows.observe(len(reports))
        engine.metrics.pass_seconds.observe(result.seconds)
        engine.batch_sizes[len(reports)] += 1
        for report in reports:
            entry = next(entry for entry in self.running if entry.state is report.row)
            entry.widest = max(entry.widest, len(reports))
            if entry.stream is not None:
                entry.stream.draft(report.draft)
                if report.committed is not None:
                    entry.stream.commit(report.committed)
        return not result.failed

    def _alone(self, result: _PassResult) -> list["PassReport"]:
        """The pass rerun for each row alone; a row that fails alone leaves with its error."""
        if len(self.running) > 1:
            self.engine.metrics.batch_retries.inc()
        reports, staying = [], []
        for entry in self.running:
            try:
                reports.extend(self.stepper.step([entry.state]))
                staying.append(entry)
            except Exception as error:
                log.exception("a row failed alone")
                self.engine.metrics.failed_rows.inc()
                result.failed.append((entry.row, RuntimeError(f"the model raised while generating "
                                                              f"({type(error).__name__})")))
        self.running = staying
        return reports
