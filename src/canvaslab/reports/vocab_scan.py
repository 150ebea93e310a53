"""The vocabulary scan's terminal table: the unused tokens, their expected count per canvas, and (with a
corpus) how often each occurs."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def _blocks_text(blocks: list[list[int]]) -> str:
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in blocks)


def vocab_scan_table(report: dict[str, Any]) -> Table:
    """The scan as one two-column table (measure, value)."""
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
    return table
