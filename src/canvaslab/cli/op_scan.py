"""``canvaslab op-scan``: which of a model's batch-sensitive ops agree with B=1, on this machine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from canvaslab.cli import options
from canvaslab.cli.app import app

SCAN_MODES = ("stock", "rowwise", "invariant", "both")


@app.command("op-scan")
def op_scan(
    model: options.Model = "tiny",
    mode: Annotated[str, typer.Option("--mode", help="stock, rowwise, invariant, or both (stock and invariant)",
                                      callback=options.one_of(SCAN_MODES))] = "both",
    batch_sizes: options.BatchSizes = "1,2,3,4,5,8,16,32",
    dtype: options.Dtype = "auto",
    device: options.Device = "cpu",
    layers: Annotated[Optional[int], typer.Option(
        "--layers", help="layers to build (default 1: the scan uses layer 0's ops)",
        callback=options.whole_number(1))] = None,
    model_seed: options.ModelSeed = 0,
    seed: options.Seed = 0,
    out: Annotated[Optional[Path], typer.Option("--out", help="write DIR/op_scan.json",
                                                callback=options.writable_folder)] = None,
) -> None:
    """Run every batch-sensitive op at the model's real shapes over a grid of batch sizes."""
    from rich.console import Console

    from canvaslab.environment import environment_fingerprint
    from canvaslab.invariant import replaced_ops
    from canvaslab.invariant.op_scan import scan_ops
    from canvaslab.io import write_json_atomic
    from canvaslab.models import load_model
    from canvaslab.reports.op_scan import op_scan_table

    modes = ["stock", "invariant"] if mode == "both" else [mode]
    sizes = options.parse_batch_sizes(batch_sizes)
    loaded = load_model(model, dtype=dtype, device=device, layers=layers or 1, seed=model_seed)
    scans = [scan_ops(loaded, sizes, m, seed) for m in modes]
    Console().print(op_scan_table(scans))
    if out is not None:
        environment = environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source)
        path = write_json_atomic(out / "op_scan.json", {
            "environment": environment, "scans": scans,
            "replaced_ops": {m: replaced_ops(m) for m in modes}})
        Console().print(f"wrote {path}", highlight=False)
