"""``canvaslab --version``, and every on/off flag spelled ``--x/--no-x`` with no value placeholder in ``--help``."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import canvaslab
from canvaslab.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


def commands(group=None, path=()):
    """(command path, click command) of every command of the app, sub-commands included."""
    group = group or typer.main.get_command(app)
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


def bool_flags():
    return [(path, param) for path, command in commands() for param in command.params
            if getattr(param, "is_bool_flag", False)]


def test_version_prints_the_package_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"canvaslab {canvaslab.__version__}\n"


def test_the_version_is_declared_once():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" in project["dynamic"]
    assert canvaslab.__version__ == "0.3.0"


def test_every_flag_has_an_off_spelling():
    flags = bool_flags()
    assert len(flags) >= 10
    lonely = [f"{' '.join(path)} {param.opts[0]}" for path, param in flags if not param.secondary_opts]
    assert lonely == []


@pytest.mark.parametrize("path", [("order-study",), ("batch-study",), ("noise-study", "plan"), ("export",), ()])
def test_help_shows_no_value_placeholder_for_flags(path):
    result = CliRunner().invoke(app, [*path, "--help"], terminal_width=200)
    assert result.exit_code == 0
    assert "<bool>" not in result.output
    assert "--help" in result.output


def test_order_study_help_names_both_spellings():
    output = CliRunner().invoke(app, ["order-study", "--help"], terminal_width=200).output
    assert "--parquet" in output and "--no-parquet" in output


@pytest.mark.parametrize("spelling, expected", [(["--parquet"], True), (["--no-parquet"], False), ([], False)])
def test_both_spellings_parse(tmp_path, spelling, expected):
    command = typer.main.get_command(app).commands["order-metrics"]
    traces = tmp_path / "t.jsonl"
    traces.write_text("")
    ctx = command.make_context("order-metrics", [str(traces), "--out", str(tmp_path / "o"), *spelling])
    assert ctx.params["parquet"] is expected


@pytest.mark.parametrize("value", ["true", "False", "1"])
def test_a_value_after_a_flag_is_refused_in_one_line(tmp_path, value):
    traces = tmp_path / "t.jsonl"
    traces.write_text("")
    result = CliRunner().invoke(app, ["order-metrics", str(traces), "--out", str(tmp_path / "o"), "--parquet", value])
    assert result.exit_code == 2
    assert result.output.strip() == (f"error: --parquet takes no value (--parquet {value}): "
                                     "write --parquet or --no-parquet")
