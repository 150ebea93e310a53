"""The op scan's terminal table: one row per batch-sensitive op, the classes of batch sizes per mode."""

from __future__ import annotations

from rich.table import Table


def op_scan_table(scans: list[dict]) -> Table:
    table = Table(title="op scan: batch sizes whose row 0 agrees bit for bit (classes; * varies with batch size)")
    table.add_column("op", overflow="fold")
    table.add_column("per-sequence shape", overflow="fold")
    for scan in scans:
        table.add_column(scan["mode"], overflow="fold")
    for name, first in scans[0]["ops"].items():
        cells = [str(scan["ops"][name]["classes"]) + ("" if scan["ops"][name]["invariant"] else " *")
                 for scan in scans]
        table.add_row(name, first["shape"], *cells)
    return table
