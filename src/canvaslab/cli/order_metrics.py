"""``canvaslab order-metrics``: the commit-order measures of a trace file, as JSON and as tables.

Works on any trace file in the documented format (docs/trace-format.md), so a study can be re-measured
without the model: ``canvaslab order-metrics run/traces.jsonl --out run``. ``--baseline PATH`` scores an
autoregressive model on the probes the traces answered (looked up in ``--suite``), as ``order-study
--baseline`` does: a baseline for a study whose store is gone, or a retrained sibling.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from canvaslab.cli import options
from canvaslab.cli.app import app
from canvaslab.cli.order_study import SUITES, add_baseline, checked_baseline

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
    baseline: Annotated[Optional[Path], typer.Option(
        "--baseline", help="local autoregressive transformers checkpoint, or mini (its shipped AR sibling): its "
        "accuracy on the traces' probes")] = None,
    suite: Annotated[str, typer.Option("--suite", help="the probe suite the traces' probes come from (with --baseline)",
                                       callback=options.one_of(SUITES))] = "default",
    max_new_tokens: Annotated[int, typer.Option(
        "--max-new-tokens", help="the baseline's token budget: the study's (order_metrics.json: "
        "study.generation.max_new_tokens)", callback=options.whole_number(1))] = 256,
    batch_size: Annotated[int, typer.Option("--batch-size", help="baseline prompts per generate call",
                                            callback=options.whole_number(1))] = 8,
    dtype: options.Dtype = "auto",
    device: options.Device = "cpu",
) -> None:
    """Commit order per regime: tau_b, block tau, control, batching, un-accepts, confidence vs correctness."""
    baseline_path = checked_baseline(baseline)  # before the measures: a typo costs nothing
    # Imported here: scipy and scikit-learn take ~1 s, which every other canvaslab command would pay.
    from rich.console import Console

    from canvaslab.analysis.order_metrics import compute_order_metrics
    from canvaslab.io import write_json_atomic
    from canvaslab.reports.order_metrics import order_metrics_tables, pooled_auroc_line

    if baseline_path is not None:  # the probes are found (or refused) before anything is written
        from canvaslab.studies.commit_order.baseline import BASELINE_FILE, probes_of_traces

        probes = probes_of_traces(traces, suite)
    metrics = compute_order_metrics(traces, n_bootstrap=bootstrap, seed=seed)
    written = [write_json_atomic(out / RESULT_NAME, metrics)]
    if baseline_path is not None:
        metrics = add_baseline(metrics, baseline_path, probes, out, max_new_tokens, device, dtype, batch_size)
        written.append(out / BASELINE_FILE)
    if parquet and traces.resolve() != (out / PARQUET_NAME).resolve():
        from canvaslab.capture.commit_trace import export_parquet, read_traces

        written.append(export_parquet(read_traces(traces), out / PARQUET_NAME))
    console = Console()
    for table in order_metrics_tables(metrics, wide=wide):
        console.print(table)
    console.print(pooled_auroc_line(metrics["pooled_auroc"]), highlight=False)
    console.print(f"wrote {', '.join(map(str, written))}", highlight=False)
