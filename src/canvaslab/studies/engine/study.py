"""What every study is to the engine: a plan, units, a way to run them, and views of the records.

A study is a small picklable object (it travels to Ray workers) that holds its plan's data and says:

- ``name`` and ``plan()``: the frozen plan (plain JSON data) whose sha256 is the study's identity;
- ``units()``: stable unit ids derived from the plan alone, in plan order;
- ``groups()``: the units run together (a batch of generations, or a prompt's B=1 reference with its
  batched runs, which must be compared on one device); derived from the plan, never from what is still
  pending, so a resumed study batches exactly as an uninterrupted one (default: one unit a group);
- ``prepare()``: on the worker, the model and whatever else running needs (``state``);
- ``run_group(state, group, todo)``: runs the ``todo`` units of ``group``, yielding ``(unit, record)``
  as each finishes, so each is stored before the next starts;
- ``write_views(folder, records, workers)``: the summary and the study's result files, from stored
  records alone (``workers``: where each was made, e.g. the environment fingerprint).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator


class Study:
    name: str = "study"
    unit_label: str = "units"  # what a unit is, for progress lines ("prompts", "generations", ...)

    def plan(self) -> dict[str, Any]:
        raise NotImplementedError

    def units(self) -> list[str]:
        raise NotImplementedError

    def check_prompts(self, tokenizer) -> None:
        """Refuse (one line) prompts the model cannot run, from its tokenizer alone: the engine's caller checks
        before any unit runs where the workers load their own model (Ray). Nothing to check by default."""

    @staticmethod
    def units_of_plan(plan: dict[str, Any], folder: Path) -> list[str]:
        """The unit ids ``units()`` gives, from the plan registered in ``folder`` (its store's ``plan``): what a
        reader of a received folder checks its records against."""
        raise NotImplementedError

    def groups(self) -> list[list[str]]:
        return [[unit] for unit in self.units()]

    def prepare(self) -> Any:
        raise NotImplementedError

    def run_group(self, state: Any, group: list[str], todo: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        raise NotImplementedError

    def write_views(self, folder, records: dict[str, dict[str, Any]],
                    workers: dict[str, dict[str, Any]]) -> dict[str, Any]:
        raise NotImplementedError

    def worker_info(self, state: Any) -> dict[str, Any]:
        """Where a record was made (stored beside it, not in it: records compare equal across workers)."""
        return {}
