"""``canvaslab export`` on a folder ``canvaslab order-metrics`` wrote: no store, so nothing to export; the one-line
refusal says what the folder is and where its data are (the traces, as ``traces.parquet``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from canvaslab.capture.commit_trace import AcceptCall, GenerationTrace, write_traces
from canvaslab.cli.main import main

WIDTH, CALLS = 8, 3


def _traces(path: Path) -> Path:
    traces = []
    for index in range(4):
        calls = [AcceptCall(step=CALLS - call, accepted=list(range((call + 1) * WIDTH // CALLS)),
                            entropy=[0.5] * WIDTH) for call in range(CALLS)]
        traces.append(GenerationTrace(f"p{index}#0", "math", f"p{index}", 0, CALLS, [True] * WIDTH, calls,
                                      correct=index % 2 == 0))
    write_traces(path, traces)
    return path


def _error(capsys, args: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in error, error
    lines = error.strip().splitlines()
    assert len(lines) == 1, error
    return lines[0]


def test_export_of_an_order_metrics_folder_points_to_its_traces(tmp_path, capsys):
    traces = _traces(tmp_path / "traces.jsonl")
    folder = tmp_path / "om"
    main(["order-metrics", str(traces), "--out", str(folder), "--bootstrap", "0"])
    capsys.readouterr()
    line = _error(capsys, ["export", str(folder)])
    assert "order-metrics" in line and "no study store" in line
    assert f"canvaslab order-metrics {traces} --out {folder} --parquet" in line, line
    assert not (folder / "records.parquet").exists()

    main(["order-metrics", str(traces), "--out", str(folder), "--bootstrap", "0", "--parquet"])
    capsys.readouterr()
    line = _error(capsys, ["export", str(folder)])
    assert str(folder / "traces.parquet") in line and "--parquet" not in line, line
