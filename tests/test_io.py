"""Result files: every writer goes through ``io.atomic_writer``, so every result file gets the same mode
(what ``open`` gives under the umask) and a failed write leaves the old file whole."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from canvaslab import io
from canvaslab.capture.commit_trace import AcceptCall, GenerationTrace, append_trace, export_parquet, write_traces
from canvaslab.errors import CanvaslabError
from canvaslab.io import (MiB, NotRegularFile, UnreadableFile, append_line, atomic_writer, check_names, check_real_folders,
                          nesting_depth, parse_json, read_json, write_json_atomic, write_text_atomic)
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


# ---- reading a file from elsewhere: bounded, never through a link, never blocking ----------------------

def _one_line(error: BaseException) -> str:
    text = str(error)
    assert isinstance(error, CanvaslabError) and "\n" not in text, text
    return text


@pytest.mark.parametrize("kind", ["link to /dev/zero", "fifo", "folder", "link to a file"])
def test_read_json_refuses_what_is_not_a_regular_file_without_reading_or_waiting(tmp_path, kind):
    path = tmp_path / "record.json"
    if kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        (tmp_path / "elsewhere.json").write_text("{}")
        path.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(NotRegularFile) as refused:
        read_json(path)
    said = {"link to /dev/zero": "a symbolic link", "fifo": "a FIFO", "folder": "a folder",
            "link to a file": "a symbolic link"}[kind]
    assert said in _one_line(refused.value) and refused.value.kind == said


def test_a_device_is_refused_even_where_links_are_followed():
    with pytest.raises(NotRegularFile, match="a character device"):
        read_json("/dev/zero", follow_links=True)


def test_read_json_refuses_a_file_over_its_limit_before_parsing_it(tmp_path):
    path = tmp_path / "big.json"
    path.write_text("[" + "0," * 2000 + "0]")
    with pytest.raises(UnreadableFile) as refused:
        read_json(path, max_bytes=1000)
    assert "1,000 bytes" in _one_line(refused.value)
    assert read_json(path, max_bytes=10_000)[:2] == [0, 0]


def test_a_json_file_over_the_parse_limit_is_refused_by_its_size_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "huge.json"
    with open(path, "wb") as handle:
        handle.truncate(io.JSON_LIMIT + MiB)  # sparse: takes no disk
    monkeypatch.setattr(io.json, "loads", lambda *args, **kwargs: pytest.fail("parsed"))
    with pytest.raises(UnreadableFile) as refused:
        read_json(path, max_bytes=2 * io.JSON_LIMIT)  # a caller's larger limit does not lift the parse limit
    assert f"{io.JSON_LIMIT // MiB + 1} MiB, more than the {io.JSON_LIMIT // MiB} MiB" in _one_line(refused.value)


def test_parse_json_refuses_text_over_the_parse_limit(monkeypatch):
    monkeypatch.setattr(io, "JSON_LIMIT", 1000, raising=False)
    with pytest.raises(UnreadableFile) as refused:
        parse_json(b"[" + b"0," * 1000 + b"0]", source="record.json")
    assert "record.json is 2,003 bytes of JSON, more than the 1,000 bytes canvaslab parses" in _one_line(refused.value)


def test_running_out_of_memory_while_parsing_is_one_line(monkeypatch):
    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(io.json, "loads", exhausted)
    with pytest.raises(UnreadableFile) as refused:
        parse_json("[0]", source="noise_study.json")
    assert "noise_study.json: not enough memory to parse its 3 bytes of JSON" in _one_line(refused.value)


_PARSE_UNDER_A_MEMORY_LIMIT = r"""
import re, resource, sys
from canvaslab.io import UnreadableFile, read_json
size = int(re.search(r"VmSize:\s+(\d+) kB", open("/proc/self/status").read()).group(1)) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + 256 * 2**20, resource.RLIM_INFINITY))
try:
    read_json(sys.argv[1])
except UnreadableFile as error:
    sys.exit(f"error: {error}")
