"""``canvaslab batch-study``: the controlled batch-size experiment of seeds 000-002."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from canvaslab.cli import options
from canvaslab.cli.app import app
from canvaslab.models import load_model
from canvaslab.prompts import resolve_prompts
from canvaslab.reports.batch_study import batch_study_table
from canvaslab.studies.batch_size import BatchStudySettings, run_batch_study
from canvaslab.studies.batch_size.design import parse_batch_sizes


@app.command("batch-study")
def batch_study(
    model: str = options.Model,
    prompts: str = typer.Option("3", "--prompts", help="N built-in prompts, or a file (.txt: one per line; .jsonl: {\"prompt\": ...})"),
    batch_sizes: str = typer.Option("1,2,3,4", "--batch-sizes", help="comma-separated; B=1 is the reference"),
    fill: str = typer.Option("copies", "--fill", help="copies: other rows are bit-identical copies; mixed: other prompts"),
    copy_prompt_cache: bool = typer.Option(True, "--copy-prompt-cache/--no-copy-prompt-cache",
                                           help="give every row the B=1 prompt cache, as the seeds did; off studies the encoder on the batch"),
    rng: str = options.Rng,
    mode: str = options.Mode,
    seed: int = options.Seed,
    dtype: str = options.Dtype,
    device: str = options.Device,
    layers: Optional[int] = options.Layers,
    model_seed: int = options.ModelSeed,
    steps: Optional[int] = options.Steps,
    max_new_tokens: Optional[int] = options.MaxNewTokens,
    record_ops: bool = typer.Option(True, "--record-ops/--modules-only", help="also record numeric ops between modules (finds origins)"),
    repeat_control: str = typer.Option("fresh-process", "--repeat-control",
                                       help="fresh-process: repeat B=1 in a new interpreter with another hash seed "
                                            "(what a resumed study relies on); same-process: in this one"),
    out: Optional[Path] = typer.Option(None, "--out", help="write DIR/batch_study.json (a rerun with the same DIR resumes)"),
) -> None:
    """Does row 0's generation depend on what shares its batch? Compare it byte for byte with B=1."""
    sizes = parse_batch_sizes(batch_sizes)
    prompt_list = resolve_prompts(prompts)
    settings = BatchStudySettings(batch_sizes=sizes, fill=fill, copy_prompt_cache=copy_prompt_cache, rng=rng, mode=mode,
                                  seed=seed, generation=options.generation_overrides(steps, max_new_tokens),
                                  record_ops=record_ops, repeat_control=repeat_control)
    loaded = load_model(model, dtype=dtype, device=device, layers=layers, seed=model_seed)
    console = Console()
    total = len(prompt_list) * (len(sizes) - 1)
    config = {"model": model, "dtype": dtype, "device": str(loaded.device), "layers": layers, "model_seed": model_seed,
              "generation": loaded.generation_defaults}
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} runs"),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("batch-size study", total=total)

        def progress(message: str) -> None:
            bar.update(task, description=message)
            if "B=1" not in message:
                bar.advance(task)

        result = run_batch_study(loaded, prompt_list, settings, out_dir=out, progress=progress, config=config)
    console.print(batch_study_table(result))
    if out is not None:
        console.print(f"wrote {out / 'batch_study.json'}")
