"""``canvaslab export DIR [--format parquet|csv]``: a study folder's stored units as one typed table.

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
from canvaslab.terminal import printable


@app.command("export")
def export(
    directory: Annotated[Path, typer.Argument(help="a study folder: the --out of batch-study, noise-study, op-scan "
                                                   "or order-study (it holds store/)", callback=options.path)],
    format: Annotated[str, typer.Option("--format", help="parquet (typed: structs and lists) or csv (structs as one column per field, lists as "
                                                 "JSON text)", callback=options.one_of(FORMATS))] = "parquet",
    out: Annotated[Optional[Path], typer.Option("--out", help="the .parquet or .csv file to write "
                                                              "(default DIR/records.parquet or .csv)")] = None,
) -> None:
    """One row per finished unit (its record's fields as typed columns), readable by pandas and DuckDB."""
    from canvaslab.api import export as export_records

    path = export_records(directory, out, format)
    typer.echo(printable(f"wrote {path}"))

