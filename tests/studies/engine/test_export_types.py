"""``canvaslab export``: nested record fields as typed Arrow (lists and structs, not JSON text) in Parquet, and
``--format csv`` with structs split into columns and lists as JSON text."""

from __future__ import annotations

import csv
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from engine_fakes import Squares

import canvaslab
from canvaslab.cli.main import main
from canvaslab.studies.engine import run_study


class Nested(Squares):
    """Records with a list of structs, a list of numbers, an object, an empty object and a field whose lists hold
    numbers in one record and texts in another."""

    name = "nested"

    def run_group(self, state, group, todo):
        for unit in todo:
            index = int(unit.split("/")[1])
            yield unit, {"index": index, "square": index * index, "runs": [{"batch": b, "changed": b > index + 1} for b in (2, 3)],
                         "scores": [0.5, float(index)], "stop": {"pass": index, "eos": None}, "empty": {},
                         "mixed": [1, 2] if index == 0 else ["a"]}


@pytest.fixture()
def study(tmp_path):
    run_study(Nested(n=2), tmp_path / "s")
    return tmp_path / "s"


def test_parquet_holds_lists_and_structs(study, capsys):
    main(["export", str(study)])
    table = pq.read_table(study / "records.parquet")
    schema = table.schema
    assert schema.field("record.runs").type == pa.list_(pa.struct([("batch", pa.int64()), ("changed", pa.bool_())]))
    assert schema.field("record.scores").type == pa.list_(pa.float64())
    assert pa.types.is_struct(schema.field("record.stop").type)
    assert pa.types.is_struct(schema.field("worker").type)
    rows = table.to_pylist()
    assert rows[1]["record.runs"] == [{"batch": 2, "changed": False}, {"batch": 3, "changed": True}]
    assert rows[0]["record.stop"] == {"pass": 0, "eos": None}
    # no one type holds them: JSON text, still one column
    assert schema.field("record.mixed").type == pa.string() and json.loads(rows[1]["record.mixed"]) == ["a"]
    assert schema.field("record.empty").type == pa.string()  # Parquet stores no struct without fields
    assert json.loads(rows[1]["record"])["runs"][0] == {"batch": 2, "changed": False}


def test_the_python_export_writes_the_same_table(study, tmp_path):
    main(["export", str(study)])
    path = canvaslab.export(study, tmp_path / "api.parquet")
    assert pq.read_table(path).equals(pq.read_table(study / "records.parquet"))


def test_csv_splits_structs_and_writes_lists_as_json(study, capsys):
    main(["export", str(study), "--format", "csv"])
    assert "records.csv" in capsys.readouterr().out
    with open(study / "records.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["unit"] for row in rows] == ["u/0", "u/1"]
    assert rows[1]["record.stop.pass"] == "1"
    assert json.loads(rows[1]["record.runs"]) == [{"batch": 2, "changed": False}, {"batch": 3, "changed": True}]
    assert "worker" not in rows[0]  # split into its fields


def test_csv_refuses_a_parquet_name(study, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["export", str(study), "--format", "csv", "--out", str(study / "t.parquet")])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "name a .csv file" in err and len(err.splitlines()) == 1
