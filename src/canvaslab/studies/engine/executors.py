"""Executors: who runs a study's pending units. ``local``: this process, one model. ``ray``: a pool of
model-holding Ray actors (one per GPU, or per CPU worker on a CPU cluster) on one node or a cluster.

Both follow the same rules, so a study's result never depends on the executor:
- groups come from the plan (``Study.groups``), and only their pending units are run;
- a unit counts once its record is in the store; the store is written by this process only (Ray
  workers send records back), under per-unit locks, so two drivers on one DIR never run a unit twice;
- a group that raises is retried ``retries`` times, then its unfinished units are recorded as failed
  with the error, and the other groups go on; a rerun tries failed units again;
- ``progress(done, total, doing)`` counts finished units (those found done included), and
  ``Outcome.line()`` is the final line: how many ran, were skipped as already done, were finished meanwhile by
  another process on the same folder, and failed.
"""

from __future__ import annotations

import os
import socket
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from canvaslab.choices import EXECUTORS
from canvaslab.errors import CanvaslabError, RunFailed
from canvaslab.studies.engine.plan import first_difference
from canvaslab.studies.engine.store import Store
from canvaslab.studies.engine.study import Study

Progress = Callable[[int, int, str], None]


@dataclass
class Outcome:
    total: int
    skipped: int = 0
    ran: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    by_others: int = 0  # finished during this run by another process on the same folder

    @property
    def done(self) -> int:
        return self.skipped + self.ran

    def line(self, label: str = "units") -> str:
        others = f", {self.by_others} finished by another process" if self.by_others else ""
        return (f"{label}: {self.ran} ran, {self.skipped} skipped as already done{others}, {len(self.failed)} failed"
                + (f" (first: {next(iter(self.failed))}: {next(iter(self.failed.values()))})" if self.failed else ""))


def _error_text(error: BaseException) -> str:
    last = str(error).strip().splitlines()[-1:] or [""]
    return f"{type(error).__name__}: {last[0]}"[:500]


def _worker_info(study: Study, state: Any) -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), **study.worker_info(state)}


class _Claims:
    """The locks this process holds, per unit."""

    def __init__(self, store: Store):
        self.store, self.held = store, {}

    def take(self, units: list[str], wait: bool) -> tuple[list[str], list[str]]:
        """(units now ours and still pending, units another process holds)."""
        ours, busy = [], []
        for unit in units:
            lock = self.store.lock(unit)
            if not lock.acquire(wait):
                busy.append(unit)
            elif self.store.has(unit):  # finished by another process meanwhile
                lock.release()
            else:
                self.held[unit] = lock
                ours.append(unit)
        return ours, busy

    def release(self, unit: str) -> None:
        lock = self.held.pop(unit, None)
        if lock is not None:
            lock.release()

    def release_all(self) -> None:
        for unit in list(self.held):
            self.release(unit)


