"""Export a study's store as one Parquet table, for pandas, DuckDB, Polars or an experiment tracker.

One row per finished unit: ``study``, ``plan_sha256``, ``unit``, then every top-level field of its record
as a column (scalars as they are; lists and objects as JSON text, so every column has one type whatever a
study records), ``worker`` (where it ran, JSON) and ``record`` (the whole record, JSON). Failed units are
listed with their error in ``failed`` and no record.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from canvaslab.choices import EXPORT_FORMATS as FORMATS
from canvaslab.errors import CanvaslabError, RunFailed
from canvaslab.io import atomic_writer, check_names, disk_full
from canvaslab.studies.engine.plan import registered_plan, sha256_of
from canvaslab.studies.engine.store import Store


def _cell(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value


def store_rows(folder: Path) -> list[dict[str, Any]]:
    registered = registered_plan(folder)
    if registered is None:
        raise CanvaslabError(f"{folder} holds no study store (store/plan.json); give a folder a study wrote")
    digest = sha256_of(registered)
    store = Store(folder, digest, read_only=True)  # a reader: damaged records stay where they are
    units = list(store.stored_units())
    rows = []
    for unit, stored in store.stored(units).items():
        fields = {f"record.{key}": _cell(value) for key, value in stored["record"].items()}
        rows.append({"study": registered["study"], "plan_sha256": digest, "unit": unit, "failed": None, **fields,
                     "worker": json.dumps(stored["worker"], sort_keys=True),
                     "record": json.dumps(stored["record"], sort_keys=True)})
    for unit, failure in store.failures().items():
        if unit not in units:
            rows.append({"study": registered["study"], "plan_sha256": digest, "unit": unit,
                         "failed": failure["error"]})
    store.say_passed_over()
    return rows


def store_table(folder: str | Path):
    """``folder``'s store as one ``pyarrow.Table`` (the rows of ``store_rows``; a column a row lacks is null)."""
    import pyarrow as pa

    rows = store_rows(Path(folder))
    columns = list(dict.fromkeys(key for row in rows for key in row))
    return pa.Table.from_pylist([{c: row.get(c) for c in columns} for row in rows])


def export_parquet(folder: str | Path, path: str | Path) -> Path:
    """Write ``folder``'s store to ``path`` (atomically, ``canvaslab.io.atomic_writer``)."""
    import pyarrow.parquet as pq

    path = check_names(path, "--out")
    table = store_table(folder)
    try:
        with atomic_writer(path, binary=True) as handle:
            pq.write_table(table, handle)
    except OSError as error:
        if not disk_full(error):
            raise
        raise RunFailed(f"the disk is full ({error.strerror or error}): {path} could not be written; the study "
                        "folder is unchanged: free some space and export again") from None
    return path
