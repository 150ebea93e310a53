"""``canvaslab export DIR --format parquet``: a study folder's stored units as one table.

It reads the store a study command keeps (``DIR/store``). A folder ``canvaslab order-metrics`` wrote holds
measures of a trace file and no store; its refusal points to the traces as a table (``traces.parquet``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from canvaslab.choices import EXPORT_FORMATS as FORMATS
from canvaslab.cli import options
from canvaslab.cli.app import app
from canvaslab.errors import CanvaslabError
from canvaslab.terminal import printable

ORDER_METRICS_FILE = "order_metrics.json"  # what ``canvaslab order-metrics`` writes (cli/order_metrics.py)
TRACES_PARQUET = "traces.parquet"
SOURCE_READ_LIMIT = 1 << 20  # bytes of order_metrics.json read for the trace file's path


@app.command("export")
def export(
    directory: Annotated[Path, typer.Argument(help="a study folder: the --out of batch-study, noise-study, op-scan "
                                                   "or order-study (it holds store/)")],
    format: Annotated[str, typer.Option("--format", help="parquet", callback=options.one_of(FORMATS))] = "parquet",
    out: Annotated[Optional[Path], typer.Option("--out", help="the .parquet file to write (default "
                                                              "DIR/records.parquet)")] = None,
) -> None:
    """One row per finished unit (its record's fields as columns), readable by pandas and DuckDB."""
    from canvaslab.api import export as export_records

    _refuse_order_metrics_folder(directory)
    path = export_records(directory, out, format)
    typer.echo(printable(f"wrote {path}"))


def _refuse_order_metrics_folder(directory: Path) -> None:
    """One line for a folder of ``canvaslab order-metrics``: it has no units to export, its traces are the data."""
    if not (directory / ORDER_METRICS_FILE).is_file() or (directory / "store" / "plan.json").is_file():
        return
    parquet = directory / TRACES_PARQUET
    if parquet.is_file():
        where = f"read {parquet}, one row per generation"
    else:
        where = (f"`canvaslab order-metrics {_source_of(directory) or 'TRACES'} --out {directory} --parquet` "
                 f"writes them as {parquet}, one row per generation")
    raise CanvaslabError(f"{directory} holds {ORDER_METRICS_FILE} and no study store (store/plan.json): a folder "
                         "of `canvaslab order-metrics` holds measures of a trace file, no units to export; "
                         f"the traces are the data: {where}")


def _source_of(directory: Path) -> str | None:
    """The trace file the measures name (``source.path``), where it still exists."""
    import json

    try:
        with open(directory / ORDER_METRICS_FILE, encoding="utf-8") as handle:
            source = json.loads(handle.read(SOURCE_READ_LIMIT)).get("source") or {}
        path = source.get("path")
    except (OSError, ValueError, AttributeError):
        return None
    return path if isinstance(path, str) and Path(path).is_file() else None
