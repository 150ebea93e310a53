"""``canvaslab order-metrics``: the commit-order measures of a trace file, as JSON and as a table.

Works on any trace file in the documented format (docs/trace-format.md), so a study can be re-measured
without the model: ``canvaslab order-metrics run/traces.jsonl --out run``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from canvaslab.cli.app import app
from canvaslab.errors import CanvaslabError
from canvaslab.io import write_json_atomic

RESULT_NAME = "order_metrics.json"
COLUMNS = (
    "regime", "n", "tau_b", "tau16", "control", "tok/call", "same", "unacc", "calls", "H", "acc", "AUROC",
)


@app.command("order-metrics")
def order_metrics_command(
    traces: Annotated[Path, typer.Argument(help="Trace file: .jsonl (or .parquet from the export).")],
    out: Annotated[Path, typer.Option("--out", help=f"Folder to write {RESULT_NAME} into.")],
    bootstrap: Annotated[int, typer.Option(help="Prompt-clustered bootstrap resamples; 0 = no CIs.")] = 1000,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap (same seed, same CIs).")] = 0,
) -> None:
    """Commit order per regime: tau_b, block tau, control, batching, un-accepts, confidence vs correctness."""
    if bootstrap < 0 or seed < 0:
        raise CanvaslabError(f"--bootstrap and --seed must be >= 0 (got {bootstrap} and {seed})")
    if out.exists() and not out.is_dir():
        raise CanvaslabError(f"--out {out} is a file; give a folder")
    # Imported here: scipy and scikit-learn take ~1 s, which every other canvaslab command would pay.
    from canvaslab.analysis.order_metrics import compute_order_metrics

    metrics = compute_order_metrics(traces, n_bootstrap=bootstrap, seed=seed)
    path = write_json_atomic(out / RESULT_NAME, metrics)
    console = Console()
    console.print(order_metrics_table(metrics), crop=False)
    console.print(_pooled_line(metrics["pooled_auroc"]), highlight=False)
    console.print(f"wrote {path}", highlight=False)


def order_metrics_table(metrics: dict[str, Any]) -> Table:
    """One row per regime; CIs under the value, "-" where undefined (the JSON says why)."""
    rows = [_row(regime, summary) for regime, summary in metrics["regimes"].items()]
    table = Table(
        title=f"commit order: {metrics['n_generations']} generations, 95% prompt-clustered CIs",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for index, name in enumerate(COLUMNS):
        # A column never narrower than its longest line: a narrow terminal wraps the table, not the numbers.
        width = max(len(line) for cell in [name, *(row[index] for row in rows)] for line in cell.split("\n"))
        table.add_column(name, justify="left" if index == 0 else "right", min_width=width)
    for row in rows:
        table.add_row(*row)
    return table


def _row(regime: str, summary: dict[str, Any]) -> list[str]:
    calls = summary["accept_calls"]
    return [
        regime,
        str(summary["n_generations"]),
        _with_ci(summary["tau_b"], summary["tau_b_ci"]),
        _number(summary["block_tau"]["16"]),
        _number(summary["control_tau"]),
        _number(summary["tokens_per_call"], 1),
        _number(summary["same_call_fraction"], 2),
        _number(summary["unaccept_events"], 1),
        f"{calls['mean']:.1f}/{calls['budget']}",
        _number(summary["commit_entropy_mean"], 4),
        _number(summary["accuracy"], 2),
        _with_ci(summary["auroc"], summary["auroc_ci"]),
    ]


def _number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _with_ci(value: float | None, ci: list[float] | None) -> str:
    if value is None:
        return "-"
    return _number(value) if ci is None else f"{value:.3f}\n[{ci[0]:.3f}, {ci[1]:.3f}]"


def _pooled_line(pooled: dict[str, Any]) -> str:
    value = _number(pooled["value"])
    flag = pooled["simpson_prone"]
    test = {True: "Simpson flag RAISED (pooling misrepresents the regimes)", False: "Simpson flag not raised",
            None: f"Simpson test undefined ({pooled.get('simpson_reason')})"}[flag]
    return f"pooled AUROC {value} over {pooled['n']} generations, a diagnostic: {test}; report within-regime AUROC"