class _Driver:
    """What both executors share: the pending groups, claims, storing, failures and progress."""

    def __init__(self, study: Study, store: Store, retries: int, progress: Progress | None,
                 limit: int | None = None):
        self.study, self.store, self.retries = study, store, retries
        self.units = study.units()
        self.notify = progress or (lambda done, total, doing: None)
        stored = store.stored(self.units)
        finished = set(stored)
        # The numerics of the records already here: a resume must produce records under the same ones
        self.numerics = next((numerics_of(s["worker"]) for s in stored.values() if numerics_of(s["worker"])), None)
        self.outcome = Outcome(total=len(self.units), skipped=len(finished))
        groups = study.groups()
        # --limit N: only the first N pending units (in group order) run this time
        self.allowed = [u for g in groups for u in g if u not in finished][:limit]
        allowed = set(self.allowed)
        self.groups = [g for g in groups if any(u in allowed for u in g)]
        self.claims = _Claims(store)

    def pending(self, group: list[str]) -> list[str]:
        allowed = set(self.allowed)
        return [unit for unit in group if unit in allowed and not self.store.has(unit)]

    def stored(self, unit: str, record: dict[str, Any], worker: dict[str, Any]) -> None:
        self.check_numerics(worker)
        self.store.save(unit, record, worker)
        self.claims.release(unit)
        self.outcome.ran += 1
        self.notify(self.outcome.done, self.outcome.total, "")

    def check_numerics(self, worker: dict[str, Any]) -> None:
        """Refuse to store a record made under other numerics than the folder's other records (e.g. a
        local study resumed on Ray, whose CPU workers compute with one torch thread): one study, one set."""
        numerics = numerics_of(worker)
        if not numerics:
            return
        if self.numerics is None:
            self.numerics = numerics
            return
        where = first_difference(self.numerics, numerics)
        if where is not None:
            raise CanvaslabError(
                f"{self.store.root.parent} holds records made with {where} = {self.numerics[where]!r}, but this run's "
                f"worker has {numerics[where]!r}; resume it the way it was started (same executor, device and "
                "threads), or --fresh to start over")

    def finished(self) -> Outcome:
        """The outcome, with the units another process on the same folder finished while this one ran."""
        # only the units this run was to run (pending at its start, within --limit): a limited run does not count
        # the other process's units outside its limit
        stored = sum(1 for unit in self.allowed if unit not in self.outcome.failed and self.store.has(unit))
        self.outcome.by_others = max(0, stored - self.outcome.ran)
        return self.outcome

    def failed(self, units: list[str], error: str, attempts: int) -> None:
        for unit in units:
            self.store.fail(unit, error, attempts)
            self.claims.release(unit)
            self.outcome.failed[unit] = error


# The parts of a worker's environment that decide a record's numbers (torch's thread count only on CPU,
# where a reduction may be split by it).
NUMERICS = ("device", "device_type", "cpu_capability", "dtype", "torch", "transformers", "attn_implementation",
            "experts_implementation", "torch_threads")


def numerics_of(worker: dict[str, Any]) -> dict[str, Any]:
    environment = worker.get("environment") or {}
    numerics = {key: environment.get(key) for key in NUMERICS if key in environment}
    if numerics.get("device_type") != "cpu":
        numerics.pop("torch_threads", None)
    return numerics


def run_local(study: Study, store: Store, *, retries: int = 0, progress: Progress | None = None,
              state: Any = None, limit: int | None = None) -> Outcome:
    """Run the pending units in this process; ``state`` is a prepared worker state (else prepared lazily:
    a model that cannot load is the command's error, not a unit's failure)."""
    driver = _Driver(study, store, retries, progress, limit)
    prepared = [state]
    driver.notify(driver.outcome.done, driver.outcome.total, "")
    try:
        deferred = []
        for group in driver.groups:
            todo, busy = driver.claims.take(driver.pending(group), wait=False)
            if busy:
                deferred.append(group)
            _run_group_locally(driver, prepared, group, todo)
        for group in deferred:  # held by another process: wait for it, then run what it left undone
            todo, _ = driver.claims.take(driver.pending(group), wait=True)
            _run_group_locally(driver, prepared, group, todo)
    finally:
        driver.claims.release_all()
    return driver.finished()


def _run_group_locally(driver: _Driver, prepared: list, group: list[str], todo: list[str]) -> None:
    remaining, attempts = list(todo), 0
    if remaining and prepared[0] is None:
        prepared[0] = driver.study.prepare()
    worker = _worker_info(driver.study, prepared[0]) if remaining else {}
    driver.check_numerics(worker)  # before any unit runs: a refusal is not a unit's failure
    while remaining:
        driver.notify(driver.outcome.done, driver.outcome.total, ", ".join(remaining[:3]))
        try:
            for unit, record in driver.study.run_group(prepared[0], group, list(remaining)):
                driver.stored(unit, record, worker)
                remaining.remove(unit)
            if remaining:
                raise RuntimeError(f"the study returned no record for {remaining[0]}")
        except RunFailed:  # the disk is full: no other unit could be stored either
            raise
        except Exception as error:  # a unit's failure must not stop the others; KeyboardInterrupt does
            attempts += 1
            if attempts > driver.retries:
                driver.failed(remaining, _error_text(error), attempts)
                return


