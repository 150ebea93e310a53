"""``canvaslab op-scan``: which of a model's batch-sensitive ops agree with B=1, on this machine."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from canvaslab.cli import options
from canvaslab.cli.app import app
from canvaslab.environment import environment_fingerprint
from canvaslab.errors import CanvaslabError
from canvaslab.invariant import replaced_ops
from canvaslab.invariant.op_scan import scan_ops
from canvaslab.io import write_json_atomic
from canvaslab.models import load_model
from canvaslab.studies.batch_size.design import parse_batch_sizes


def _table(scans: list[dict]) -> Table:
    table = Table(title="op scan: batch sizes whose row 0 agrees bit for bit (classes)")
    table.add_column("op")
    table.add_column("per-sequence shape", overflow="fold")
    for scan in scans:
        table.add_column(scan["mode"])
    for name, first in scans[0]["ops"].items():
        cells = [str(scan["ops"][name]["classes"]) + ("" if scan["ops"][name]["invariant"] else "  <- varies")
                 for scan in scans]
        table.add_row(name, first["shape"], *cells)
    return table


@app.command("op-scan")
def op_scan(
    model: str = options.Model,
    mode: str = typer.Option("both", "--mode", help="stock, invariant, or both"),
    batch_sizes: str = typer.Option("1,2,3,4,5,8,16,32", "--batch-sizes"),
    dtype: str = options.Dtype,
    device: str = options.Device,
    layers: Optional[int] = typer.Option(None, "--layers", help="layers to build (default 1: the scan uses layer 0's ops)"),
    model_seed: int = options.ModelSeed,
    seed: int = options.Seed,
    out: Optional[Path] = typer.Option(None, "--out", help="write DIR/op_scan.json"),
) -> None:
    """Run every batch-sensitive op at the model's real shapes over a grid of batch sizes."""
    modes = ["stock", "invariant"] if mode == "both" else [mode]
    if any(m not in ("stock", "rowwise", "invariant") for m in modes):
        raise CanvaslabError(f"--mode {mode!r} is not one of: stock, invariant, both")
    sizes = parse_batch_sizes(batch_sizes)
    loaded = load_model(model, dtype=dtype, device=device, layers=layers or 1, seed=model_seed)
    scans = [scan_ops(loaded, sizes, m, seed) for m in modes]
    Console().print(_table(scans))
    if out is not None:
        environment = environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source)
        write_json_atomic(out / "op_scan.json", {
            "environment": environment, "scans": scans,
            "replaced_ops": {m: replaced_ops(m) for m in modes}})
