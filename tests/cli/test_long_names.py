"""Long names: a unit id never becomes a file name (prompt ids of 251 ASCII characters or 43 "é" run, resume,
export and report), and a path component over 255 bytes given to an option is one line, exit 2."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from canvaslab.cli.main import main
from canvaslab.studies.engine.plan import register

LONG_IDS = ["p" * 251, "é" * 43]
STUDY = ["batch-study", "--model", "tiny", "--batch-sizes", "1,2", "--steps", "1", "--repeat-control", "same-process"]


@pytest.fixture(scope="module")
def long_id_study(tmp_path_factory):
    root = tmp_path_factory.mktemp("long")
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": pid, "prompt": "the man said that the water was cold"}) + "\n"
                               for pid in LONG_IDS), encoding="utf-8")
    main([*STUDY, "--prompts", str(prompts), "--out", str(root / "study")])
    return root


def test_long_prompt_ids_run_and_their_records_are_named_by_hash(long_id_study):
    records = sorted((long_id_study / "study" / "store" / "records").glob("*.json"))
    assert len(records) == 2 and all(len(path.name) == 69 for path in records)
    assert sorted(json.loads(path.read_text(encoding="utf-8"))["unit"] for path in records) == sorted(LONG_IDS)
    result = json.loads((long_id_study / "study" / "batch_study.json").read_text(encoding="utf-8"))
    assert sorted({run["prompt_id"] for run in result["runs"]}) == sorted(LONG_IDS) and result["complete"]


def test_a_rerun_resumes_and_export_and_report_read_long_ids(long_id_study, capsys):
    capsys.readouterr()
    main([*STUDY, "--prompts", str(long_id_study / "prompts.jsonl"), "--out", str(long_id_study / "study")])
    assert "0 ran, 2 skipped as already done" in capsys.readouterr().out
    main(["export", str(long_id_study / "study")])
    table = pq.read_table(long_id_study / "study" / "records.parquet").to_pylist()
    assert sorted(row["unit"] for row in table) == sorted(LONG_IDS)
    main(["report", str(long_id_study / "study")])
    assert (long_id_study / "study" / "report.html").is_file()


def _one_line(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    error = capsys.readouterr().err
    assert exit_info.value.code == 2, error
    assert "Traceback" not in error and len(error.strip().splitlines()) == 1, error
    return error


@pytest.mark.parametrize("name", ["a" * 256, "é" * 128])
def test_a_path_component_over_255_bytes_is_one_line_for_every_option(tmp_path, capsys, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    register(tmp_path / "study", "squares", {"n": 1})  # a study store, for export
    (tmp_path / "study" / "op_scan.json").write_text(json.dumps({"scans": []}))  # a study output, for report
    cases = [
        [*STUDY, "--prompts", f"{name}.txt", "--out", "new"],
        [*STUDY, "--prompts", "1", "--out", f"{name}/x"],
        ["report", "study", "--out", f"{name}/report.html"],
        ["report", "study", "--out", f"{name}.html"],
        ["export", "study", "--out", f"{name}.parquet"],
        ["mini", "train", "--out", name],
        ["mini", "passages", "--corpus", "c", "--out", f"{name}.txt"],
        ["vocab-scan", "--tokenizer", "tiny", "--corpus", f"{name}.txt"],
        ["vocab-scan", "--tokenizer", name],
        ["generate", "--model", name, "--prompt", "hi"],
        ["generate", "--model", f"{name}/config.json", "--prompt", "hi"],
        ["serve", "--model", name],
        ["export", name],
        ["export", f"study/{name}"],
    ]
    for argv in cases:
        assert "255" in _one_line(capsys, argv), argv
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study"]  # nothing created


def test_mini_train_out_that_is_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    assert "is a file; give a folder" in _one_line(capsys, ["mini", "train", "--out", str(tmp_path / "afile")])
