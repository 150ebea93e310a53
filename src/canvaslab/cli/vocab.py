"""``canvaslab vocab-scan``: the unused tokens of a vocabulary, their expected count per canvas, and
their frequency in a corpus."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer
from rich.console import Console
from rich.table import Table

from canvaslab.cli import options
from canvaslab.cli.app import app
from canvaslab.errors import CanvaslabError

REPORT_FILE = "vocab_scan.json"
COUNTS_FILE = "token_counts.npy"
# canvaslab.studies.unused_tokens.TOKENIZER_PRESETS (held equal by tests/cli): named here so the help needs no import.
TOKENIZER_PRESET_NAMES = ("tiny", "real-shapes", "gemma3", "mini")


def _check_corpus_files(paths: list[Path]) -> None:
    for path in paths:
        if not path.is_file():
            raise CanvaslabError(f"--corpus {path}: no such file (build one with `canvaslab assets corpus --out FILE`)")


def _blocks_text(blocks: list[list[int]]) -> str:
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in blocks)


def render_report(report: dict, console: Console) -> None:
    """Print the scan as one rich table."""
    table = Table(title=f"vocabulary scan: {report['tokenizer']}", show_header=False)
    table.add_column("measure", style="bold")
    table.add_column("value")
    table.add_row("vocabulary size", f"{report['vocab_size']:,}")
    table.add_row("<unusedN> tokens", f"{report['unused_count']:,}")
    table.add_row("id blocks", _blocks_text(report["unused_id_blocks"]) or "-")
    table.add_row(
        f"expected per canvas of {report['canvas_length']}", f"{report['expected_unused_per_canvas']:.2f}"
    )
    corpus = report["corpus"]
    if corpus is not None:
        table.add_row("corpus files", "\n".join(corpus["files"]))
        table.add_row("tokens scanned", f"{corpus['tokens_scanned']:,}")
        table.add_row("unused occurrences", f"{corpus['unused_occurrences_total']:,}")
        for entry in corpus["unused_occurrences"][:10]:
            table.add_row(f"  {entry['token']} (id {entry['id']})", f"{entry['count']:,}")
        table.add_row("tokens / second", f"{corpus['tokens_per_second']:,.0f}")
    console.print(table)


@app.command("vocab-scan")
def vocab_scan(
    tokenizer: Annotated[str, typer.Option(
        "--tokenizer", help=f"a preset ({', '.join(TOKENIZER_PRESET_NAMES)}) or a local tokenizer directory")],
    corpus: Annotated[List[Path], typer.Option("--corpus", help="UTF-8 text file to scan (repeatable)")] = [],
    canvas_length: Annotated[int, typer.Option("--canvas-length", help="tokens per canvas",
                                               callback=options.whole_number(1))] = 256,
    out: Annotated[Path, typer.Option("--out", help="folder for vocab_scan.json (+ token_counts.npy)",
                                      callback=options.writable_folder)] = Path("runs/vocab-scan"),
    cache_dir: Annotated[Optional[Path], typer.Option("--cache-dir",
                                                      help="canvaslab cache root, for the gemma3 preset")] = None,
) -> None:
    """Find the <unusedN> tokens, the expected count per random canvas, and (with --corpus) their frequency."""
    from canvaslab.io import write_json_atomic
    from canvaslab.studies.unused_tokens import resolve_tokenizer, save_token_counts, scan_corpus, scan_report

    _check_corpus_files(corpus)
    tok = resolve_tokenizer(tokenizer, cache_dir)
    scan = scan_corpus(tok, corpus) if corpus else None
    report = scan_report(tokenizer, tok, canvas_length, scan)
    if scan is not None:
        report["corpus"]["token_counts_file"] = str(save_token_counts(out / COUNTS_FILE, scan.token_counts))
    write_json_atomic(out / REPORT_FILE, report)
    console = Console()
    render_report(report, console)
    console.print(f"wrote {out / REPORT_FILE}")
