"""Models: presets (random weights from a config), local checkpoints, and their tokenizers."""

from canvaslab.models.loading import LoadedModel, load_model
from canvaslab.models.presets import PRESETS

__all__ = ["PRESETS", "LoadedModel", "load_model"]
