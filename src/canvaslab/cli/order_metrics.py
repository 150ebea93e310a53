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
from canvaslab.choices import SUITES
from canvaslab.cli.order_study import add_baseline, checked_baseline
from canvaslab.errors import CanvaslabError
from canvaslab.extras import require
from canvaslab.terminal import printable

RESULT_NAME = "order_metrics.json"
PARQUET_NAME = "traces.parquet"
BASELINE_TOKENS = 256  # the shipped mini's and DiffusionGemma's max_new_tokens


@app.command("order-metrics")
def order_metrics_command(
    traces: Annotated[Path, typer.Argument(help="Trace file: .jsonl (or .parquet from the export).",
                                           callback=options.readable_file())],
    out: Annotated[Path, typer.Option("--out", help=f"Folder to write {RESULT_NAME} into.",
                                      callback=options.writable_folder)],
    bootstrap: options.Bootstrap = 1000,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap (same seed, same CIs).",
                                      callback=options.whole_number(0, options.MAX_SEED))] = 0,
    parquet: Annotated[bool, typer.Option("--parquet/--no-parquet", help=f"also write DIR/{PARQUET_NAME}")] = False,
    wide: Annotated[bool, typer.Option("--wide/--no-wide", help="one table (wider than 80 columns) instead of two")] = False,
    baseline: Annotated[Optional[Path], typer.Option(
        "--baseline", help="local autoregressive transformers checkpoint, or mini (its shipped AR sibling): its "
        "accuracy on the traces' probes", callback=options.path)] = None,
    suite: Annotated[Optional[str], typer.Option(
        "--suite", help="with --baseline: the probe suite of the traces' probes (default: default)",
        callback=options.one_of(SUITES))] = None,
    max_new_tokens: Annotated[Optional[int], typer.Option(
        "--max-new-tokens", help="with --baseline: its token budget, the study's max_new_tokens (order_metrics.json: "
        f"study.generation.max_new_tokens; not the pass budget); default {BASELINE_TOKENS}",
        callback=options.whole_number(1))] = None,
    batch_size: Annotated[Optional[int], typer.Option(
        "--batch-size", help="with --baseline: prompts per generate call (default 8)",
        callback=options.whole_number(1))] = None,
    dtype: Annotated[Optional[str], typer.Option(
        "--dtype", help="with --baseline: its dtype (default auto: the checkpoint's)",
        callback=options.one_of(options.DTYPES))] = None,
    device: Annotated[Optional[str], typer.Option("--device", help="with --baseline: cpu, cuda, cuda:N or auto "
                                                  "(default cpu)", callback=options.device)] = None,
) -> None:
    """Commit order per regime: tau_b, block tau, control, batching, un-accepts, confidence vs correctness."""
    baseline_settings = {"suite": suite, "max_new_tokens": max_new_tokens, "batch_size": batch_size,
                         "dtype": dtype, "device": device}
    if baseline is None and any(value is not None for value in baseline_settings.values()):
        given = next(name for name, value in baseline_settings.items() if value is not None)
        raise CanvaslabError(f"--{given.replace('_', '-')} sets how --baseline runs: give --baseline too")
    baseline_path = checked_baseline(baseline)  # before the measures: a typo costs nothing
    require("analysis", "canvaslab order-metrics")
    # Imported here: scipy and scikit-learn take ~1 s, which every other canvaslab command would pay.
    from rich.console import Console

    from canvaslab.analysis.order_metrics import compute_order_metrics
    from canvaslab.io import write_json_atomic
    from canvaslab.reports.order_metrics import order_metrics_tables, pooled_auroc_line

    if baseline_path is not None:  # probes and device are checked before anything runs or is written
        from canvaslab.models.loading import resolve_device
        from canvaslab.studies.commit_order.baseline import BASELINE_FILE, probes_of_traces

        probes = probes_of_traces(traces, suite or "default")
        resolve_device(device or "cpu")
    metrics = compute_order_metrics(traces, n_bootstrap=bootstrap, seed=seed)
    if baseline_path is None:
        written = [write_json_atomic(out / RESULT_NAME, metrics)]
    else:  # writes baseline.json and order_metrics.json only once the baseline has run
        metrics = add_baseline(metrics, baseline_path, probes, out, max_new_tokens or BASELINE_TOKENS,
                               device or "cpu", dtype or "auto", batch_size or 8)
        written = [out / RESULT_NAME, out / BASELINE_FILE]
    if parquet and traces.resolve() != (out / PARQUET_NAME).resolve():
        from canvaslab.capture.commit_trace import export_parquet, read_traces

        written.append(export_parquet(read_traces(traces), out / PARQUET_NAME))
    console = Console()
    for table in order_metrics_tables(metrics, wide=wide):
        console.print(table)
    console.print(pooled_auroc_line(metrics["pooled_auroc"]), highlight=False)
    console.print(printable(f"wrote {', '.join(map(str, written))}"), markup=False, emoji=False, highlight=False)
