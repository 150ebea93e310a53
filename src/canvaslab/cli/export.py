"""``canvaslab export DIR --format parquet``: a study folder's stored units as one table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from canvaslab.cli import options
from canvaslab.cli.app import app
from canvaslab.errors import CanvaslabError

from canvaslab.choices import EXPORT_FORMATS as FORMATS


def _study_folder(ctx, param, value):
    if not value.is_dir():
        raise CanvaslabError(f"{value}: no such folder; give a folder a study wrote (its --out)")
    if not (value / "store" / "plan.json").is_file():
        raise CanvaslabError(f"{value} holds no study store (store/plan.json); give a folder a study wrote")
    return value


def _parquet_file(ctx, param, value):
    if value is not None and value.suffix != ".parquet":
        raise CanvaslabError(f"--out {value}: name a .parquet file (the export is Parquet)")
    return options.writable_file(ctx, param, value)


@app.command("export")
def export(
    directory: Annotated[Path, typer.Argument(help="a study folder (any study's --out)", callback=_study_folder)],
    format: Annotated[str, typer.Option("--format", help="parquet", callback=options.one_of(FORMATS))] = "parquet",
    out: Annotated[Optional[Path], typer.Option("--out", help="the file to write (default DIR/records.parquet)",
                                                callback=_parquet_file)] = None,
) -> None:
    """One row per finished unit (its record's fields as columns), readable by pandas and DuckDB."""
    from canvaslab.api import export as export_records

    path = export_records(directory, out, format)
    typer.echo(f"wrote {path}")