class _RayWorker:
    """A Ray actor holding one model; runs groups of units and sends their records back."""

    def __init__(self, study: Study):
        self.study, self.state = study, None

    def run(self, group: list[str], todo: list[str]) -> tuple[list[tuple[str, dict]], dict]:
        if self.state is None:
            self.state = self.study.prepare()
        records = list(self.study.run_group(self.state, group, todo))
        return records, _worker_info(self.study, self.state)


def _import_ray():
    try:
        import ray
    except ImportError:
        raise CanvaslabError("--executor ray needs Ray: pip install 'canvaslab[ray]'") from None
    return ray


def connect_ray(address: str | None) -> Any:
    """Join the cluster at ``address`` (``auto``: the one ``ray start`` began here), or start a local one."""
    ray = _import_ray()
    if not ray.is_initialized():
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        except ConnectionError as error:
            raise CanvaslabError(f"--ray-address {address}: no Ray cluster there ({_error_text(error)})") from None
    return ray


def default_workers(ray) -> tuple[int, dict[str, float]]:
    """One worker per GPU of the cluster; on a CPU-only cluster one per CPU."""
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    if gpus:
        return gpus, {"num_gpus": 1, "num_cpus": 1}
    return max(1, int(resources.get("CPU", 1))), {"num_cpus": 1}


def run_ray(study: Study, store: Store, *, retries: int = 0, progress: Progress | None = None,
            address: str | None = None, workers: int | None = None, limit: int | None = None) -> Outcome:
    """Run the pending groups on a pool of Ray actors; records come back here and are stored here."""
    ray = connect_ray(address)
    from ray.exceptions import RayActorError, RayError, RayTaskError

    count, resources = default_workers(ray)
    count = workers or count
    actor_class = ray.remote(**resources)(_RayWorker)
    driver = _Driver(study, store, retries, progress, limit)
    driver.notify(driver.outcome.done, driver.outcome.total, "")
    queue: deque = deque((group, 0) for group in driver.groups)
    idle = [actor_class.remote(study) for _ in range(min(count, max(1, len(queue))))]
    running: dict[Any, tuple[Any, list[str], list[str], int]] = {}
    deferred: list[list[str]] = []
    try:
        while queue or running or deferred:
            if not queue and not running:  # only groups another process holds: wait for them
                group = deferred.pop(0)
                todo, _ = driver.claims.take(driver.pending(group), wait=True)
                if todo:
                    queue.append((group, 0))
                    driver.claims.release_all()
                continue
            while queue and idle:
                group, attempts = queue.popleft()
                todo, busy = driver.claims.take(driver.pending(group), wait=False)
                if busy:
                    deferred.append(group)
                if todo:
                    actor = idle.pop()
                    running[actor.run.remote(group, todo)] = (actor, group, todo, attempts)
            if not running:
                continue
            [ref], _ = ray.wait(list(running), num_returns=1)
            actor, group, todo, attempts = running.pop(ref)
            try:
                records, worker = ray.get(ref)
            except RayError as error:  # the group raised (RayTaskError) or its worker died
                if isinstance(error, RayActorError):  # replace the dead worker
                    actor = actor_class.remote(study)
                idle.append(actor)
                cause = error.cause if isinstance(error, RayTaskError) and error.cause else error
                if attempts + 1 > retries:
                    driver.failed(todo, _error_text(cause), attempts + 1)
                else:
                    for unit in todo:
                        driver.claims.release(unit)
                    queue.appendleft((group, attempts + 1))
                continue
            idle.append(actor)
            for unit, record in records:
                driver.stored(unit, record, worker)
            missing = [unit for unit in todo if unit in driver.claims.held]
            if missing:
                driver.failed(missing, f"the study returned no record for {missing[0]}", attempts + 1)
    finally:
        driver.claims.release_all()
        for ref, (actor, *_rest) in running.items():
            ray.kill(actor)
    return driver.finished()
