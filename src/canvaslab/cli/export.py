"""``canvaslab export DIR --format parquet``: a study folder's stored units as one table."""

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
    directory: Annotated[Path, typer.Argument(help="a study folder (any study's --out)")],
    format: Annotated[str, typer.Option("--format", help="parquet", callback=options.one_of(FORMATS))] = "parquet",
    out: Annotated[Optional[Path], typer.Option("--out", help="the .parquet file to write (default "
                                                              "DIR/records.parquet)")] = None,
) -> None:
    """One row per finished unit (its record's fields as columns), readable by pandas and DuckDB."""
    from canvaslab.api import export as export_records

    path = export_records(directory, out, format)
    typer.echo(printable(f"wrote {path}"))
