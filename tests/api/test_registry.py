"""Every entry of ``canvaslab.STUDIES``, end to end on ``tiny``: plan -> run(out) -> open_results -> tables ->
report -> export, and its command's ``--help``.

A new study gets here by being registered: add its tiny settings to ``TINY`` below (the test names the entry
that has none). Every study runs once per module; the tests read what those runs wrote."""

from __future__ import annotations

import io
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from rich.console import Console
from typer.testing import CliRunner

import canvaslab
from canvaslab import STUDIES, open_results
from canvaslab.cli.main import app
from canvaslab.studies.engine.plan import registered_plan

# Study name -> plan keyword arguments that run it in seconds on the tiny preset (model="tiny" is added).
TINY: dict[str, dict] = {
    "batch_size": dict(prompts=1, batch_sizes=(1, 2), steps=2, repeat_control="same-process"),
    "op_scan": dict(batch_sizes=(1, 2)),
    "commit_order": dict(regimes="math", seeds=1, prompts_per_regime=2, steps=2, max_new_tokens=16, bootstrap=0),
    "unused_tokens": dict(design="small"),
}

NAMES = list(STUDIES)


def tiny_settings(name: str) -> dict:
    if name not in TINY:
        pytest.fail(f"study {name!r} is registered in canvaslab.STUDIES but has no tiny settings: add "
                    f"TINY[{name!r}] = dict(...) (plan keyword arguments that run it in seconds on model='tiny') "
                    "to tests/api/test_registry.py", pytrace=False)
    return TINY[name]


def test_every_registered_study_has_tiny_settings():
    missing = [name for name in STUDIES if name not in TINY]
    assert not missing, (f"no tiny settings for {', '.join(missing)}: add an entry per study to TINY in "
                         "tests/api/test_registry.py (plan keyword arguments that run it in seconds on 'tiny')")
    stale = [name for name in TINY if name not in STUDIES]
    assert not stale, f"TINY names studies that are no longer registered: {stale}"


def test_the_registry_is_the_public_one_and_consistent():
    assert "STUDIES" in canvaslab.__all__ and canvaslab.STUDIES is canvaslab.api.STUDIES
    for name, entry in STUDIES.items():
        assert entry.name == name
        assert entry.reader.STUDY == name and entry.reader.FILE == entry.result_file
        assert entry.section.reader is entry.reader
        assert getattr(canvaslab, entry.plan.__name__) is entry.plan  # every plan is public
    assert len({entry.command for entry in STUDIES.values()}) == len(STUDIES)
    assert len({entry.result_file for entry in STUDIES.values()}) == len(STUDIES)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each study with tiny settings, run once into its own folder: name -> (folder, Results of the run)."""
    base = tmp_path_factory.mktemp("studies")
    done = {}
    for name, entry in STUDIES.items():
        if name in TINY:
            out = base / name
            done[name] = (out, entry.plan(model="tiny", **TINY[name]).run(out=out))
    return done


@pytest.fixture(scope="module")
def written(runs, tmp_path_factory):
    """One report of every study folder."""
    return canvaslab.report([folder for folder, _ in runs.values()], tmp_path_factory.mktemp("report") / "r.html")


def run_of(runs, name):
    tiny_settings(name)
    return runs[name]


@pytest.mark.parametrize("name", NAMES)
def test_run_writes_its_study(runs, name):
    entry = STUDIES[name]
    out, results = run_of(runs, name)
    assert results.study == entry.name
    assert results.folder == out.resolve()
    assert (out / entry.result_file).is_file()
    assert results.outcome is not None and results.outcome.failed == {} and results.outcome.ran > 0
    assert results.outcome.skipped == 0


@pytest.mark.parametrize("name", NAMES)
def test_open_results_reads_back_the_run(runs, name):
    entry = STUDIES[name]
    out, results = run_of(runs, name)
    opened = open_results(out)
    assert opened.study == entry.name and opened.folder == out.resolve() and opened.outcome is None
    assert opened.summary == results.summary
    assert isinstance(opened.plan, dict) and opened.plan == results.plan
    assert open_results(str(out)).summary == results.summary  # a str is a folder too
    tables = opened.tables()
    assert tables and len(opened.tables(wide=True)) >= 1
    console = Console(file=io.StringIO(), width=120)
    for table in tables:
        console.print(table)
    assert console.file.getvalue().strip()


@pytest.mark.parametrize("name", NAMES)
def test_records_table_has_a_row_per_finished_unit(runs, name):
    out, results = run_of(runs, name)
    frame = open_results(out).to_pandas()
    assert len(frame) == results.outcome.ran + results.outcome.skipped
    assert frame["unit"].is_unique
    assert set(frame["study"]) == {name}
    assert not frame["failed"].any()
    assert frame["plan_sha256"].nunique() == 1
    assert open_results(out).to_arrow().num_rows == len(frame)


@pytest.mark.parametrize("name", NAMES)
def test_report_has_the_study(written, runs, name):
    run_of(runs, name)
    assert written.studies.get(name) == 1
    assert written.html.is_file() and written.size_bytes > 0


@pytest.mark.parametrize("name", NAMES)
def test_export_reads_back_with_a_row_per_unit(runs, name, tmp_path):
    out, results = run_of(runs, name)
    path = canvaslab.export(out, tmp_path / f"{name}.parquet")
    assert canvaslab.export(out, path) == path  # a second export replaces the first
    table = pq.read_table(path)
    assert table.num_rows == results.outcome.ran == len(open_results(out).to_pandas())
    assert set(table.column("study").to_pylist()) == {name}


@pytest.mark.parametrize("name", NAMES)
def test_command_help(name):
    result = CliRunner().invoke(app, [STUDIES[name].command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_command_help_of_the_installed_entry_point():
    command = STUDIES[NAMES[0]].command
    done = subprocess.run([sys.executable, "-m", "canvaslab.cli.main", command, "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert command in done.stdout


@pytest.mark.parametrize("name", NAMES)
def test_a_rerun_resumes_with_the_same_summary(runs, name):
    """Last in the module: a rerun into the folder runs nothing and gives the same numbers."""
    entry = STUDIES[name]
    out, results = run_of(runs, name)
    again = entry.plan(model="tiny", **TINY[name]).run(out=out)
    assert again.outcome.ran == 0 and again.outcome.skipped == results.outcome.ran
    assert again.summary == results.summary



@pytest.mark.parametrize("name", NAMES)
def test_the_units_of_a_registered_plan_are_the_units_the_study_ran(runs, name):
    """What a reader of a received folder checks its records against (``units_of_plan``) is what ran."""
    out, _ = run_of(runs, name)
    registered = registered_plan(out)
    stored = set(open_results(out).to_pandas()["unit"])
    assert set(STUDIES[name].units_of_plan(registered["plan"], out)) == stored and stored
