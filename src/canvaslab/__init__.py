"""canvaslab: run and study block-diffusion language models (DiffusionGemma first).

The Python API (``canvaslab.api``, re-exported here) mirrors the ``canvaslab`` command one to one::

    import canvaslab

    out = canvaslab.generate(["The river"], model="tiny", mode="invariant")
    results = canvaslab.BatchSizeStudy(model="tiny", batch_sizes=(1, 2, 3)).run(out="runs/batch")
    canvaslab.open_results("runs/batch").to_pandas()

The package is organised by the product's parts, each importing only the parts below it (docs: Python API,
"Map of the package"): ``cli`` > ``api`` > ``reports`` > ``studies`` | ``training`` > ``analysis`` > ``capture``
> ``generation`` > ``invariant`` > ``models`` | ``assets`` | ``prompts`` | ``scoring`` > ``environment`` |
``choices`` > ``io`` | ``errors``.
"""

from canvaslab.api import (
    BatchSizeStudy,
    CommitOrderStudy,
    Generation,
    NoiseStudy,
    OpScan,
    Outcome,
    Results,
    export,
    generate,
    load_model,
    open_results,
    report,
)
from canvaslab.errors import CanvaslabError

__version__ = "0.3.0"

__all__ = ["BatchSizeStudy", "CanvaslabError", "CommitOrderStudy", "Generation", "NoiseStudy", "OpScan", "Outcome",
           "Results", "STUDIES", "__version__", "batch_invariant", "export", "generate", "load_model",
           "open_results", "report"]


def __getattr__(name: str):
    # Imported on first use: torch and transformers take seconds to import, and the CLI must answer
    # `--help` and bad input without paying for them.
    if name == "batch_invariant":
        from canvaslab.invariant import batch_invariant

        return batch_invariant
    if name == "STUDIES":
        from canvaslab.api.registry import STUDIES

        return STUDIES
    raise AttributeError(f"module 'canvaslab' has no attribute {name!r}")