"""


def test_a_file_that_exhausts_a_memory_limit_is_one_line_not_a_traceback(tmp_path):
    path = tmp_path / "lists.json"
    path.write_text("[" + ",".join(["[]"] * (8 * MiB)) + "]")  # 24 MiB of text, about 600 MB of lists
    done = subprocess.run([sys.executable, "-c", _PARSE_UNDER_A_MEMORY_LIMIT, str(path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (f"error: {path}: not enough memory to parse its 24 MiB of JSON: free memory or raise the "
                           "process's memory limit\n")


def test_a_deeply_nested_file_is_one_line_not_a_recursion_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UnreadableFile) as refused:
        read_json(path)
    assert "more than 100 deep" in _one_line(refused.value)
    fifty = "[" * 50 + "]" * 50  # nesting within the limit parses
    assert json.dumps(read_json(write_text_atomic(tmp_path / "ok.json", fifty)), separators=(",", ":")) == fifty


def test_nesting_is_measured_outside_strings():
    assert nesting_depth('{"a": [[1, "[[[[\\\\"], {"b": "\\"{{"}]}') == 3
    # an unterminated string full of escaped quotes: nothing in it counts (a scan that restarts at every quote
    # would not finish on it)
    assert nesting_depth('"' + 'a\\"[' * 3_000_000) == 0


def test_invalid_json_is_one_line_naming_the_file(tmp_path):
    path = write_text_atomic(tmp_path / "torn.json", '{"a": [1, 2')
    with pytest.raises(UnreadableFile, match="torn.json is not valid JSON"):
        read_json(path)
    path.write_bytes(b'"\xff"')
    with pytest.raises(UnreadableFile, match="not UTF-8"):
        read_json(path)


# ---- writing: never through a link -------------------------------------------------------------------

def test_a_link_at_the_target_is_replaced_never_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("victim's own\n")
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "result.json").symlink_to(victim)
    write_text_atomic(tmp_path / "study" / "result.json", "new\n", below=tmp_path / "study")
    assert victim.read_text() == "victim's own\n"
    assert not (tmp_path / "study" / "result.json").is_symlink()
    assert (tmp_path / "study" / "result.json").read_text() == "new\n"


def test_a_linked_folder_below_the_study_folder_is_refused_and_nothing_is_written(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "study" / "store").mkdir(parents=True)
    (tmp_path / "study" / "store" / "records").symlink_to(outside)
    with pytest.raises(CanvaslabError) as refused:
        write_text_atomic(tmp_path / "study" / "store" / "records" / "a.json", "{}", below=tmp_path / "study")
    assert "is a symbolic link, not a folder" in _one_line(refused.value)
    assert list(outside.iterdir()) == []
    with pytest.raises(CanvaslabError):
        check_real_folders(tmp_path / "study" / "store" / "records", below=tmp_path / "study")
    check_real_folders(tmp_path / "study" / "store" / "missing" / "deeper", below=tmp_path / "study")  # missing: fine


def test_missing_folders_below_are_created_as_real_folders(tmp_path):
    write_text_atomic(tmp_path / "study" / "a" / "b" / "c.txt", "x", below=tmp_path / "study")
    assert (tmp_path / "study" / "a" / "b" / "c.txt").read_text() == "x"


def test_a_folder_at_the_target_and_an_over_long_name_are_one_line(tmp_path):
    (tmp_path / "report.html").mkdir()
    with pytest.raises(CanvaslabError) as refused:
        write_text_atomic(tmp_path / "report.html", "x")
    assert "is a folder" in _one_line(refused.value)
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temporary left
    for name in ("a" * 256, "é" * 128):
        with pytest.raises(CanvaslabError) as refused:
            write_text_atomic(tmp_path / name / "x.json", "x")
        assert "at most 255 bytes" in _one_line(refused.value)
    assert check_names(tmp_path / ("a" * 255)) == tmp_path / ("a" * 255)


def test_a_result_log_that_is_a_link_is_refused(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("")
    (tmp_path / "traces.jsonl").symlink_to(victim)
    with pytest.raises(NotRegularFile):
        append_line(tmp_path / "traces.jsonl", "{}\n")
    assert victim.read_text() == ""


def test_every_json_reader_has_the_one_parse_limit_and_the_docs_give_it():
    from pathlib import Path

    from canvaslab.reports.readers import RESULT_LIMIT
    from canvaslab.studies.engine import plan, store

    assert RESULT_LIMIT == plan.PLAN_LIMIT == store.RECORD_LIMIT == io.JSON_LIMIT  # none larger, silently cut
    errors = (Path(__file__).parents[1] / "docs" / "errors.md").read_text()
    assert f"when it is over {io.JSON_LIMIT // MiB} MiB" in errors
