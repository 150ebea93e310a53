"""Models: presets (random weights from a config), trained models installed as packages
(``canvaslab.models.registry``), local checkpoints, their tokenizers, and the model's anatomy
(``canvaslab.models.anatomy``).

The loaders are imported on first use, so ``canvaslab.models.anatomy``'s paths serve the report tables
without importing torch and transformers.
"""

from __future__ import annotations

from typing import Any

_LAZY = {"LoadedModel": "canvaslab.models.loading", "load_model": "canvaslab.models.loading",
         "load_study_model": "canvaslab.models.loading",
         "PRESETS": "canvaslab.models.presets"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)


__all__ = ["PRESETS", "LoadedModel", "load_model", "load_study_model"]
