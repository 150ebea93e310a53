"""The commit-order trace format: JSON Lines, one generation per line (docs/trace-format.md).

A trace records what ``EntropyBoundSampler.accept_canvas`` did on every call of one generation: the
positions it held accepted after the call and the entropy of the logits each position was given. The
measures (``canvaslab.analysis.order_metrics``) need nothing else, so they work on any file in this
format, whoever wrote it. The format sits in ``capture`` (below ``analysis`` and ``studies``) so that
the tracer (``canvaslab.studies.commit_order.tracer``) and the measures both import it.

Writing is append-only and crash-safe: ``append_trace`` writes one fsynced line per generation, so an
interrupted run loses at most the line it was writing. That cut-short last line is dropped on read with
a ``TruncatedTraceWarning`` (and repaired by the next ``append_trace``), so a rerun resumes instead of
crashing. Anything else malformed raises ``CanvaslabError`` naming the file and the line.
"""

from __future__ import annotations

import copy
import json
import math
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from canvaslab.errors import CanvaslabError
from canvaslab.io import append_line, atomic_writer, write_text_atomic

TRACE_FIELDS: tuple[str, ...] = (
    "generation_id", "regime", "prompt_id", "seed", "budget", "content", "calls", "correct",
)
CALL_FIELDS: tuple[str, ...] = ("step", "accepted", "entropy")

# The contract, as a JSON Schema (draft 2020-12). Keys beyond these are allowed and preserved.
TRACE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "canvaslab commit-order generation trace (one JSON Lines record)",
    "type": "object",
    "required": list(TRACE_FIELDS),
    "properties": {
        "generation_id": {"type": "string", "minLength": 1},
        "regime": {"type": "string", "minLength": 1},
        "prompt_id": {"type": "string", "minLength": 1},
        "seed": {"type": "integer"},
        "budget": {"type": "integer", "minimum": 1},
        "content": {"type": "array", "minItems": 1, "items": {"type": "boolean"}},
        "calls": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/call"}},
        "correct": {"type": ["boolean", "null"]},
    },
    "additionalProperties": True,
    "$defs": {
        "call": {
            "type": "object",
            "required": list(CALL_FIELDS),
            "properties": {
                "step": {"type": "integer"},
                "accepted": {
                    "type": "array", "uniqueItems": True, "items": {"type": "integer", "minimum": 0},
                },
                "entropy": {"type": "array", "items": {"type": "number"}},
            },
            "additionalProperties": True,
        }
    },
}


def _structure_schema() -> dict[str, Any]:
    """TRACE_SCHEMA without the per-element rules of the three per-position arrays.

    jsonschema checks array elements one Python call at a time: ~35 ms per record at real shapes
    (256 positions x 17 calls), 20 s for a 600-generation study. ``_element_problem`` checks those
    elements in plain loops instead (same rules, ~0.3 ms); tests keep the two in agreement.
    """
    schema = copy.deepcopy(TRACE_SCHEMA)
    del schema["properties"]["content"]["items"]
    call = schema["$defs"]["call"]["properties"]
    del call["accepted"]["items"], call["accepted"]["uniqueItems"], call["entropy"]["items"]
    return schema


_STRUCTURE_VALIDATOR = jsonschema.Draft202012Validator(_structure_schema())
_PARQUET_EXTRA = "extra_json"


def parquet_schema():
    """The trace file's Parquet schema (pyarrow, the analysis extra, is imported here: reading and writing
    JSONL traces does without it)."""
    import pyarrow as pa

    return pa.schema([
        ("generation_id", pa.string()),
        ("regime", pa.string()),
        ("prompt_id", pa.string()),
        ("seed", pa.int64()),
        ("budget", pa.int64()),
        ("content", pa.list_(pa.bool_())),
        ("calls", pa.list_(pa.struct([
            ("step", pa.int64()),
            ("accepted", pa.list_(pa.int64())),
            ("entropy", pa.list_(pa.float64())),
            (_PARQUET_EXTRA, pa.string()),
        ]))),
        ("correct", pa.bool_()),
        (_PARQUET_EXTRA, pa.string()),
    ])


