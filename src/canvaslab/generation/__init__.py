"""Generation: transformers' own DiffusionGemma loop, with per-row randomness and observers."""

from canvaslab.generation.runner import GenerationOutput, RowResult, generate

__all__ = ["GenerationOutput", "RowResult", "generate"]
