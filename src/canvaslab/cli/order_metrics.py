"""``canvaslab order-metrics``: the commit-order measures of a trace file, as JSON and as tables.

Works on any trace file in the documented format (docs/trace-format.md), so a study can be re-measured
without the model: ``canvaslab order-metrics run/traces.jsonl --out run``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from canvaslab.cli import options
from canvaslab.cli.app import app

RESULT_NAME = "order_metrics.json"
PARQUET_NAME = "traces.parquet"


@app.command("order-metrics")
def order_metrics_command(
    traces: Annotated[Path, typer.Argument(help="Trace file: .jsonl (or .parquet from the export).",
                                           callback=options.readable_file())],
    out: Annotated[Path, typer.Option("--out", help=f"Folder to write {RESULT_NAME} into.",
                                      callback=options.writable_folder)],
    bootstrap: options.Bootstrap = 1000,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap (same seed, same CIs).",
                                      callback=options.whole_number(0, options.MAX_SEED))] = 0,
    parquet: Annotated[bool, typer.Option("--parquet", help=f"also write DIR/{PARQUET_NAME}")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="one table (wider than 80 columns) instead of two")] = False,
) -> None:
    """Commit order per regime: tau_b, block tau, control, batching, un-accepts, confidence vs correctness."""
    # Imported here: scipy and scikit-learn take ~1 s, which every other canvaslab command would pay.
    from rich.console import Console

    from canvaslab.analysis.order_metrics import compute_order_metrics
    from canvaslab.io import write_json_atomic
    from canvaslab.reports.order_metrics import order_metrics_tables, pooled_auroc_line

    metrics = compute_order_metrics(traces, n_bootstrap=bootstrap, seed=seed)
    written = [write_json_atomic(out / RESULT_NAME, metrics)]
    if parquet and traces.resolve() != (out / PARQUET_NAME).resolve():
        from canvaslab.capture.commit_trace import export_parquet, read_traces

        written.append(export_parquet(read_traces(traces), out / PARQUET_NAME))
    console = Console()
    for table in order_metrics_tables(metrics, wide=wide):
        console.print(table)
    console.print(pooled_auroc_line(metrics["pooled_auroc"]), highlight=False)
    console.print(f"wrote {', '.join(map(str, written))}", highlight=False)
