"""The op scan's terminal table: one row per batch-sensitive op, the classes of batch sizes per mode.

Op names, shapes and modes come from the result file: they are shown with control characters escaped and never
read as markup."""

from __future__ import annotations

from rich.table import Table

from canvaslab.reports.names import cell


def op_scan_table(scans: list[dict]) -> Table:
    table = Table(title="op scan: batch sizes whose row 0 agrees bit for bit (classes; * varies with batch size)")
    table.add_column("op", overflow="fold")
    table.add_column("per-sequence shape", overflow="fold")
    for scan in scans:
        table.add_column(cell(scan["mode"]), overflow="fold")
    for name, first in scans[0]["ops"].items():
        cells = [cell(str(scan["ops"][name]["classes"]) + ("" if scan["ops"][name]["invariant"] else " *"))
                 for scan in scans]
        table.add_row(cell(name), cell(first["shape"]), *cells)
    return table
