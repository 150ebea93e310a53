"""The typer application every command module registers on."""

import typer

app = typer.Typer(
    name="canvaslab",
    help="Run and study block-diffusion language models (DiffusionGemma first).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
