"""``canvaslab op-scan``: which of a model's batch-sensitive ops agree with B=1, on this machine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from canvaslab.cli import options
from canvaslab.cli.app import app

from canvaslab.choices import SCAN_MODES


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
    out: Annotated[Optional[Path], typer.Option("--out", help="write DIR/op_scan.json (a rerun resumes)",
                                                callback=options.writable_folder)] = None,
    executor: options.Executor = "local",
    ray_address: options.RayAddress = None,
    workers: options.Workers = None,
    retries: options.Retries = 0,
    fresh: options.Fresh = False,
) -> None:
    """Run every batch-sensitive op at the model's real shapes over a grid of batch sizes."""
    engine = options.engine_options(executor, ray_address, workers, retries, fresh)  # before any import
    from canvaslab.api import OpScan

    plan = OpScan(model=model, mode=mode, batch_sizes=batch_sizes, dtype=dtype, device=device, layers=layers,
                  model_seed=model_seed, seed=seed)
    options.run_and_print("op_scan", lambda progress: plan.run(out, progress=progress, **engine), out, False)
