"""``canvaslab order-study``: the commit-order study of seed 003 end to end (traces, measures, table).

Generates every (probe, seed) pair of the chosen regimes with the commit tracer on, writes
each generation in ``DIR/store`` as it finishes (a rerun with the same ``--out`` resumes), then ``DIR/traces.jsonl``, ``DIR/order_metrics.json``
and the regime table of ``canvaslab order-metrics``. ``--baseline PATH`` adds an autoregressive model's
accuracy on the same probes (``DIR/baseline.json``, and a column of the table).
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from canvaslab.cli import options
from canvaslab.cli.app import app
from canvaslab.cli.progress import progress as study_progress

from canvaslab import choices
from canvaslab.choices import REGIMES, SPLITS, SUITE_REGIMES, SUITES


def _regimes(ctx, param, value):
    choices.regimes(value)
    return value


@app.command("order-study")
def order_study(
    model: options.Model = "tiny",
    regimes: Annotated[str, typer.Option("--regimes", help=f"comma-separated, from: {', '.join(REGIMES)}",
                                         callback=_regimes)] = ",".join(REGIMES),
    seeds: Annotated[int, typer.Option("--seeds", help="seeds per prompt (0..N-1)",
                                       callback=options.whole_number(1))] = 5,
    prompts_per_regime: Annotated[int, typer.Option("--prompts-per-regime", help="probes per regime",
                                                    callback=options.whole_number(1))] = 20,
    split: Annotated[str, typer.Option("--split", help="exploratory, confirmatory or all",
                                       callback=options.one_of(SPLITS))] = "confirmatory",
    suite: Annotated[str, typer.Option("--suite", help="probe suite: default, or mini (held-out prompts of "
                                       "the trained mini's own tasks)", callback=options.one_of(SUITES))] = "default",
    batch_size: Annotated[int, typer.Option("--batch-size", help="rows per generate call (one seed per batch)",
                                            callback=options.whole_number(1))] = 8,
    out: Annotated[Path, typer.Option("--out", help="folder for traces.jsonl and order_metrics.json (a rerun resumes)",
                                      callback=options.writable_folder)] = ...,
    baseline: Annotated[Optional[Path], typer.Option(
        "--baseline", help="local autoregressive transformers checkpoint, or mini (its shipped AR sibling): "
        "accuracy to compare")] = None,
    parquet: Annotated[bool, typer.Option("--parquet", help="also write DIR/traces.parquet")] = False,
    mode: options.Mode = "stock",
    rng: options.Rng = "row",
    steps: options.Steps = None,
    max_new_tokens: options.MaxNewTokens = None,
    dtype: options.Dtype = "auto",
    device: options.Device = "cpu",
    layers: options.Layers = None,
    model_seed: options.ModelSeed = 0,
    bootstrap: options.Bootstrap = 1000,
    wide: Annotated[bool, typer.Option("--wide", help="one table (wider than 80 columns) instead of two")] = False,
    executor: options.Executor = "local",
    ray_address: options.RayAddress = None,
    workers: options.Workers = None,
    retries: options.Retries = 0,
    fresh: options.Fresh = False,
) -> None:
    """In what order does the sampler commit canvas positions, per regime, and does confidence predict correctness?"""
    engine = options.engine_options(executor, ray_address, workers, retries, fresh)  # before any import
    baseline_path = checked_baseline(baseline)
    # Imported here: torch models, scipy and scikit-learn would slow every other canvaslab command.
    from rich.console import Console

    from canvaslab.models import load_model
    from canvaslab.scoring.probes import load_probe_suite
    from canvaslab.studies.commit_order.study import run_order_study

    chosen = [r.strip() for r in regimes.split(",") if r.strip()]
    if regimes == ",".join(REGIMES):
        chosen = list(SUITE_REGIMES[suite])
    probes = load_probe_suite(chosen, split, prompts_per_regime, suite=suite)
    loaded = load_model(model, dtype=dtype, device=device, layers=layers, seed=model_seed)
    config = {"command": {"model": model, "split": split, "suite": suite, "prompts_per_regime": prompts_per_regime,
                          "dtype": dtype, "device": str(loaded.device), "layers": layers, "model_seed": model_seed}}
    spec = options.study_model(model, dtype, device, layers, model_seed)
    with study_progress("order study", "generations") as progress:
        metrics = run_order_study(
            loaded, probes, list(range(seeds)), out_dir=out, batch_size=batch_size, mode=mode, rng=rng,
            generation=options.generation_overrides(steps, max_new_tokens), parquet=parquet, n_bootstrap=bootstrap,
            progress=progress, config=config, model=spec, **engine,
        )
    console = Console()
    outcome = metrics.pop("outcome")
    if baseline_path is not None:
        budget = metrics["study"]["generation"]["max_new_tokens"]
        del loaded
        _free_memory()
        metrics = add_baseline(metrics, baseline_path, probes, out, budget, device, dtype, batch_size)
    _print_results(console, metrics, out, parquet, wide)
    console.print(f"generations: {outcome['ran']} ran, {outcome['skipped']} skipped as already done, "
                  f"{len(outcome['failed'])} failed", highlight=False)
    if outcome["failed"]:
        raise typer.Exit(1)


def checked_baseline(baseline: Optional[Path]) -> Optional[Path]:
    """Checked before the study starts, so a typo does not surface after hours of generation."""
    if baseline is None:
        return None
    from canvaslab.studies.commit_order.baseline import check_baseline_path

    return check_baseline_path(baseline)


def _free_memory() -> None:
    """Let the diffusion model go before the baseline loads (two 26B models need not share the GPU)."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def add_baseline(metrics: dict[str, Any], path: Path, probes, out: Path, max_new_tokens: int,
                 device: str, dtype: str, batch_size: int) -> dict[str, Any]:
    """Score the baseline, write baseline.json, and keep its accuracy in order_metrics.json under ``baseline``
    (``order-study`` and ``order-metrics --baseline``)."""
    from canvaslab.io import write_json_atomic
    from canvaslab.studies.commit_order.baseline import baseline_summary, run_baseline
    from canvaslab.studies.commit_order.study import METRICS_FILE

    with study_progress("baseline", "probes") as progress:
        result = run_baseline(path, probes, out, max_new_tokens=max_new_tokens, device=device, dtype=dtype,
                              batch_size=batch_size, progress=lambda done, total: progress(done, total))
    metrics = {**metrics, "baseline": baseline_summary(result)}
    write_json_atomic(out / METRICS_FILE, metrics)
    return metrics


def _print_results(console, metrics: dict[str, Any], out: Path, parquet: bool, wide: bool) -> None:
    from canvaslab.reports.order_metrics import order_metrics_tables, pooled_auroc_line
    from canvaslab.studies.commit_order.baseline import BASELINE_FILE
    from canvaslab.studies.commit_order.study import METRICS_FILE, PARQUET_FILE, TRACES_FILE

    for table in order_metrics_tables(metrics, wide=wide):
        console.print(table)
    console.print(pooled_auroc_line(metrics["pooled_auroc"]), highlight=False)  # as order-metrics prints it
    written = [TRACES_FILE, METRICS_FILE, *([PARQUET_FILE] if parquet else []),
               *([BASELINE_FILE] if "baseline" in metrics else [])]
    console.print(f"wrote {', '.join(str(out / name) for name in written)}", highlight=False)
