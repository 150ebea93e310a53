"""``canvaslab generate``: generate text with per-row randomness (or transformers' own).

The prompts and the generated text are shown line by line with every other control character escaped (an
escape sequence in a prompt or in a model's output is shown, never sent to the terminal), and never read as
markup."""

from __future__ import annotations

from typing import Annotated, List

import typer

from canvaslab.cli import options
from canvaslab.cli.app import app
from canvaslab.choices import unicode_text
from canvaslab.errors import CanvaslabError
from canvaslab.terminal import printable


def _non_empty(ctx, param, value):
    if any(not text.strip() for text in value):
        raise CanvaslabError(f"{options.option_name(param)} must not be empty")
    for text in value:
        unicode_text(options.option_name(param), text)
    return value


def shown_lines(text: object) -> str:
    """``text`` with its line breaks kept and every other control character escaped."""
    return "\n".join(printable(line) for line in str(text).split("\n"))


@app.command("generate")
def generate(
    prompt: Annotated[List[str], typer.Option("--prompt", help="a prompt; repeat for a batch", callback=_non_empty)],
    model: options.Model = "tiny",
    rng: options.Rng = "row",
    mode: options.Mode = "stock",
    seed: options.Seed = 0,
    dtype: options.Dtype = "auto",
    device: options.Device = "cpu",
    layers: options.Layers = None,
    model_seed: options.ModelSeed = 0,
    steps: options.Steps = None,
    max_new_tokens: options.MaxNewTokens = None,
) -> None:
    """Generate one row per --prompt, batched, with transformers' own DiffusionGemma loop."""
    from rich.console import Console
    from rich.text import Text

    from canvaslab.api import generate as generate_texts

    output = generate_texts(prompt, model, mode=mode, rng=rng, seed=seed, dtype=dtype, device=device, layers=layers,
                            model_seed=model_seed, steps=steps, max_new_tokens=max_new_tokens)
    console = Console()
    for text, row in zip(prompt, output.rows):
        shown = Text()
        shown.append(shown_lines(text), style="bold")
        shown.append(f"\n{shown_lines(row.text)}\n")
        shown.append(f"stop: {printable(row.stop_point)}", style="dim")
        shown.append("\n")
        console.print(shown, highlight=False)
