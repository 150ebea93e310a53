"""One small reader per study: the only code that knows a study's files.

Each reader turns a study folder's outputs into a plain view the report draws from, filling what older
files lack with ``None`` and a note, never failing on a missing optional key. When a study's files change
(a move to the study engine's store, for one), only its reader changes.
"""

from __future__ import annotations

from pathlib import Path

from canvaslab.reports.readers import batch_study, noise_study, op_scan, order_metrics

READERS = (batch_study, order_metrics, noise_study, op_scan)


def studies_in(folder: Path) -> list[str]:
    """The names of the studies whose outputs ``folder`` (or a single result file) holds."""
    return [reader.STUDY for reader in READERS if reader.find(folder) is not None]
