"""canvaslab's Python API: what every command does, callable from a notebook with the same names, defaults and
checks (a bad value raises ``CanvaslabError`` with the line the command prints).

- ``load_model``, ``generate``                                  a model, and text from it
- ``BatchSizeStudy``, ``OpScan``, ``CommitOrderStudy``, ``NoiseStudy``  frozen plans with ``run(out)``
- ``open_results``, ``Results``                                 any study folder: plan, summary, records as a table
- ``report``, ``export``                                        the HTML report and the Parquet export
- ``STUDIES``                                                   the registry of studies (``canvaslab.api.registry``)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

from canvaslab.api.models import GeneratedRow, Generation, generate, load_model
from canvaslab.api.plans import BatchSizeStudy, CommitOrderStudy, NoiseStudy, OpScan
from canvaslab.api.results import Outcome, Results, open_results
from canvaslab.errors import CanvaslabError
from canvaslab.extras import require

__all__ = ["BatchSizeStudy", "CommitOrderStudy", "GeneratedRow", "Generation", "NoiseStudy", "OpScan", "Outcome", "Results",
           "STUDIES", "export", "generate", "load_model", "open_results", "report"]


def report(folders: Sequence[Union[str, Path]], out: Optional[Union[str, Path]] = None):
    """One self-contained ``report.html`` (default: in the first folder) and its figures from study folders, a
    section per study, a column per folder (``canvaslab report``). Returns what was written (``html``,
    ``figures``, ``studies``, ``size_bytes``, and ``axes``: per figure, the limits of its axes)."""
    require("report", "canvaslab report")
    from canvaslab.api.registry import report_sections
    from canvaslab.api.results import as_path
    from canvaslab.reports.html import build_report

    if isinstance(folders, (str, os.PathLike)):  # one folder, not the characters of its name
        folders = [folders]
    if isinstance(folders, bytes) or not isinstance(folders, Iterable):
        raise CanvaslabError(f"{folders!r}: give a study folder or a list of them")
    folders = list(folders)
    return build_report([as_path(folder) for folder in folders], None if out is None else as_path(out, "--out"),
                        report_sections())


def export(folder: Union[str, Path], out: Optional[Union[str, Path]] = None, format: str = "parquet") -> Path:
    """A study folder's stored units as one typed table (``canvaslab export``): the rows of
    ``open_results(folder).to_arrow()``, nested fields as Arrow structs and lists. ``format``: ``parquet``
    (default ``FOLDER/records.parquet``) or ``csv`` (``FOLDER/records.csv``; structs split into one column per
    field, lists as JSON text)."""
    from canvaslab import choices
    from canvaslab.api.results import as_path
    from canvaslab.api.registry import units_of_plan_in
    from canvaslab.studies.engine.export import export_table

    choices.one_of("--format", format, choices.EXPORT_FORMATS)
    require("analysis", "canvaslab export")
    folder = as_path(folder)
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "no such folder"
        raise CanvaslabError(f"{folder}: {what}; give a folder a study wrote (its --out)")
    if not (folder / "store" / "plan.json").is_file():
        raise CanvaslabError(_no_store(folder))
    out = choices.writable_file("--out", folder / f"records.{format}" if out is None else out, (f".{format}",))
    return export_table(folder, out, format, units_of_plan_in(folder))


def _no_store(folder: Path) -> str:
    """Why ``folder`` has nothing to export; for a folder of ``canvaslab order-metrics`` (measures of a trace file,
    no units), where its data are: the traces, one row per generation in ``traces.parquet``."""
    from canvaslab.io import read_json
    from canvaslab.reports.readers import order_metrics

    if not (folder / order_metrics.FILE).is_file():
        return f"{folder} holds no study store (store/plan.json); give a folder a study wrote"
    parquet = folder / "traces.parquet"
    if parquet.is_file():
        where = f"read {parquet}, one row per generation"
    else:
        try:
            source = read_json(folder / order_metrics.FILE).get("source", {}).get("path")
        except (CanvaslabError, AttributeError):
            source = None
        traces = source if isinstance(source, str) and Path(source).is_file() else "TRACES"
        where = f"`canvaslab order-metrics {traces} --out {folder} --parquet` writes them as {parquet}"
    return (f"{folder} holds {order_metrics.FILE} and no study store (store/plan.json): a folder of `canvaslab "
            f"order-metrics` holds measures of a trace file, no units to export; the traces are the data: {where}")


def __getattr__(name: str):
    if name == "STUDIES":  # the registry imports the report's readers (torch): on first use only
        from canvaslab.api.registry import STUDIES

        return STUDIES
    raise AttributeError(f"module 'canvaslab.api' has no attribute {name!r}")
