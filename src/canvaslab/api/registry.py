"""The one registry of studies: each study declared once, and everything that lists studies derived from it.

An entry names the study (its registered name in a folder's ``store/plan.json``), the command that runs it,
its plan type (``canvaslab.api.plans``), its result file and unit, the reader of its folders and its report
section (``canvaslab.reports``), and the tables its command prints. ``canvaslab report``, ``open_results``,
the export's check of a folder and the documentation's list of studies are read from ``STUDIES``;
``tests/api/test_registry.py`` runs every entry end to end on ``tiny``.

Adding a study: its package under ``canvaslab.studies`` (a ``Study`` for the engine), a plan here in
``plans.py``, a reader and a column builder in ``canvaslab.reports``, a command in ``canvaslab.cli``, and
one entry below (docs: "How to add a study" on the Python API page).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from canvaslab.api.plans import BatchSizeStudy, CommitOrderStudy, NoiseStudy, OpScan
from canvaslab.errors import CanvaslabError
from canvaslab.reports.html.page import Section
from canvaslab.reports.readers import batch_study, noise_study, op_scan, order_metrics


@dataclass(frozen=True)
class StudyType:
    name: str  # the registered name (store/plan.json's "study")
    command: str  # the command that runs it: `canvaslab COMMAND`
    plan: type  # its plan: a frozen dataclass with run(out, executor=...)
    result_file: str  # the summary its run writes in the folder
    unit: str  # what one unit of work is (progress lines, outcome)
    question: str  # what it answers, in one line (documentation, report intro)
    reader: ModuleType  # its folders' reader: STUDY, FILE, find(folder), read(folder)
    section: Section  # its report section
    tables: Callable[[dict[str, Any], bool], list[Any]]  # (summary, wide) -> what its command prints
    engine_study: str  # its engine Study, "module:Class" (imported when needed: it may import torch)

    def units_of_plan(self, plan: dict[str, Any], folder: Path) -> list[str]:
        """The unit ids of the plan registered in ``folder`` (``Study.units_of_plan``)."""
        module, name = self.engine_study.split(":")
        return getattr(importlib.import_module(module), name).units_of_plan(plan, folder)


def _imported_on_call(target: str) -> Callable:
    """The function ``module:name``, imported at its first call: the report's panels draw with matplotlib (the
    report extra), which a study run does without."""
    module, name = target.split(":")

    def call(*args, **kwargs):
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    return call


def _batch_tables(summary, wide):
    from canvaslab.reports.batch_study import batch_study_table

    return [batch_study_table(summary, wide=wide)]


def _order_tables(summary, wide):
    from canvaslab.reports.order_metrics import order_metrics_tables, pooled_auroc_line

    return [*order_metrics_tables(summary, wide=wide), pooled_auroc_line(summary["pooled_auroc"])]


def _noise_tables(summary, wide):
    from canvaslab.reports.noise_study import noise_study_table

    return [noise_study_table(summary)]


def _op_scan_tables(summary, wide):
    from canvaslab.reports.op_scan import op_scan_table

    return [op_scan_table(summary["scans"])]


STUDIES: dict[str, StudyType] = {study.name: study for study in (
    StudyType("batch_size", "batch-study", BatchSizeStudy, batch_study.FILE, "prompts",
              "Does a row's generation depend on what shares its batch?", batch_study,
              Section(batch_study, "batch", "Batch-size study", "Row 0 alone (B=1) against row 0 inside batches of "
                      "other sizes, compared byte for byte, module by module and pass by pass.",
                      _imported_on_call("canvaslab.reports.html.batch_panel:batch_column"),
                      _imported_on_call("canvaslab.reports.html.batch_panel:glance_rows")),
              _batch_tables, "canvaslab.studies.batch_size.study:BatchSizeStudy"),
    StudyType("commit_order", "order-study", CommitOrderStudy, order_metrics.FILE, "generations",
              "In what order does the sampler commit canvas positions, and does its confidence predict "
              "correctness?", order_metrics,
              Section(order_metrics, "order", "Commit-order study", "In what order the sampler commits canvas "
                      "positions, per regime, and whether its confidence predicts correctness.",
                      _imported_on_call("canvaslab.reports.html.order_panel:order_column"),
                      _imported_on_call("canvaslab.reports.html.order_drill:order_measures")),
              _order_tables, "canvaslab.studies.commit_order.study:OrderStudy"),
    StudyType("unused_tokens", "noise-study", NoiseStudy, noise_study.FILE, "conditions",
              "Do unused tokens in the starting noise act as hidden mask symbols?", noise_study,
              Section(noise_study, "noise", "Unused-token study", "Do <unusedN> tokens in the starting noise act as "
                      "hidden mask symbols? A pre-registered equivalence test against ordinary control tokens.",
                      _imported_on_call("canvaslab.reports.html.noise_panel:noise_column")),
              _noise_tables, "canvaslab.studies.unused_tokens.noise_study:NoiseStudy"),
    StudyType("op_scan", "op-scan", OpScan, op_scan.FILE, "ops",
              "Which of a model's batch-sensitive ops give B=1's bits at other batch sizes, on this machine?",
              op_scan,
              Section(op_scan, "ops", "Op scan", "Each batch-sensitive op at the model's real shapes over a grid of "
                      "batch sizes: which batch sizes agree with B=1 bit for bit.",
                      _imported_on_call("canvaslab.reports.html.op_scan_panel:op_scan_column")),
              _op_scan_tables, "canvaslab.studies.op_scan:OpScanStudy"),
)}


def study_type(name: str) -> StudyType:
    if name not in STUDIES:
        raise CanvaslabError(f"unknown study {name!r}: canvaslab knows {', '.join(STUDIES)}")
    return STUDIES[name]


def study_in(folder: Path) -> StudyType:
    """The study a folder holds: by its registered plan, else (a result file copied alone) by its result file."""
    from canvaslab.studies.engine.plan import registered_plan

    registered = registered_plan(folder)
    if registered is not None:
        return study_type(registered.get("study"))
    found = [study for study in STUDIES.values() if study.reader.find(folder) is not None]
    if not found:
        raise CanvaslabError(f"{folder} holds no study (no store/plan.json and none of "
                             f"{', '.join(study.result_file for study in STUDIES.values())})")
    return found[0]


def units_of_plan_in(folder: Path):
    """The ``units_of_plan`` of the study registered in ``folder``; None for a study canvaslab does not know."""
    from canvaslab.studies.engine.plan import registered_plan

    registered = registered_plan(folder) or {}
    study = STUDIES.get(registered.get("study"))
    return None if study is None else study.units_of_plan


def report_sections() -> list[Section]:
    """The report's sections, in the registry's order."""
    return [study.section for study in STUDIES.values()]
