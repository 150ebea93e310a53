"""The trace format: round trips (JSON Lines, Parquet), crash-safe appends, and one-line errors."""

from __future__ import annotations

import json
import warnings

import jsonschema
import pytest

from canvaslab.capture.commit_trace import (
    TRACE_SCHEMA,
    AcceptCall,
    GenerationTrace,
    TruncatedTraceWarning,
    append_trace,
    export_parquet,
    read_traces,
    record_problem,
    write_traces,
)
from canvaslab.errors import CanvaslabError


def make_trace(index: int = 0, width: int = 6, **changes) -> GenerationTrace:
    """A small valid trace; position 5 is EOS (not content) and is accepted first."""
    fields = dict(
        generation_id=f"g{index}",
        regime="math",
        prompt_id=f"p{index // 2}",
        seed=index,
        budget=48,
        content=[True] * (width - 1) + [False],
        calls=[
            AcceptCall(48, accepted=[width - 1, 0], entropy=[0.01 * p + 0.001 * index for p in range(width)]),
            AcceptCall(step=47, accepted=list(range(width)), entropy=[0.5] * width, extra={"note": "full"}),
        ],
        correct=[True, False, None][index % 3],
        extra={"text": f"answer {index}", "tokens": list(range(width)), "split": "confirmatory"},
    )
    fields.update(changes)
    return GenerationTrace(**fields)


def record_line(**changes) -> str:
    record = make_trace().to_record()
    record.update(changes)
    return json.dumps(record)


def test_record_has_the_documented_keys_in_order_and_keeps_extras():
    record = make_trace().to_record()
    assert list(record)[:8] == [
        "generation_id", "regime", "prompt_id", "seed", "budget", "content", "calls", "correct",
    ]
    assert record["text"] == "answer 0" and record["calls"][1]["note"] == "full"
    jsonschema.validate(record, TRACE_SCHEMA)  # the full schema constant accepts what we write


def test_jsonl_round_trip_preserves_everything(tmp_path):
    traces = [make_trace(i) for i in range(5)]
    path = write_traces(tmp_path / "traces.jsonl", traces)
    assert list(read_traces(path)) == traces
    assert len(path.read_text().splitlines()) == 5


def test_parquet_round_trip_equals_the_jsonl(tmp_path):
    traces = [make_trace(i) for i in range(5)]
    jsonl = write_traces(tmp_path / "traces.jsonl", traces)
    parquet = export_parquet(read_traces(jsonl), tmp_path / "traces.parquet")
    assert list(read_traces(parquet)) == list(read_traces(jsonl))


def test_unreadable_parquet_is_a_canvaslab_error(tmp_path):
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(CanvaslabError, match="broken.parquet"):
        list(read_traces(path))


def test_append_writes_one_line_per_trace(tmp_path):
    path = tmp_path / "run" / "traces.jsonl"
    for index in range(3):
        append_trace(path, make_trace(index))
    assert list(read_traces(path)) == [make_trace(i) for i in range(3)]


def test_truncated_last_line_is_dropped_with_a_warning_and_repaired_by_append(tmp_path):
    path = tmp_path / "traces.jsonl"
    write_traces(path, [make_trace(0), make_trace(1)])
    with path.open("a") as handle:  # an interrupted append: half a record, no newline
        handle.write(json.dumps(make_trace(2).to_record())[:40])
    with pytest.warns(TruncatedTraceWarning, match="line 3"):
        assert [t.generation_id for t in read_traces(path)] == ["g0", "g1"]
    with pytest.warns(TruncatedTraceWarning):
        append_trace(path, make_trace(2))  # the resumed run redoes generation 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(read_traces(path)) == [make_trace(i) for i in range(3)]


def test_complete_last_line_without_newline_is_kept(tmp_path):
    path = tmp_path / "traces.jsonl"
    path.write_text(record_line())
    assert [t.generation_id for t in read_traces(path)] == ["g0"]
    append_trace(path, make_trace(1))
    assert [t.generation_id for t in read_traces(path)] == ["g0", "g1"]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("{not json", "not valid JSON"),
        (record_line(seed="zero"), "seed"),
        (json.dumps({**make_trace().to_record(), "budget": None}), "budget: None is not of type 'integer'"),
        ("{" + record_line()[len('{"generation_id": "g0", '):], "'generation_id' is a required"),
        (record_line(content=[True, 1, True, True, True, False]), r"content\[1\]"),
        (record_line(calls=[{"step": 1, "accepted": [0], "entropy": [0.1] * 5}]), "entropy has 5 values"),
        (record_line(calls=[{"step": 1, "accepted": [6], "entropy": [0.1] * 6}]), r"accepted\[0\]: 6 is"),
        (record_line(calls=[{"step": 1, "accepted": [1, 1], "entropy": [0.1] * 6}]), "twice"),
        (record_line(calls=[]), "calls"),
        (record_line(correct="yes"), "correct"),
        (record_line().replace("0.5", "NaN", 1), "NaN"),
        ("[1, 2]", "not of type 'object'"),
    ],
)
def test_malformed_line_is_an_error_naming_file_and_line(tmp_path, line, expected):
    path = tmp_path / "traces.jsonl"
    path.write_text(record_line() + "\n" + line + "\n")
    with pytest.raises(CanvaslabError, match=expected) as caught:
        list(read_traces(path))
    message = str(caught.value)
    assert "\n" not in message and f"{path} line 2" in message


@pytest.mark.parametrize(
    "changes",
    [
        {"content": [True, 1, True, True, True, False]},
        {"calls": [{"step": 1, "accepted": [1, 1], "entropy": [0.1] * 6}]},
        {"calls": [{"step": 1, "accepted": [-1], "entropy": [0.1] * 6}]},
        {"calls": [{"step": 1, "accepted": [0], "entropy": [0.1, "x", 0.1, 0.1, 0.1, 0.1]}]},
    ],
)
def test_element_checks_agree_with_the_full_schema(changes):
    """The fast element checks reject exactly what TRACE_SCHEMA's element rules reject."""
    record = {**make_trace().to_record(), **changes}
    assert record_problem(record) is not None
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(record, TRACE_SCHEMA)


def test_repeated_generation_id_is_an_error(tmp_path):
    path = tmp_path / "traces.jsonl"
    path.write_text(record_line() + "\n" + record_line() + "\n")
    with pytest.raises(CanvaslabError, match="line 2: generation_id 'g0' already appears on line 1"):
        list(read_traces(path))


def test_empty_or_missing_file_is_an_error(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(CanvaslabError, match="empty"):
        list(read_traces(empty))
    with pytest.raises(CanvaslabError, match="no such trace file"):
        read_traces(tmp_path / "missing.jsonl")


def test_writing_an_invalid_trace_is_refused_before_touching_the_file(tmp_path):
    path = tmp_path / "traces.jsonl"
    append_trace(path, make_trace(0))
    before = path.read_bytes()
    bad = make_trace(1, calls=[AcceptCall(step=1, accepted=[99], entropy=[0.0] * 6)])
    with pytest.raises(CanvaslabError, match="accepted"):
        append_trace(path, bad)
    with pytest.raises(CanvaslabError, match="clash"):
        append_trace(path, make_trace(2, extra={"regime": "other"}))
    assert path.read_bytes() == before
