"""Export a study's store as one typed table (Parquet or CSV), for pandas, DuckDB, Polars or a tracker.

One row per finished unit: ``study``, ``plan_sha256``, ``unit``, then every top-level field of its record
as a column of its own Arrow type (numbers and texts as they are, lists as lists, objects as structs:
``record.runs`` is a list of structs), ``worker`` (where it ran, a struct) and ``record`` (the whole record as
JSON text, the exact round trip). Failed units are listed with their error in ``failed`` and no record.

A field whose values no one Arrow type holds across the rows (a list of numbers in one record and of texts in
another) is written as JSON text rather than refused. CSV has no nesting: structs become one column per field
(``worker.host``) and lists JSON text.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from canvaslab.choices import EXPORT_FORMATS as FORMATS
from canvaslab.choices import one_of
from canvaslab.errors import CanvaslabError, RunFailed
from canvaslab.io import atomic_writer, check_names, disk_full
from canvaslab.studies.engine.plan import registered_plan, sha256_of
from canvaslab.studies.engine.store import Store


UnitsOfPlan = Callable[[dict[str, Any], Path], list[str]]


def plan_units(folder: Path, registered: dict[str, Any], units_of: UnitsOfPlan | None) -> set[str] | None:
    """The unit ids of ``folder``'s registered plan, by its study's ``Study.units_of_plan``; None without one
    (every stored record is then listed)."""
    if units_of is None:
        return None
    try:
        units = set(units_of(registered["plan"], folder))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
        raise CanvaslabError(f"{folder}'s registered plan is not a {registered['study']} plan "
                             f"({type(error).__name__}: {error}): it was not written by canvaslab") from None
    if not all(isinstance(unit, str) for unit in units):
        raise CanvaslabError(f"{folder}'s registered plan names units that are not texts: it was not written by "
                             "canvaslab")
    return units


def _kind(value: Any) -> str | None:
    """What a cell holds, for checking that a column holds one kind: None for null."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "number" if -2**63 <= value < 2**63 else "an integer beyond 64 bits"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "text" if _encodable(value) else "a lone surrogate"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _odd_rows(rows: list[dict[str, Any]]) -> set[int]:
    """The rows with a record field of another kind than that field holds in most rows (a text where numbers
    are, ties going to the first row's kind), or of a kind no column can hold."""
    odd: set[int] = set()
    for column in dict.fromkeys(key for row in rows for key in row if key.startswith("record.")):
        kinds = [_kind(row.get(column)) for row in rows]
        usual = Counter(k for k in kinds if k in ("bool", "number", "text", "list", "object")).most_common(1)
        odd |= {i for i, kind in enumerate(kinds) if kind is not None and (not usual or kind != usual[0][0])}
    return odd


def _row(study: str, digest: str, unit: str, stored: dict[str, Any]) -> dict[str, Any]:
    fields = {f"record.{key}": value for key, value in stored["record"].items()}
    return {"study": study, "plan_sha256": digest, "unit": unit, "failed": None, **fields,
            "worker": stored["worker"], "record": json.dumps(stored["record"], sort_keys=True)}


def store_rows(folder: Path, units_of: UnitsOfPlan | None = None) -> list[dict[str, Any]]:
    """One row per stored unit of the plan (``units_of``: the study's ``Study.units_of_plan``; records of other
    units are passed over) and one per failed unit."""
    registered = registered_plan(folder)
    if registered is None:
        raise CanvaslabError(f"{folder} holds no study store (store/plan.json); give a folder a study wrote")
    digest = sha256_of(registered)
    store = Store(folder, digest, read_only=True)  # a reader: damaged records stay where they are
    planned = plan_units(folder, registered, units_of)
    units = _planned(store, store.stored_units(), planned)
    rows = [_row(registered["study"], digest, unit, stored) for unit, stored in store.stored(units).items()]
    odd = _odd_rows(rows)
    for index in sorted(odd):
        store.pass_over(store.path_of(rows[index]["unit"]))
    rows = [row for index, row in enumerate(rows) if index not in odd]
    rows += _failed_rows(store, registered["study"], digest, planned, set(units))
    store.say_passed_over()
    return rows


def _failed_rows(store: Store, study: str, digest: str, planned: set[str] | None, stored: set[str]) -> list[dict]:
    """One row per failure note of a unit of the plan that has no stored record (other notes are passed over)."""
    return [{"study": study, "plan_sha256": digest, "unit": unit, "failed": failure["error"]}
            for unit, failure in store.failures(planned).items() if unit not in stored]


def _planned(store: Store, units: list[str], planned: set[str] | None) -> list[str]:
    """``units`` that are the plan's; the files of the others are passed over (foreign to the plan)."""
    if planned is None:
        return units
    for unit in units:
        if unit not in planned:
            store.pass_over(store.path_of(unit))
    return [unit for unit in units if unit in planned]


def store_table(folder: str | Path, units_of: UnitsOfPlan | None = None):
    """``folder``'s store as one ``pyarrow.Table`` (the rows of ``store_rows``; a column a row lacks is null)."""
    import pyarrow as pa

    rows = store_rows(Path(folder), units_of)
    columns = list(dict.fromkeys(key for row in rows for key in row))
    return pa.table({column: _typed_column([row.get(column) for row in rows]) for column in columns})


def _typed_column(values: list[Any]):
    """``values`` as one Arrow array of the type pyarrow infers (structs, lists); JSON text where no one type
    holds them all, or where the type is one Parquet cannot store (an object with no fields)."""
    import pyarrow as pa

    try:
        array = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        array = None
    if array is None or not _storable(array.type):
        array = pa.array([None if value is None else json.dumps(value, sort_keys=True) for value in values],
                         pa.string())
    return array


def _storable(kind) -> bool:
    import pyarrow as pa

    if pa.types.is_struct(kind):
        return kind.num_fields > 0 and all(_storable(field.type) for field in kind)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _storable(kind.value_type)
    return True


def flat_table(table):
    """``table`` for CSV: struct columns split into one column per field (``worker.host``), lists as JSON text."""
    import pyarrow as pa

    while any(pa.types.is_struct(field.type) for field in table.schema):
        table = table.flatten()
    columns = {}
    for name, column in zip(table.column_names, table.columns):
        if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            column = pa.array([None if value is None else json.dumps(value, sort_keys=True)
                               for value in column.to_pylist()], pa.string())
        columns[name] = column
    return pa.table(columns)


def export_table(folder: str | Path, path: str | Path, format: str = "parquet",
                 units_of: UnitsOfPlan | None = None) -> Path:
    """Write ``folder``'s store to ``path`` as ``format`` (parquet or csv), atomically
    (``canvaslab.io.atomic_writer``)."""
    import pyarrow.csv
    import pyarrow.parquet

    one_of("--format", format, FORMATS)
    path = check_names(path, "--out")
    table = store_table(folder, units_of)
    try:
        with atomic_writer(path, binary=True) as handle:
            if format == "csv":
                pyarrow.csv.write_csv(flat_table(table), handle)
            else:
                pyarrow.parquet.write_table(table, handle)
    except OSError as error:
        if not disk_full(error):
            raise
        raise RunFailed(f"the disk is full ({error.strerror or error}): {path} could not be written; the study "
                        "folder is unchanged: free some space and export again") from None
    return path