class TruncatedTraceWarning(UserWarning):
    """A trace file's last line was cut short (an interrupted run) and was dropped."""


@dataclass
class AcceptCall:
    """One ``accept_canvas`` call: the positions accepted after it and each position's entropy (nats).

    ``accepted`` is the sampler's whole accepted set after the call, not only the new positions: the
    sampler recomputes it from scratch every call, so a position can drop out (an un-accept).
    ``step`` is informational (e.g. the sampler's ``cur_step``); the measures use call order.
    """

    step: int
    accepted: list[int]
    entropy: list[float]
    extra: dict[str, Any] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        record = {
            "step": int(self.step),
            "accepted": [int(p) for p in self.accepted],
            "entropy": [float(e) for e in self.entropy],
        }
        return _with_extra(record, self.extra)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> AcceptCall:
        extra = {k: v for k, v in record.items() if k not in CALL_FIELDS}
        return cls(
            step=int(record["step"]),
            accepted=[int(p) for p in record["accepted"]],
            entropy=[float(e) for e in record["entropy"]],
            extra=extra,
        )


@dataclass
class GenerationTrace:
    """One generation: its identity, content mask (False for EOS/padding), accept calls, correctness.

    ``extra`` holds any further keys of the record (e.g. ``prompt``, ``text``, ``tokens``, ``split``);
    they are written back unchanged.
    """

    generation_id: str
    regime: str
    prompt_id: str
    seed: int
    budget: int
    content: list[bool]
    calls: list[AcceptCall]
    correct: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        """The JSON Lines record, core keys first in the documented order, then ``extra``."""
        record = {
            "generation_id": str(self.generation_id),
            "regime": str(self.regime),
            "prompt_id": str(self.prompt_id),
            "seed": int(self.seed),
            "budget": int(self.budget),
            "content": [bool(c) for c in self.content],
            "calls": [call.to_record() for call in self.calls],
            "correct": None if self.correct is None else bool(self.correct),
        }
        return _with_extra(record, self.extra)

    @classmethod
    def from_record(cls, record: dict[str, Any], where: str = "trace") -> GenerationTrace:
        """Validate ``record`` and build the trace; ``where`` prefixes the error (file and line)."""
        problem = record_problem(record)
        if problem is not None:
            raise CanvaslabError(f"{where}: {problem}")
        return cls(
            generation_id=record["generation_id"],
            regime=record["regime"],
            prompt_id=record["prompt_id"],
            seed=int(record["seed"]),
            budget=int(record["budget"]),
            content=list(record["content"]),
            calls=[AcceptCall.from_record(call) for call in record["calls"]],
            correct=record["correct"],
            extra={k: v for k, v in record.items() if k not in TRACE_FIELDS},
        )


