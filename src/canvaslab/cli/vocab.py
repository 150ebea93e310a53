"""``canvaslab vocab-scan``: the unused tokens of a vocabulary, their expected count per canvas, and
their frequency in a corpus."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from canvaslab.cli import options
from canvaslab.cli.app import app
from canvaslab.errors import CanvaslabError
from canvaslab.terminal import printable

REPORT_FILE = "vocab_scan.json"
COUNTS_FILE = "token_counts.npy"
from canvaslab.choices import TOKENIZER_PRESETS as TOKENIZER_PRESET_NAMES


def _check_corpus_files(paths: list[Path]) -> None:
    for path in paths:
        if not path.is_file():
            raise CanvaslabError(f"--corpus {path}: no such file (build one with `canvaslab assets corpus --out FILE`)")


@app.command("vocab-scan")
def vocab_scan(
    tokenizer: Annotated[str, typer.Option(
        "--tokenizer", help=f"a preset ({', '.join(TOKENIZER_PRESET_NAMES)}) or a local tokenizer directory",
        callback=options.path)],
    corpus: Annotated[List[Path], typer.Option("--corpus", help="UTF-8 text file to scan (repeatable)",
                                               callback=options.path)] = [],
    canvas_length: Annotated[Optional[int], typer.Option(
        "--canvas-length", help="tokens per canvas (default: the canvas of the model the tokenizer belongs to: "
        "mini 128, tiny and real-shapes 256, a checkpoint folder's config.json; else DiffusionGemma's 256)",
        callback=options.whole_number(1))] = None,
    out: Annotated[Path, typer.Option("--out", help="folder for vocab_scan.json (+ token_counts.npy)",
                                      callback=options.writable_folder)] = Path("runs/vocab-scan"),
    cache_dir: Annotated[Optional[Path], typer.Option("--cache-dir", help="canvaslab cache root, for the gemma3 "
                                                      "preset", callback=options.path)] = None,
) -> None:
    """Find the <unusedN> tokens, the expected count per random canvas, and (with --corpus) their frequency."""
    from rich.console import Console

    from canvaslab.io import write_json_atomic
    from canvaslab.reports.vocab_scan import vocab_scan_table
    from canvaslab.studies.unused_tokens import resolve_tokenizer, save_token_counts, scan_corpus, scan_report
    from canvaslab.studies.unused_tokens.vocab_scan import CanvasLength, canvas_length_of

    _check_corpus_files(corpus)
    tok = resolve_tokenizer(tokenizer, cache_dir)
    canvas = canvas_length_of(tokenizer) if canvas_length is None else CanvasLength(canvas_length, "--canvas-length")
    scan = scan_corpus(tok, corpus) if corpus else None
    report = scan_report(tokenizer, tok, canvas.tokens, scan, canvas_source=canvas.source)
    if scan is not None:
        report["corpus"]["token_counts_file"] = str(save_token_counts(out / COUNTS_FILE, scan.token_counts))
    write_json_atomic(out / REPORT_FILE, report)
    console = Console()
    console.print(vocab_scan_table(report))
    console.print(printable(f"canvas of {canvas.tokens} tokens: {canvas.source}"), markup=False, emoji=False,
                  highlight=False)
    console.print(printable(f"wrote {out / REPORT_FILE}"), markup=False, emoji=False, highlight=False)
