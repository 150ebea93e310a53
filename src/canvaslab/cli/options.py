"""Options shared by every command that loads a model and generates."""

from __future__ import annotations

from typing import Optional

import typer

Model = typer.Option("tiny", "--model", help="preset (tiny, real-shapes), a local checkpoint directory, or a config.json (random weights)")
Dtype = typer.Option("auto", "--dtype", help="auto (the preset's), float32, bfloat16, float16")
Device = typer.Option("cpu", "--device", help="cpu, cuda, cuda:N or auto")
Layers = typer.Option(None, "--layers", help="keep the first N decoder/encoder layers")
ModelSeed = typer.Option(0, "--model-seed", help="seed of the random weights (presets and config.json)")
Seed = typer.Option(0, "--seed", help="generation seed")
Rng = typer.Option("row", "--rng", help="row: per-row random streams; stock: transformers' own sampling")
Mode = typer.Option("stock", "--mode", help="stock | rowwise (the seeds' row-by-row fix) | invariant (batch-invariant ops)")
Steps = typer.Option(None, "--steps", help="max denoising steps (default: the model's)")
MaxNewTokens = typer.Option(None, "--max-new-tokens", help="tokens to generate (default: the model's)")


def generation_overrides(steps: Optional[int], max_new_tokens: Optional[int]) -> dict:
    return {"max_denoising_steps": steps, "max_new_tokens": max_new_tokens}
