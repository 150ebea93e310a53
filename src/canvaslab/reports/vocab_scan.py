"""The vocabulary scan's terminal table: the unused tokens, their expected count per canvas, and (with a
corpus) how often each occurs. The tokenizer's name, file names and token strings are shown with control
characters escaped and never read as markup."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from canvaslab.reports.names import cell, plain
from canvaslab.terminal import printable


def _blocks_text(blocks: list[list[int]]) -> str:
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in blocks)


def vocab_scan_table(report: dict[str, Any]) -> Table:
    """The scan as one two-column table (measure, value)."""
    table = Table(title=cell(f"vocabulary scan: {report['tokenizer']}"), show_header=False)
    table.add_column("measure", style="bold")
    table.add_column("value")
    table.add_row("vocabulary size", f"{report['vocab_size']:,}")
    table.add_row("<unusedN> tokens", f"{report['unused_count']:,}")
    table.add_row("id blocks", cell(_blocks_text(report["unused_id_blocks"]) or "-"))
    table.add_row(
        cell(f"expected per canvas of {report['canvas_length']}"), f"{report['expected_unused_per_canvas']:.2f}"
    )
    corpus = report["corpus"]
    if corpus is not None:
        table.add_row("corpus files", plain("\n".join(printable(name) for name in corpus["files"])))
        table.add_row("tokens scanned", f"{corpus['tokens_scanned']:,}")
        table.add_row("unused occurrences", f"{corpus['unused_occurrences_total']:,}")
        for entry in corpus["unused_occurrences"][:10]:
            table.add_row(cell(f"  {entry['token']} (id {entry['id']})"), f"{entry['count']:,}")
        table.add_row("tokens / second", f"{corpus['tokens_per_second']:,.0f}")
    return table
