"""Result files: every writer goes through ``io.atomic_writer``, so every result file gets the same mode
(what ``open`` gives under the umask) and a failed write leaves the old file whole."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from canvaslab.capture.commit_trace import AcceptCall, GenerationTrace, append_trace, export_parquet, write_traces
from canvaslab.io import atomic_writer, write_json_atomic, write_text_atomic
from canvaslab.studies.unused_tokens.vocab_scan import save_token_counts


def _trace() -> GenerationTrace:
    return GenerationTrace(generation_id="g0", regime="math", prompt_id="p0", seed=0, budget=4, content=[True, False],
                           calls=[AcceptCall(step=4, accepted=[0, 1], entropy=[0.1, 0.2])], correct=None)


def _write_every_kind(folder: Path) -> dict[str, Path]:
    """One file of each kind canvaslab writes, through its own writer."""
    return {
        "json": write_json_atomic(folder / "result.json", {"a": 1}),
        "text": write_text_atomic(folder / "plan.sha256", "abc  plan.json\n"),
        "npy": save_token_counts(folder / "token_counts.npy", np.arange(5)),
        "parquet": export_parquet([_trace()], folder / "traces.parquet"),
        "jsonl": write_traces(folder / "traces.jsonl", [_trace()]),
    }


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_every_result_file_gets_the_mode_open_would_give_it(tmp_path, umask):
    previous = os.umask(umask)
    try:
        written = _write_every_kind(tmp_path)
        append_trace(tmp_path / "appended.jsonl", _trace())
        (tmp_path / "plain.txt").write_text("x")
    finally:
        os.umask(previous)
    expected = stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode)
    assert expected == 0o666 & ~umask
    modes = {kind: oct(stat.S_IMODE(path.stat().st_mode)) for kind, path in written.items()}
    modes["append"] = oct(stat.S_IMODE((tmp_path / "appended.jsonl").stat().st_mode))
    assert modes == {kind: oct(expected) for kind in modes}


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = write_text_atomic(tmp_path / "result.txt", "old\n")
    with pytest.raises(RuntimeError), atomic_writer(target) as handle:
        handle.write("half of the new")
        raise RuntimeError("killed mid-write")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.txt"]
