"""``canvaslab report``: one self-contained HTML page (and PNG/SVG figures) from study folders."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from canvaslab.cli.app import app
from canvaslab.errors import CanvaslabError
from canvaslab.io import check_names
from canvaslab.terminal import printable


def _existing(ctx, param, value):
    """Missing folders are one line before the study readers (and torch) load."""
    for folder in value:
        if not check_names(folder, "a study folder").exists():
            raise CanvaslabError(f"{folder}: no such folder")
    return value


@app.command("report")
def report(
    folders: List[Path] = typer.Argument(..., help="study folders (any study command's --out)",
                               callback=_existing),
    out: Optional[Path] = typer.Option(None, "--out", help="the page to write (default: FIRST_DIR/report.html)"),
) -> None:
    """Turn study folders into one self-contained report.html, side by side, with figures beside it."""
    from rich.console import Console

    from canvaslab.api import report as build_report

    written = build_report(folders, out)
    studies = ", ".join(f"{name} x{count}" for name, count in written.studies.items())
    Console().print(printable(f"wrote {written.html} ({written.size_bytes / 1e6:.2f} MB; {studies}) and "
                              f"{len(written.figures)} figure files in "
                              f"{written.html.parent / (written.html.stem + '-figures')}"),
                    markup=False, emoji=False, highlight=False)  # folder names are shown as they are
