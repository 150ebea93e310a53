"""A study stopped before any unit finished is read as what it is (0 of N done), not as a damaged folder: its
result file records no environment (``null``), since no worker has run."""

from __future__ import annotations

import json

import pytest

from canvaslab.cli.main import main
from canvaslab.io import write_json_atomic
from canvaslab.reports.readers import batch_study, noise_study, op_scan, order_metrics


def _nothing_done(folder, writers, name: str) -> None:
    """``folder`` as its study's views write it when no unit has finished: the environment is null."""
    getattr(writers, name)(folder)
    file = {"noise_study": "noise_study.json", "op_scan": "op_scan.json", "batch_study": "batch_study.json",
            "order_study": "order_metrics.json"}[name]
    data = json.loads((folder / file).read_text())
    data["environment"] = None
    if name == "noise_study":
        data.update(conditions_run=0, effects=[], class_means={},
                    safeguard={"compared": 0, "fired": 0, "by_field": {}, "outcome_fields_changed": 0,
                               "fired_conditions": [], "batch_rows": []})
    write_json_atomic(folder / file, data)


@pytest.mark.parametrize("name, reader", [("noise_study", noise_study), ("op_scan", op_scan),
                                          ("batch_study", batch_study), ("order_study", order_metrics)])
def test_a_null_environment_reads_as_none_recorded(tmp_path, writers, name, reader):
    _nothing_done(tmp_path, writers, name)
    assert reader.read(tmp_path).environment == {}


def test_the_report_of_a_noise_study_with_nothing_done_says_0_of_n(tmp_path, writers, capsys):
    folder = tmp_path / "stopped"
    folder.mkdir()
    _nothing_done(folder, writers, "noise_study")
    main(["report", str(folder), "--out", str(tmp_path / "report.html")])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "damaged" not in captured.err
    assert "0 / 80" in (tmp_path / "report.html").read_text()
