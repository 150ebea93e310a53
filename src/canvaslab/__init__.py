"""canvaslab: run and study block-diffusion language models (DiffusionGemma first).

The package is organised by the product's parts, each importing only the parts below it (README, Layout):

- ``canvaslab.models``      presets, local checkpoints and config files -> a ready model + tokenizer
- ``canvaslab.generation``  transformers' own generate loop, with per-row randomness
- ``canvaslab.invariant``   stock / rowwise / invariant modes (``canvaslab.batch_invariant()``)
- ``canvaslab.capture``     module/op capture of row 0 and byte-exact comparison against a reference
- ``canvaslab.studies``     the studies (batch size, ...), each a function plus a CLI command
- ``canvaslab.analysis``    measures and tests computed from study outputs (no model needed)
- ``canvaslab.reports``     rich tables and JSON output
- ``canvaslab.cli``         the ``canvaslab`` command
"""

from canvaslab.errors import CanvaslabError

__version__ = "0.2.0"

__all__ = ["CanvaslabError", "__version__", "batch_invariant"]


def __getattr__(name: str):
    # Imported on first use: torch and transformers take seconds to import, and the CLI must answer
    # `--help` and bad input without paying for them.
    if name == "batch_invariant":
        from canvaslab.invariant import batch_invariant

        return batch_invariant
    raise AttributeError(f"module 'canvaslab' has no attribute {name!r}")
