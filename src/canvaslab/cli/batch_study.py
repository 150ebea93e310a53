"""``canvaslab batch-study``: the controlled batch-size experiment of seeds 000-002."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from canvaslab.choices import FILLS, REPEAT_CONTROLS
from canvaslab.cli import options
from canvaslab.cli.app import app


@app.command("batch-study")
def batch_study(
    model: options.Model = "tiny",
    prompts: Annotated[str, typer.Option(
        "--prompts", help="N built-in prompts, or a file (.txt: one per line; .jsonl: {\"prompt\": ...})",
        callback=options.prompts)] = "3",
    batch_sizes: options.BatchSizes = "1,2,3,4",
    fill: Annotated[str, typer.Option("--fill", help="copies: other rows are bit-identical copies; mixed: other prompts",
                                      callback=options.one_of(FILLS))] = "copies",
    row: Annotated[int, typer.Option("--row", help="the studied prompt's row in every batch (B=1 is the reference)",
                                     callback=options.whole_number(0))] = 0,
    copy_prompt_cache: Annotated[bool, typer.Option(
        "--copy-prompt-cache/--no-copy-prompt-cache",
        help="give every row the B=1 prompt cache, as the seeds did (prompts of at least 2 tokens); off studies "
             "the encoder on the batch")] = True,
    rng: options.Rng = "row",
    mode: options.Mode = "stock",
    seed: options.Seed = 0,
    dtype: options.Dtype = "auto",
    device: options.Device = "cpu",
    layers: options.Layers = None,
    model_seed: options.ModelSeed = 0,
    steps: options.Steps = None,
    max_new_tokens: options.MaxNewTokens = None,
    record_ops: Annotated[bool, typer.Option("--record-ops/--modules-only",
                                             help="also record numeric ops between modules (finds origins)")] = True,
    repeat_control: Annotated[str, typer.Option(
        "--repeat-control", help="fresh-process: repeat B=1 in a new interpreter with another hash seed "
                                 "(what a resumed study relies on); same-process: in this one",
        callback=options.one_of(REPEAT_CONTROLS))] = "fresh-process",
    wide: Annotated[bool, typer.Option("--wide/--no-wide", help="full module paths in the table (wider than 80 columns)")] = False,
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="write DIR/batch_study.json (a rerun with the same DIR resumes)",
        callback=options.writable_folder)] = None,
    executor: options.Executor = "local",
    ray_address: options.RayAddress = None,
    workers: options.Workers = None,
    retries: options.Retries = 0,
    fresh: options.Fresh = False,
) -> None:
    """Does a row's generation depend on what shares its batch? Compare it byte for byte with B=1."""
    engine = options.engine_options(executor, ray_address, workers, retries, fresh)  # before any import
    from canvaslab.api import BatchSizeStudy

    plan = BatchSizeStudy(model=model, prompts=prompts, batch_sizes=batch_sizes, fill=fill, row=row,
                          copy_prompt_cache=copy_prompt_cache, rng=rng, mode=mode, seed=seed, dtype=dtype,
                          device=device, layers=layers, model_seed=model_seed, steps=steps,
                          max_new_tokens=max_new_tokens, record_ops=record_ops, repeat_control=repeat_control)
    options.run_and_print("batch_size", lambda progress: plan.run(out, progress=progress, **engine), out, wide)
