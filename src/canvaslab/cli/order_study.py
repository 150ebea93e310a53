"""``canvaslab order-study``: the commit-order study of seed 003 end to end (traces, measures, table).

Generates every (probe, seed) pair of the chosen regimes with the commit tracer on, writes
``DIR/traces.jsonl`` as it goes (a rerun with the same ``--out`` resumes), then ``DIR/order_metrics.json``
and the regime table of ``canvaslab order-metrics``. ``--baseline PATH`` adds an autoregressive model's
accuracy on the same probes (``DIR/baseline.json``, and a column of the table).
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from canvaslab.cli import options
from canvaslab.cli.app import app
from canvaslab.errors import CanvaslabError
from canvaslab.studies.commit_order.probes.probe import REGIMES

BASELINE_COLUMN = "AR acc"


@app.command("order-study")
def order_study(
    model: str = options.Model,
    regimes: str = typer.Option(",".join(REGIMES), "--regimes", help=f"comma-separated, from: {', '.join(REGIMES)}"),
    seeds: int = typer.Option(5, "--seeds", help="seeds per prompt (0..N-1)"),
    prompts_per_regime: int = typer.Option(20, "--prompts-per-regime", help="probes per regime"),
    split: str = typer.Option("confirmatory", "--split", help="exploratory, confirmatory or all"),
    batch_size: int = typer.Option(8, "--batch-size", help="rows per generate call (one seed per batch)"),
    out: Path = typer.Option(..., "--out", help="folder for traces.jsonl and order_metrics.json (a rerun resumes)"),
    baseline: Optional[Path] = typer.Option(None, "--baseline",
                                            help="local autoregressive transformers checkpoint: accuracy to compare"),
    parquet: bool = typer.Option(False, "--parquet", help="also write DIR/traces.parquet"),
    mode: str = options.Mode,
    rng: str = options.Rng,
    steps: Optional[int] = options.Steps,
    max_new_tokens: Optional[int] = options.MaxNewTokens,
    dtype: str = options.Dtype,
    device: str = options.Device,
    layers: Optional[int] = options.Layers,
    model_seed: int = options.ModelSeed,
    bootstrap: int = typer.Option(1000, "--bootstrap", help="prompt-clustered bootstrap resamples; 0 = no CIs"),
) -> None:
    """In what order does the sampler commit canvas positions, per regime, and does confidence predict correctness?"""
    _check_options(seeds, batch_size, bootstrap, out)
    baseline_path = _baseline_path(baseline)
    # Imported here: torch models, scipy and scikit-learn would slow every other canvaslab command.
    from canvaslab.models import load_model
    from canvaslab.studies.commit_order.probes import load_probe_suite
    from canvaslab.studies.commit_order.study import run_order_study

    probes = load_probe_suite([r.strip() for r in regimes.split(",") if r.strip()], split, prompts_per_regime)
    loaded = load_model(model, dtype=dtype, device=device, layers=layers, seed=model_seed)
    config = {"command": {"model": model, "split": split, "prompts_per_regime": prompts_per_regime,
                          "dtype": dtype, "device": str(loaded.device), "layers": layers, "model_seed": model_seed}}
    console = Console()
    with _progress_bar(console) as bar:
        task = bar.add_task("order study", total=None)
        metrics = run_order_study(
            loaded, probes, list(range(seeds)), out_dir=out, batch_size=batch_size, mode=mode, rng=rng,
            generation=options.generation_overrides(steps, max_new_tokens), parquet=parquet, n_bootstrap=bootstrap,
            progress=lambda done, total: bar.update(task, completed=done, total=total), config=config,
        )
    if baseline_path is not None:
        budget = metrics["study"]["generation"]["max_new_tokens"]
        del loaded
        _free_memory()
        metrics = _add_baseline(console, metrics, baseline_path, probes, out, budget, device, dtype, batch_size)
    _print_results(console, metrics, out, parquet)


def _check_options(seeds: int, batch_size: int, bootstrap: int, out: Path) -> None:
    if seeds < 1 or batch_size < 1:
        raise CanvaslabError(f"--seeds and --batch-size must be at least 1 (got {seeds} and {batch_size})")
    if bootstrap < 0:
        raise CanvaslabError(f"--bootstrap must be >= 0, got {bootstrap}")
    if out.exists() and not out.is_dir():
        raise CanvaslabError(f"--out {out} is a file; give a folder")


def _baseline_path(baseline: Optional[Path]) -> Optional[Path]:
    """Checked before the study starts, so a typo does not surface after hours of generation."""
    if baseline is None:
        return None
    from canvaslab.studies.commit_order.baseline import check_baseline_path

    return check_baseline_path(baseline)


def _progress_bar(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                    TimeElapsedColumn(), console=console, transient=True)


def _free_memory() -> None:
    """Let the diffusion model go before the baseline loads (two 26B models need not share the GPU)."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _add_baseline(console: Console, metrics: dict[str, Any], path: Path, probes, out: Path, max_new_tokens: int,
                  device: str, dtype: str, batch_size: int) -> dict[str, Any]:
    """Score the baseline, write baseline.json, and keep its accuracy in order_metrics.json under ``baseline``."""
    from canvaslab.io import write_json_atomic
    from canvaslab.studies.commit_order.baseline import baseline_summary, run_baseline
    from canvaslab.studies.commit_order.study import METRICS_FILE

    with _progress_bar(console) as bar:
        task = bar.add_task("baseline", total=len(probes))
        result = run_baseline(path, probes, out, max_new_tokens=max_new_tokens, device=device, dtype=dtype,
                              batch_size=batch_size, progress=lambda done, total: bar.update(task, completed=done))
    metrics = {**metrics, "baseline": baseline_summary(result)}
    write_json_atomic(out / METRICS_FILE, metrics)
    return metrics


def _print_results(console: Console, metrics: dict[str, Any], out: Path, parquet: bool) -> None:
    from canvaslab.cli.order_metrics import order_metrics_table
    from canvaslab.studies.commit_order.baseline import BASELINE_FILE
    from canvaslab.studies.commit_order.study import METRICS_FILE, PARQUET_FILE, TRACES_FILE

    table = order_metrics_table(metrics)
    if "baseline" in metrics:
        regimes = metrics["baseline"]["regimes"]
        values = [_accuracy_cell(regimes.get(name)) for name in metrics["regimes"]]
        table = with_column(table, BASELINE_COLUMN, values)
    console.print(table, crop=False)
    written = [TRACES_FILE, METRICS_FILE, *([PARQUET_FILE] if parquet else []),
               *([BASELINE_FILE] if "baseline" in metrics else [])]
    console.print(f"wrote {', '.join(str(out / name) for name in written)}", highlight=False)


def _accuracy_cell(summary: Optional[dict[str, Any]]) -> str:
    if summary is None or summary["accuracy"] is None:
        return "-"
    return f"{summary['accuracy']:.2f}"


def with_column(table: Table, header: str, values: list[str]) -> Table:
    """A copy of ``table`` with one more right-aligned column (rich cannot add a column after the rows)."""
    copy = Table(title=table.title, box=table.box, pad_edge=table.pad_edge)
    for column in table.columns:
        copy.add_column(column.header, justify=column.justify, min_width=column.min_width)
    copy.add_column(header, justify="right", min_width=max([len(header), *map(len, values)]))
    for cells, value in zip(zip(*(column.cells for column in table.columns)), values):
        copy.add_row(*cells, value)
    return copy
