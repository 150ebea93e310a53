"""A study without a model, for the engine's tests: unit ``u/i`` squares ``i``. Every run of a unit is
appended to a log file (with the process id), so tests can count how often each unit really ran."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from canvaslab.io import write_json_atomic
from canvaslab.studies.engine import Study


class Squares(Study):
    name = "squares"

    def __init__(self, n: int = 6, group_size: int = 1, log: str | None = None, fail: dict | None = None,
                 delay: float = 0.0, environment: dict | None = None):
        self.n, self.group_size, self.log, self.delay = n, group_size, log, delay
        self.environment = environment  # the worker's environment (not in the plan, like a real worker's)
        self.fail = dict(fail or {})  # unit -> how many of its attempts raise (-1: every attempt)

    def plan(self):
        return {"n": self.n, "group_size": self.group_size}

    def units(self):
        return [f"u/{i}" for i in range(self.n)]

    def groups(self):
        units = self.units()
        return [units[i:i + self.group_size] for i in range(0, len(units), self.group_size)]

    def prepare(self):
        return {"prepared_by": os.getpid()}

    def _attempts(self, unit: str) -> int:
        if not self.log or not Path(self.log).exists():
            return 0
        return sum(json.loads(line)["unit"] == unit for line in Path(self.log).read_text().splitlines())

    def worker_info(self, state):
        return {"environment": self.environment} if self.environment else {}

    def run_group(self, state, group, todo):
        for unit in todo:
            failing = self.fail.get(unit, 0)
            attempt = self._attempts(unit)
            if self.log:
                with open(self.log, "a") as handle:
                    handle.write(json.dumps({"unit": unit, "pid": os.getpid()}) + "\n")
            time.sleep(self.delay)
            if failing == -1 or attempt < failing:
                raise ValueError(f"planted failure of {unit}")
            index = int(unit.split("/")[1])
            yield unit, {"index": index, "square": index * index}

    def write_views(self, folder, records, workers):
        view = {"units": list(records), "sum": sum(r["square"] for r in records.values())}
        write_json_atomic(Path(folder) / "squares.json", view)
        return view
