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
from typer.core import TyperCommand, TyperGroup

from canvaslab import __version__
from canvaslab.errors import CanvaslabError, one_line
from canvaslab.extras import missing_extra
from canvaslab.terminal import printable

USAGE_EXIT = 2
INTERRUPTED_EXIT = 130


def print_error(message: str) -> None:
    """One line on stderr; the message is plain text (paths may contain rich markup characters)."""
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    console.print("[bold red]error:[/] ", end="")
    console.print(printable(one_line(message)), markup=False)


def without_flag_metavars(params: list) -> list:
    """``params`` with no value placeholder on their on/off flags: typer shows ``--wide <bool>``, which reads as
    if the flag took a value (``--wide true`` is refused). A flag's help line is its spellings alone."""
    for param in params:
        if getattr(param, "is_bool_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


FLAG_VALUES = {"true", "false", "yes", "no", "on", "off", "1", "0"}


def flag_given_a_value(params: list, args: list[str]) -> str | None:
    """What to say when a flag was followed by a value (``--parquet true``): None if none was."""
    flags = {name: param for param in params if getattr(param, "is_bool_flag", False)
             for name in (*param.opts, *param.secondary_opts)}
    for name, value in zip(args, args[1:]):
        if name in flags and value.lower() in FLAG_VALUES:
            spellings = " or ".join((*flags[name].opts, *flags[name].secondary_opts))
            return f"{name} takes no value ({name} {value}): write {spellings}"
    return None


class CanvaslabCommand(TyperCommand):
    """Every command: its flags shown without a value placeholder, and a value given to one named as such."""

    def get_params(self, ctx):
        return without_flag_metavars(super().get_params(ctx))

    def parse_args(self, ctx, args):
        given = list(args)
        try:
            return super().parse_args(ctx, args)
        except typer.TyperException:  # typer's usage errors (an extra argument, here)
            message = flag_given_a_value(self.params, given)
            if message is None:
                raise
            raise CanvaslabError(message) from None


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
        except ImportError as error:
            refusal = missing_extra(error)
            if refusal is None:
                raise
            print_error(str(refusal))
            raise typer.Exit(refusal.exit_code) from None
        except KeyboardInterrupt:
            Console(stderr=True).print("interrupted: a study keeps what it finished; rerun the same command to resume")
            raise typer.Exit(INTERRUPTED_EXIT) from None

    def get_params(self, ctx):
        return without_flag_metavars(super().get_params(ctx))


class CanvaslabTyper(typer.Typer):
    """A typer application whose groups and commands follow the rules above (sub-applications use it too)."""

    def __init__(self, **settings):
        super().__init__(cls=settings.pop("cls", CanvaslabGroup), **settings)

    def command(self, *args, **settings):
        return super().command(*args, cls=settings.pop("cls", CanvaslabCommand), **settings)


def print_version(value: bool) -> None:
    if value:
        typer.echo(f"canvaslab {__version__}")
        raise typer.Exit()


app = CanvaslabTyper(
    name="canvaslab",
    help="Run and study block-diffusion language models (DiffusionGemma first).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def canvaslab_options(
    version: bool = typer.Option(False, "--version", help="print canvaslab's version and exit", is_eager=True,
                                 callback=print_version),
) -> None:
    """Run and study block-diffusion language models (DiffusionGemma first)."""
