"""The typer application every command module registers on, and how it ends on a user's mistake.

Typer runs in its standalone mode: its own usage errors (unknown command or option, a value of the wrong
type, a missing option) print the usage and exit 2. The group class below adds the project's rule for the
rest: a ``CanvaslabError`` (a bad value, a missing file, a damaged state file) is one line on stderr and
exit 2, from the option checks at parse time as from the command itself; Ctrl-C says how to resume. A path
over the system's limits that reached the file system unchecked is the user's too: one line, exit 2.
Being part of the app, the same holds under typer's ``CliRunner`` as for the installed command.
"""

import errno

import typer
from rich.console import Console
from typer.core import TyperGroup

from canvaslab.errors import CanvaslabError, one_line
from canvaslab.terminal import printable

USAGE_EXIT = 2
INTERRUPTED_EXIT = 130


def print_error(message: str) -> None:
    """One line on stderr; the message is plain text (paths may contain rich markup characters)."""
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    console.print("[bold red]error:[/] ", end="")
    console.print(printable(one_line(message)), markup=False)


class CanvaslabGroup(TyperGroup):
    """The top-level group: a user's mistake raised while a command's options are checked or while it runs
    ends here (sub-groups and commands are invoked from this ``invoke``)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except CanvaslabError as error:
            print_error(str(error))
            raise typer.Exit(error.exit_code) from None
        except OSError as error:
            if error.errno != errno.ENAMETOOLONG:
                raise
            print_error(f"{error.filename}: a name in this path is over 255 bytes, or the path over 4,095: "
                        "choose a shorter one")
            raise typer.Exit(USAGE_EXIT) from None
        except KeyboardInterrupt:
            Console(stderr=True).print("interrupted: a study keeps what it finished; rerun the same command to resume")
            raise typer.Exit(INTERRUPTED_EXIT) from None


app = typer.Typer(
    name="canvaslab",
    cls=CanvaslabGroup,
    help="Run and study block-diffusion language models (DiffusionGemma first).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
