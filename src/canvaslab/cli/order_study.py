"""``canvaslab order-study``: the commit-order study of seed 003 end to end (traces, measures, table).

Generates every (probe, seed) pair of the chosen regimes with the commit tracer on, writes
each generation in ``DIR/store`` as it finishes (a rerun with the same ``--out`` resumes), then ``DIR/traces.jsonl``, ``DIR/order_metrics.json``
and the regime table of ``canvaslab order-metrics``. ``--baseline PATH`` adds an autoregressive model's
accuracy on the same probes (``DIR/baseline.json``, and a column of the table).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from canvaslab.cli import options
from canvaslab.cli.app import app
from canvaslab.cli.progress import progress as study_progress

from canvaslab import choices
from canvaslab.choices import REGIMES, SPLITS, SUITES


def _regimes(ctx, param, value):
    choices.regimes(value)
    return value


# --help leads with a run of minutes: the defaults are the full design (600 generations).
HELP = "\n\n".join([
    "In what order does the sampler commit canvas positions, per regime, and does confidence predict correctness?",
    "A first run, a few minutes on 2 CPU cores (30 generations of the random-weight tiny, no dataset package):",
    "\b\n  canvaslab order-study --regimes factual,json --prompts-per-regime 5 \\\n"
    "      --seeds 3 --steps 4 --out runs/order-small",
    "With only --out it runs the full design: 6 regimes x 20 prompts x 5 seeds = 600 generations, on tiny's random "
    "weights unless --model says otherwise (hours on a CPU, and text that is never right). For answers that can be "
    "right: --model mini --suite mini, or a checkpoint on a GPU.",
])


@app.command("order-study", help=HELP)
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
        "accuracy to compare", callback=options.path)] = None,
    parquet: Annotated[bool, typer.Option("--parquet/--no-parquet", help="also write DIR/traces.parquet")] = False,
    mode: options.Mode = "stock",
    rng: options.Rng = "row",
    steps: options.Steps = None,
    max_new_tokens: options.MaxNewTokens = None,
    dtype: options.Dtype = "auto",
    device: options.Device = "cpu",
    layers: options.Layers = None,
    model_seed: options.ModelSeed = 0,
    bootstrap: options.Bootstrap = 1000,
    wide: Annotated[bool, typer.Option("--wide/--no-wide", help="one table (wider than 80 columns) instead of two")] = False,
    executor: options.Executor = "local",
    ray_address: options.RayAddress = None,
    workers: options.Workers = None,
    retries: options.Retries = 0,
    fresh: options.Fresh = False,
) -> None:
    """In what order does the sampler commit canvas positions, per regime, and does confidence predict correctness?"""
    engine = options.engine_options(executor, ray_address, workers, retries, fresh)  # before any import
    from canvaslab.api import CommitOrderStudy

    plan = CommitOrderStudy(
        model=model, regimes=None if regimes == ",".join(REGIMES) else regimes, seeds=seeds,
        prompts_per_regime=prompts_per_regime, split=split, suite=suite, batch_size=batch_size, baseline=baseline,
        parquet=parquet, mode=mode, rng=rng, steps=steps, max_new_tokens=max_new_tokens, dtype=dtype, device=device,
        layers=layers, model_seed=model_seed, bootstrap=bootstrap)
    files = ["traces.jsonl", "order_metrics.json", *(["traces.parquet"] if parquet else []),
             *(["baseline.json"] if baseline is not None else [])]
    options.run_and_print("commit_order", lambda progress: plan.run(out, progress=progress, **engine), out, wide,
                          files, phases={CommitOrderStudy.BASELINE_PHASE: "probes"})


def checked_baseline(baseline: Optional[Path]) -> Optional[Path]:
    """Checked before the study starts, so a typo does not surface after hours of generation."""
    if baseline is None:
        return None
    from canvaslab.studies.commit_order.baseline import check_baseline_path

    return check_baseline_path(baseline)


def add_baseline(metrics: dict[str, Any], path: Path, probes, out: Path, max_new_tokens: int,
                 device: str, dtype: str, batch_size: int) -> dict[str, Any]:
    """``order-metrics --baseline``: the baseline scored with a progress line."""
    from canvaslab.studies.commit_order.baseline import add_baseline as add

    with study_progress("baseline", "probes") as progress:
        return add(metrics, path, probes, out, max_new_tokens, device, dtype, batch_size,
                   progress=lambda done, total: progress(done, total))
