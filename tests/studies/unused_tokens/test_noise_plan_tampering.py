"""A noise study whose plan was re-registered in place after its results (plan.json, plan.sha256 and the
store's plan all made consistent), or whose plan files hold NaN or Infinity: every entry point refuses in
one line (exit 2) and no record is moved."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import canvaslab
from canvaslab.cli.main import main
from canvaslab.errors import CanvaslabError
from canvaslab.studies.engine.plan import canonical_json as store_json
from canvaslab.studies.engine.plan import sha256_of
from canvaslab.studies.unused_tokens.first_pass_plan import check_choices
from canvaslab.studies.unused_tokens.model_facts import read_model_facts
from canvaslab.studies.unused_tokens.noise_study import run_noise_study
from canvaslab.studies.unused_tokens.plan import (HASH_FILE, PLAN_FILE, build_plan, canonical_json, hash_plan_dict,
                                                  save_plan)
from canvaslab.studies.unused_tokens.token_pools import build_token_pools


@pytest.fixture(scope="module")
def finished(tiny, tmp_path_factory) -> Path:
    """The small design (12 conditions), run to the end with the CLI's defaults and batch size 4."""
    directory = tmp_path_factory.mktemp("finished")
    facts, tokenizer = read_model_facts("tiny")
    pools = build_token_pools(tokenizer, facts.vocab_size, facts.generation_defaults, None)
    save_plan(build_plan(facts, tokenizer, pools, design="small"), directory)
    run_noise_study(directory, tiny, batch_size=4)
    return directory


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    error = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "Traceback" not in error and len(error.splitlines()) == 1, error
    return " ".join(error.split())


def _re_register(directory: Path) -> None:
    """Loosen a margin after the results and make every registration file agree with the new plan."""
    plan = json.loads((directory / PLAN_FILE).read_text())
    plan["analysis"]["margins"]["first_pass_keeps"] = 5.0
    (directory / PLAN_FILE).write_text(canonical_json(plan))
    (directory / HASH_FILE).write_text(f"{hash_plan_dict(plan)}  {PLAN_FILE}\n")
    store = json.loads((directory / "store" / PLAN_FILE).read_text())
    store["plan"]["registered_plan_sha256"] = hash_plan_dict(plan)
    (directory / "store" / PLAN_FILE).write_text(store_json(store) + "\n")
    (directory / "store" / HASH_FILE).write_text(f"{sha256_of(store)}  {PLAN_FILE}\n")


def test_run_and_report_refuse_a_plan_re_registered_after_its_results(finished, tmp_path, capsys):
    directory = Path(shutil.copytree(finished, tmp_path / "forged"))
    _re_register(directory)
    before = _files(directory)
    for command in (["noise-study", "run", str(directory), "--batch-size", "4"],
                    ["noise-study", "report", str(directory)]):
        error = _refused(command, capsys)
        assert str(directory) in error and "plan was changed after 12 results were stored" in error
        assert "--fresh" in error
    assert _files(directory) == before  # nothing set aside as .damaged, nothing rerun, no report rewritten


def test_fresh_runs_the_new_plan_and_keeps_the_old_results(finished, tiny, tmp_path):
    directory = Path(shutil.copytree(finished, tmp_path / "forged"))
    _re_register(directory)
    before = _files(directory)
    report = run_noise_study(directory, tiny, batch_size=4, fresh=True)
    assert report["outcome"]["ran"] == 12 and _files(Path(f"{directory}.1")) == before


@pytest.mark.parametrize("word", ["NaN", "Infinity"])
def test_a_plan_json_holding_a_non_finite_number_is_refused_in_one_line(finished, tmp_path, capsys, word):
    directory = Path(shutil.copytree(finished, tmp_path / "nan"))
    plan = directory / PLAN_FILE
    plan.write_text(plan.read_text().replace('"first_pass_keeps": 0.05', f'"first_pass_keeps": {word}'))
    before = _files(directory)
    for command in (["noise-study", "run", str(directory), "--batch-size", "4"],
                    ["noise-study", "report", str(directory)]):
        error = _refused(command, capsys)
        assert f"{plan} holds a non-finite number (analysis.margins.first_pass_keeps is" in error
    assert _files(directory) == before


@pytest.mark.parametrize("word", ["NaN", "-Infinity"])
def test_a_store_plan_holding_a_non_finite_number_is_refused_in_one_line(finished, tmp_path, capsys, word):
    directory = Path(shutil.copytree(finished, tmp_path / "nan"))
    registered = directory / "store" / PLAN_FILE
    registered.write_text(registered.read_text().replace('"batch_size":4', f'"batch_size":{word}'))
    before = _files(directory)
    for command in (["noise-study", "run", str(directory), "--batch-size", "4"],
                    ["noise-study", "report", str(directory)], ["export", str(directory)]):
        assert "store/plan.json holds a non-finite number (plan.execution.batch_size is" in _refused(command, capsys)
    with pytest.raises(CanvaslabError, match="non-finite number"):
        canvaslab.open_results(directory)
    assert _files(directory) == before


@pytest.mark.parametrize("design", ["small", "smoke"])
def test_plan_refuses_an_infinite_margin_in_one_line(tmp_path, capsys, design):
    error = _refused(["noise-study", "plan", "--design", design, "--margin", "inf", "--out", str(tmp_path / "p")],
                     capsys)
    assert "--margin" in error and "inf" in error and not (tmp_path / "p" / PLAN_FILE).exists()


@pytest.mark.parametrize("margin", [float("inf"), float("nan")])
def test_both_plan_builders_refuse_a_non_finite_margin(margin):
    facts, tokenizer = read_model_facts("tiny")
    pools = build_token_pools(tokenizer, facts.vocab_size, facts.generation_defaults, None)
    with pytest.raises(CanvaslabError, match="--margin must be a positive finite number"):
        build_plan(facts, tokenizer, pools, design="small", margin=margin)
    with pytest.raises(CanvaslabError, match="--margin must be a positive finite number"):
        check_choices("smoke", margin, 0, None)
