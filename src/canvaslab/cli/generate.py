"""``canvaslab generate``: generate text with per-row randomness (or transformers' own)."""

from __future__ import annotations

from typing import List, Optional

import typer
from rich.console import Console

from canvaslab.cli import options
from canvaslab.cli.app import app
from canvaslab.errors import CanvaslabError
from canvaslab.generation import generate as generate_rows
from canvaslab.models import load_model
from canvaslab.studies.commit_order.prompting import encode_prompt


@app.command("generate")
def generate(
    prompt: List[str] = typer.Option(..., "--prompt", help="a prompt; repeat for a batch"),
    model: str = options.Model,
    rng: str = options.Rng,
    mode: str = options.Mode,
    seed: int = options.Seed,
    dtype: str = options.Dtype,
    device: str = options.Device,
    layers: Optional[int] = options.Layers,
    model_seed: int = options.ModelSeed,
    steps: Optional[int] = options.Steps,
    max_new_tokens: Optional[int] = options.MaxNewTokens,
) -> None:
    """Generate one row per --prompt, batched, with transformers' own DiffusionGemma loop."""
    if any(not text.strip() for text in prompt):
        raise CanvaslabError("--prompt must not be empty")
    loaded = load_model(model, dtype=dtype, device=device, layers=layers, seed=model_seed)
    # A checkpoint with a chat template (the trained `mini`) gets its user turn, as the studies give it.
    ids = [encode_prompt(loaded.tokenizer, text) for text in prompt]
    output = generate_rows(loaded, ids, seed=seed, rng=rng, mode=mode, generation=options.generation_overrides(steps, max_new_tokens))
    console = Console()
    for text, row in zip(prompt, output.rows):
        console.print(f"[bold]{text}[/]\n{row.text}\n[dim]stop: {row.stop_point}[/]\n", highlight=False)
