"""Entry point: imports every command module (each registers its commands on ``app``) and runs the app.

Command modules import torch, transformers and the studies inside their functions, so ``--help`` and
bad input are answered in well under a second.
"""

from __future__ import annotations

from canvaslab.cli import assets as _assets  # noqa: F401
from canvaslab.cli import batch_study as _batch_study  # noqa: F401
from canvaslab.cli import export as _export  # noqa: F401
from canvaslab.cli import generate as _generate  # noqa: F401
from canvaslab.cli import mini as _mini  # noqa: F401
from canvaslab.cli import noise_study as _noise_study  # noqa: F401
from canvaslab.cli import op_scan as _op_scan  # noqa: F401
from canvaslab.cli import order_metrics as _order_metrics  # noqa: F401
from canvaslab.cli import order_study as _order_study  # noqa: F401
from canvaslab.cli import report as _report  # noqa: F401
from canvaslab.cli import serve as _serve  # noqa: F401
from canvaslab.cli import vocab as _vocab  # noqa: F401
from canvaslab.cli.app import app


def main(argv: list[str] | None = None) -> None:
    """Run ``canvaslab``: returns when the command succeeded, else raises ``SystemExit`` with its code
    (2: bad input or usage, 130: interrupted)."""
    try:
        app(args=argv, prog_name="canvaslab")
    except SystemExit as done:
        if done.code not in (0, None):
            raise


if __name__ == "__main__":
    main()