def _with_extra(record: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    clashes = sorted(set(extra) & set(record))
    if clashes:
        raise CanvaslabError(f"extra keys {clashes} clash with trace fields; rename them")
    return {**record, **extra}


# ---------------------------------------------------------------- validation


def record_problem(record: Any) -> str | None:
    """The first thing wrong with a parsed record, as one line, or None when it is a valid trace."""
    error = jsonschema.exceptions.best_match(_STRUCTURE_VALIDATOR.iter_errors(record))
    if error is not None:
        return _schema_message(error)
    return _element_problem(record)


def _schema_message(error: jsonschema.ValidationError) -> str:
    location = error.json_path.removeprefix("$").removeprefix(".")
    message = error.message if len(error.message) <= 160 else error.message[:157] + "..."
    return f"{location}: {message}" if location else message


def _element_problem(record: dict[str, Any]) -> str | None:
    """Element rules the structural schema leaves out, plus what no JSON Schema can say (lengths)."""
    content = record["content"]
    width = len(content)
    for index, flag in enumerate(content):
        if not isinstance(flag, bool):
            return f"content[{index}]: {flag!r} is not a boolean"
    for number, call in enumerate(record["calls"]):
        where = f"calls[{number}]"
        entropy = call["entropy"]
        if len(entropy) != width:
            return f"{where}.entropy has {len(entropy)} values but content has {width} positions"
        for index, value in enumerate(entropy):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                return f"{where}.entropy[{index}]: {value!r} is not a finite number"
        accepted = call["accepted"]
        for index, position in enumerate(accepted):
            if not _is_integer(position) or not 0 <= position < width:
                return f"{where}.accepted[{index}]: {position!r} is not a position in 0..{width - 1}"
        if len(set(accepted)) != len(accepted):
            return f"{where}.accepted lists a position twice"
    return None


def _is_integer(value: Any) -> bool:
    """JSON Schema's "integer": an int or an integral float (1.0), never a bool."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


# ---------------------------------------------------------------- reading


def read_traces(path: str | Path) -> Iterator[GenerationTrace]:
    """Stream the traces of a ``.jsonl`` file (or a ``.parquet`` written by ``export_parquet``).

    Raises ``CanvaslabError`` (file and line) for a missing or empty file, bad JSON, a schema violation,
    an entropy list of the wrong length, a position off the canvas, or a repeated ``generation_id``.
    A last line without its newline that does not parse is an interrupted append: dropped, with a
    ``TruncatedTraceWarning``. The checks run as the iterator is consumed.
    """
    path = Path(path)
    if not path.is_file():
        raise CanvaslabError(f"{path}: no such trace file")
    traces = _read_parquet(path) if path.suffix == ".parquet" else _read_jsonl(path)
    return _unique_and_nonempty(traces, path)


def _unique_and_nonempty(
    traces: Iterator[tuple[str, GenerationTrace]], path: Path
) -> Iterator[GenerationTrace]:
    first_seen: dict[str, str] = {}
    for where, trace in traces:
        if trace.generation_id in first_seen:
            raise CanvaslabError(
                f"{where}: generation_id {trace.generation_id!r} already appears on "
                f"{first_seen[trace.generation_id]}"
            )
        first_seen[trace.generation_id] = where.removeprefix(f"{path} ")
        yield trace
    if not first_seen:
        raise CanvaslabError(f"{path}: no traces in the file (it is empty)")


def _read_jsonl(path: Path) -> Iterator[tuple[str, GenerationTrace]]:
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            where = f"{path} line {number}"
            try:
                record = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
            except ValueError as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
                if not raw.endswith(b"\n"):
                    warnings.warn(
                        f"{where}: dropped an incomplete last line (interrupted write); rerun to redo it",
                        TruncatedTraceWarning,
                        stacklevel=3,
                    )
                    return
                raise CanvaslabError(f"{where}: not valid JSON ({_json_reason(error)})") from None
            yield where, GenerationTrace.from_record(record, where)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _json_reason(error: ValueError) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"{error.msg} at column {error.colno}"
    if isinstance(error, UnicodeDecodeError):
        return "not UTF-8 text"
    return str(error)


def _read_parquet(path: Path) -> Iterator[tuple[str, GenerationTrace]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        row = 0
        for batch in parquet.iter_batches(batch_size=256):
            for values in batch.to_pylist():
                row += 1
                where = f"{path} row {row}"
                yield where, GenerationTrace.from_record(_record_from_parquet(values, where), where)
    except (pa.ArrowException, OSError) as error:
        raise CanvaslabError(f"{path}: not a readable Parquet trace file ({error})") from None


def _record_from_parquet(values: dict[str, Any], where: str) -> dict[str, Any]:
    """Undo ``_parquet_row``; columns other than the core ones become extra keys."""
    record = {k: v for k, v in values.items() if k != _PARQUET_EXTRA}
    record.update(_load_extra(values.get(_PARQUET_EXTRA), where))
    if isinstance(record.get("calls"), list):
        record["calls"] = [_call_from_parquet(call, where) for call in record["calls"]]
    return record


def _call_from_parquet(values: Any, where: str) -> Any:
    if not isinstance(values, dict):
        return values
    call = {k: v for k, v in values.items() if k != _PARQUET_EXTRA}
    call.update(_load_extra(values.get(_PARQUET_EXTRA), where))
    return call


def _load_extra(text: str | None, where: str) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        extra = json.loads(text)
    except ValueError as error:
        raise CanvaslabError(f"{where}: {_PARQUET_EXTRA} is not valid JSON ({error})") from None
    if not isinstance(extra, dict):
        raise CanvaslabError(f"{where}: {_PARQUET_EXTRA} is not a JSON object")
    return extra


# ---------------------------------------------------------------- writing


def append_trace(path: str | Path, trace: GenerationTrace) -> None:
    """Append one trace as one line, flushed and fsynced: what the tracer calls after each generation.

    If the file ends in a line cut short by an interrupted run, that line is removed first (with a
    ``TruncatedTraceWarning``) so the new record starts on a line of its own. One writer at a time.
    """
    if append_line(path, _json_line(trace, where=f"cannot append to {path}")):
        warnings.warn(f"{path}: removed an incomplete last line (interrupted write) before appending",
                      TruncatedTraceWarning, stacklevel=2)


def write_traces(path: str | Path, traces: Iterable[GenerationTrace]) -> Path:
    """Write all ``traces`` as a new JSON Lines file, atomically (no half-written file on a crash)."""
    path = Path(path)
    text = "".join(_json_line(trace, where=f"cannot write {path}") for trace in traces)
    return write_text_atomic(path, text)


def export_parquet(traces: Iterable[GenerationTrace], path: str | Path) -> Path:
    """Write ``traces`` as Parquet (nested list columns), atomically; ``read_traces`` reads it back.

    Core fields are typed columns (``calls`` is a list of structs); extra keys, whatever their types,
    go to an ``extra_json`` column (and per call an ``extra_json`` field) so the round trip is exact.
    """
    path = Path(path)
    rows = [_parquet_row(trace, where=f"cannot export {path}") for trace in traces]
    if not rows:
        raise CanvaslabError(f"cannot export {path}: no traces")
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows, schema=parquet_schema())
    with atomic_writer(path, binary=True) as handle:
        pq.write_table(table, handle)
    return path


def _valid_record(trace: GenerationTrace, where: str) -> dict[str, Any]:
    record = trace.to_record()
    problem = record_problem(record)
    if problem is not None:
        raise CanvaslabError(f"{where}: generation {trace.generation_id!r}: {problem}")
    return record


def _json_line(trace: GenerationTrace, where: str) -> str:
    record = _valid_record(trace, where)
    try:
        text = json.dumps(record, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise CanvaslabError(f"{where}: generation {trace.generation_id!r}: {error}") from None
    return text + "\n"


def _parquet_row(trace: GenerationTrace, where: str) -> dict[str, Any]:
    record = _valid_record(trace, where)
    row = {key: record[key] for key in TRACE_FIELDS}
    row["calls"] = [
        {**{k: call[k] for k in CALL_FIELDS}, _PARQUET_EXTRA: _dump_extra(call, CALL_FIELDS)}
        for call in record["calls"]
    ]
    row[_PARQUET_EXTRA] = _dump_extra(record, TRACE_FIELDS)
    return row


def _dump_extra(record: dict[str, Any], core: tuple[str, ...]) -> str | None:
    extra = {k: v for k, v in record.items() if k not in core}
    return json.dumps(extra, ensure_ascii=False, allow_nan=False) if extra else None
