"""Entry point: imports every command module (which registers its commands) and turns user errors
into one clear line on stderr with exit code 2."""

from __future__ import annotations

import sys

from rich.console import Console

from canvaslab.cli.app import app
from canvaslab.errors import CanvaslabError

# Command modules register themselves on import.
from canvaslab.cli import batch_study as _batch_study  # noqa: F401,E402
from canvaslab.cli import generate as _generate  # noqa: F401,E402
from canvaslab.cli import mini as _mini  # noqa: F401,E402
from canvaslab.cli import noise_study as _noise_study  # noqa: F401,E402
from canvaslab.cli import op_scan as _op_scan  # noqa: F401,E402
from canvaslab.cli import order_metrics as _order_metrics  # noqa: F401,E402
from canvaslab.cli import order_study as _order_study  # noqa: F401,E402
from canvaslab.cli import assets as _assets  # noqa: F401,E402
from canvaslab.cli import vocab as _vocab  # noqa: F401,E402


def main(argv: list[str] | None = None) -> None:
    try:
        app(args=argv, standalone_mode=False)
    except CanvaslabError as error:
        Console(stderr=True).print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        Console(stderr=True).print("interrupted: finished runs are saved; rerun the same command to resume")
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as error:  # click's own usage errors arrive here in non-standalone mode
        import click

        if isinstance(error, click.exceptions.ClickException):
            error.show()
            sys.exit(error.exit_code)
        if isinstance(error, click.exceptions.Abort):
            sys.exit(1)
        raise


if __name__ == "__main__":
    main()
