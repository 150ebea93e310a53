"""The plans: frozen and normalised; refusing what the command refuses, with the command's line; a folder's
plan guarded; generate's rows; the noise study's registration."""

from __future__ import annotations

import dataclasses
import re
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import canvaslab
from canvaslab import (BatchSizeStudy, CanvaslabError, CommitOrderStudy, NoiseStudy, OpScan, export, generate,
                       open_results)
from canvaslab.choices import REGIMES, SUITE_REGIMES

PLANS = [BatchSizeStudy, OpScan, CommitOrderStudy, NoiseStudy]


# ---- (a) frozen, normalised --------------------------------------------------------------------------

@pytest.mark.parametrize("plan_type", PLANS)
def test_plans_are_frozen(plan_type):
    plan = plan_type()
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.model = "real-shapes"
    with pytest.raises(dataclasses.FrozenInstanceError):
        del plan.model
    assert plan.to_dict()["model"] == "tiny"


@pytest.mark.parametrize("plan_type", PLANS)
def test_replace_checks_again(plan_type):
    with pytest.raises(CanvaslabError, match=r"^--dtype 'int8': must be one of auto, "):
        dataclasses.replace(plan_type(), dtype="int8")


def test_plans_normalise():
    plan = BatchSizeStudy(batch_sizes="3,1")
    assert plan.batch_sizes == (1, 3)
    assert plan == BatchSizeStudy(batch_sizes=[3, 1, 3]) == BatchSizeStudy(batch_sizes=(3,))  # B=1 always in
    assert hash(plan) == hash(BatchSizeStudy(batch_sizes=(1, 3)))
    assert OpScan(batch_sizes=" 4,2").batch_sizes == (1, 2, 4)
    assert BatchSizeStudy(prompts="2").prompts == 2
    assert BatchSizeStudy(prompts=["a b", "c"]).prompts == ("a b", "c")
    assert [p.text for p in BatchSizeStudy(prompts=["a b", "c"]).prompt_list()] == ["a b", "c"]
    assert CommitOrderStudy(regimes="math, json").regimes == ("math", "json")
    assert CommitOrderStudy(regimes=["json"]).regimes == ("json",)
    assert CommitOrderStudy().regimes == REGIMES
    assert CommitOrderStudy(suite="mini").regimes == SUITE_REGIMES["mini"]


def test_plan_defaults_are_the_commands():
    from typer.main import get_command

    from canvaslab.cli.main import app

    group = get_command(app)
    for name, entry in canvaslab.STUDIES.items():
        command = group.commands[entry.command]
        if name == "unused_tokens":
            command = command.commands["plan"]
        fields = entry.plan.__dataclass_fields__
        for param in command.params:
            if param.name in fields and param.name not in ("regimes", "batch_sizes", "prompts", "out"):
                assert fields[param.name].default == param.default, (name, param.name)
        if "batch_sizes" in fields:
            assert entry.plan().batch_sizes == tuple(int(s) for s in next(
                p.default for p in command.params if p.name == "batch_sizes").split(","))


# ---- (b) the API refuses what the command refuses, with the same line ---------------------------------

# Modules that bind canvaslab.models.load_model when imported: imported before it is patched, or one first
# imported under the patch would keep it for the rest of the session.
BINDS_LOAD_MODEL = ["canvaslab.studies.unused_tokens.noise_study", "canvaslab.studies.unused_tokens.model_facts"]


def forbid_model_loading(monkeypatch, why: str) -> None:
    import canvaslab.models

    for module in BINDS_LOAD_MODEL:
        importlib.import_module(module)

    def no_model(*args, **kwargs):
        raise AssertionError(why)

    monkeypatch.setattr(canvaslab.models, "load_model", no_model)


def case(args, call, reason_it_fails=None, *, may_load=False, skip=None):
    """A command line and the API call of the same input (run in the same working directory). ``may_load``:
    the refusal comes from the model loader itself (a model the name does not resolve to)."""
    marks = []
    if reason_it_fails:
        marks.append(pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason_it_fails))
    if skip:
        marks.append(pytest.mark.skipif(skip[0], reason=skip[1]))
    return pytest.param(args, call, may_load, marks=marks, id=" ".join(args))


RAY = importlib.util.find_spec("ray") is not None

# The command's one error line must contain the API's message.
CASES = [
    case(["batch-study", "--batch-sizes", "1"], lambda: BatchSizeStudy(batch_sizes="1")),
    case(["batch-study", "--batch-sizes", "1,x"], lambda: BatchSizeStudy(batch_sizes="1,x")),
    case(["batch-study", "--batch-sizes", "1,5000"], lambda: BatchSizeStudy(batch_sizes="1,5000")),
    case(["batch-study", "--mode", "fast"], lambda: BatchSizeStudy(mode="fast")),
    case(["batch-study", "--dtype", "int8"], lambda: BatchSizeStudy(dtype="int8")),
    case(["batch-study", "--seed", "-1"], lambda: BatchSizeStudy(seed=-1)),
    case(["batch-study", "--row", "5", "--batch-sizes", "1,2"], lambda: BatchSizeStudy(row=5, batch_sizes=(1, 2))),
    case(["batch-study", "--prompts", "99"], lambda: BatchSizeStudy(prompts=99)),
    case(["batch-study", "--prompts", "missing.txt"], lambda: BatchSizeStudy(prompts="missing.txt").run("x")),
    case(["batch-study", "--fill", "zeros"], lambda: BatchSizeStudy(fill="zeros")),
    case(["batch-study", "--rng", "numpy"], lambda: BatchSizeStudy(rng="numpy")),
    case(["batch-study", "--repeat-control", "never"], lambda: BatchSizeStudy(repeat_control="never")),
    case(["batch-study", "--steps", "0"], lambda: BatchSizeStudy(steps=0)),
    case(["batch-study", "--max-new-tokens", "0"], lambda: BatchSizeStudy(max_new_tokens=0)),
    case(["batch-study", "--layers", "0"], lambda: BatchSizeStudy(layers=0)),
    case(["batch-study", "--model", "nope"], lambda: BatchSizeStudy(model="nope").run("x"), may_load=True),
    case(["batch-study", "--workers", "2"], lambda: BatchSizeStudy().run("x", workers=2)),
    case(["batch-study", "--ray-address", "auto"], lambda: BatchSizeStudy().run("x", ray_address="auto")),
    case(["batch-study", "--executor", "dask"], lambda: BatchSizeStudy().run("x", executor="dask")),
    case(["batch-study", "--retries", "101"], lambda: BatchSizeStudy().run("x", retries=101)),
    case(["batch-study", "--out", "afile"], lambda: BatchSizeStudy().run("afile")),
    case(["batch-study", "--executor", "ray", "--workers", "2"],
         lambda: BatchSizeStudy().run("x", executor="ray", workers=2),
         skip=(RAY, "Ray is installed: the command would start the study")),
    case(["op-scan", "--mode", "fast"], lambda: OpScan(mode="fast")),
    case(["op-scan", "--batch-sizes", "0,2"], lambda: OpScan(batch_sizes="0,2")),
    case(["op-scan", "--model-seed", "-3"], lambda: OpScan(model_seed=-3)),
    case(["order-study", "--out", "o", "--regimes", "poetry"], lambda: CommitOrderStudy(regimes="poetry")),
    case(["order-study", "--out", "o", "--seeds", "0"], lambda: CommitOrderStudy(seeds=0)),
    case(["order-study", "--out", "o", "--prompts-per-regime", "0"], lambda: CommitOrderStudy(prompts_per_regime=0)),
    case(["order-study", "--out", "o", "--split", "train"], lambda: CommitOrderStudy(split="train")),
    case(["order-study", "--out", "o", "--suite", "big"], lambda: CommitOrderStudy(suite="big")),
    case(["order-study", "--out", "o", "--batch-size", "0"], lambda: CommitOrderStudy(batch_size=0)),
    case(["order-study", "--out", "o", "--bootstrap", "-1"], lambda: CommitOrderStudy(bootstrap=-1)),
    case(["order-study", "--out", "o", "--baseline", "nowhere"], lambda: CommitOrderStudy(baseline="nowhere")),
    case(["noise-study", "plan", "--out", "n", "--design", "huge"], lambda: NoiseStudy(design="huge")),
    case(["noise-study", "plan", "--out", "n", "--margin", "0"], lambda: NoiseStudy(margin=0.0)),
    case(["noise-study", "plan", "--out", "n", "--margin", "-0.5"], lambda: NoiseStudy(margin=-0.5)),
    case(["noise-study", "plan", "--out", "n", "--seed", "-1"], lambda: NoiseStudy(seed=-1)),
    case(["noise-study", "plan", "--out", "n", "--token-counts", "missing.npy"],
         lambda: NoiseStudy(token_counts="missing.npy")),
    case(["noise-study", "plan", "--out", "n", "--token-counts", "afile"], lambda: NoiseStudy(token_counts="afile")),
    case(["noise-study", "run", "missing"], lambda: NoiseStudy.run_registered("missing")),
    case(["noise-study", "run", "folder", "--limit", "0"], lambda: NoiseStudy.run_registered("folder", limit=0)),
    case(["noise-study", "run", "folder", "--mode", "fast"], lambda: NoiseStudy.run_registered("folder", mode="fast")),
    case(["generate", "--prompt", "x", "--mode", "fast"], lambda: generate("x", mode="fast")),
    case(["generate", "--prompt", " "], lambda: generate(" ")),
    case(["generate", "--prompt", "x", "--rng", "numpy"], lambda: generate("x", rng="numpy")),
    case(["generate", "--prompt", "x", "--seed", "-1"], lambda: generate("x", seed=-1)),
    case(["export", "study", "--format", "csv"], lambda: export("study", format="csv")),
    case(["export", "nothing"], lambda: export("nothing")),
    case(["export", "study", "--out", "records.csv"], lambda: export("study", out="records.csv")),
    case(["export", "study", "--out", "folder"], lambda: export("study", out="folder")),
    case(["export", "afile"], lambda: export("afile")),
    case(["generate", "--prompt", "x", "--steps", "5000"], lambda: generate("x", steps=5000)),
    case(["generate", "--prompt", "x", "--max-new-tokens", "1000000"], lambda: generate("x", max_new_tokens=10**6)),
    case(["batch-study", "--steps", "1000000000000"], lambda: BatchSizeStudy(steps=10**12)),
    case(["noise-study", "plan", "--out", "p", "--margin", "inf"], lambda: NoiseStudy(margin=float("inf"))),
]


@pytest.mark.parametrize("call, fragment", [
    (lambda: open_results(None), "None: give a study folder"), (lambda: open_results(5), "5: give a study folder"),
    (lambda: open_results(b"x"), "b'x': give a study folder"), (lambda: export(None), "None: give a study folder"),
    (lambda: canvaslab.report(None), "None: give a study folder or a list"),
    (lambda: generate(None), "--prompt None: give a text"), (lambda: generate("x", steps="2"), "--steps '2': must")],
    ids=range(7))
def test_arguments_of_the_wrong_type_are_one_line_too(call, fragment):
    assert fragment in _refused_by_api(call)


def test_a_folder_given_as_one_text_is_one_folder(tmp_path):
    with pytest.raises(CanvaslabError, match=f"^{re.escape(str(tmp_path))}: no study output found"):
        canvaslab.report(str(tmp_path))  # not one folder per character of its name
    with pytest.raises(CanvaslabError, match=f"^{re.escape(str(tmp_path))}: no study output found"):
        canvaslab.report(folder for folder in [tmp_path])  # any iterable of folders


@pytest.fixture
def cwd(tmp_path, monkeypatch) -> Path:
    """The working directory of both: a file, a folder, and a folder that looks like a study to the command."""
    (tmp_path / "afile").write_text("x\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "study" / "store").mkdir(parents=True)
    (tmp_path / "study" / "store" / "plan.json").write_text("{}\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _refused_by_api(call) -> str:
    try:
        call()
    except CanvaslabError as error:
        return str(error)
    except Exception as error:  # noqa: BLE001 - the message says what was raised instead
        raise AssertionError(f"the API raised {type(error).__name__}: {error}, not CanvaslabError") from None
    raise AssertionError("the API accepted what the command refuses")


def _one_error_line(args: list[str], folder: Path, entry_point: bool = False) -> str:
    """The command's stderr, which must be one line and exit 2: in-process (typer's CliRunner, the same group
    and error handling as the installed command) or through the real entry point in a new interpreter."""
    if entry_point:
        done = subprocess.run([sys.executable, "-m", "canvaslab.cli.main", *args], capture_output=True, text=True,
                              cwd=folder, timeout=120)
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    else:
        from typer.testing import CliRunner

        from canvaslab.cli.main import app

        result = CliRunner().invoke(app, args)
        code, stdout, stderr = result.exit_code, result.stdout, result.stderr
        assert not isinstance(result.exception, AssertionError), result.exception  # a model load, forbidden here
    assert code == 2, (code, stdout, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


@pytest.mark.parametrize("args, call, may_load", CASES)
def test_the_api_refuses_with_the_commands_line(args, call, may_load, cwd, monkeypatch):
    if not may_load:
        forbid_model_loading(monkeypatch, "a model was loaded for bad input")
    line = _one_error_line(args, cwd)
    message = _refused_by_api(call)
    assert message in line, (message, line)
    assert "\n" not in message


@pytest.mark.parametrize("args, call", [
    (["batch-study", "--batch-sizes", "1"], lambda: BatchSizeStudy(batch_sizes="1")),
    (["order-study", "--out", "o", "--regimes", "poetry"], lambda: CommitOrderStudy(regimes="poetry")),
    (["batch-study", "--model", "nope"], lambda: BatchSizeStudy(model="nope").run("x")),
], ids=["batch-sizes", "regimes", "model"])
def test_the_installed_command_prints_the_apis_line(args, call, cwd):
    assert _refused_by_api(call) in _one_error_line(args, cwd, entry_point=True)


# ---- (c) a folder holding another plan -----------------------------------------------------------------

@pytest.fixture(scope="module")
def op_scan_folder(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("held") / "ops"
    OpScan(batch_sizes=(1, 2), mode="stock").run(out=out)
    return out


@pytest.fixture
def no_model_load(monkeypatch):
    forbid_model_loading(monkeypatch, "the model loaded before the folder's plan was checked")


@pytest.mark.parametrize("plan", [
    BatchSizeStudy(prompts=1, batch_sizes=(1, 2), steps=2, repeat_control="same-process"),
    OpScan(batch_sizes=(1, 3), mode="stock"),
    OpScan(batch_sizes=(1, 2), mode="invariant"),
], ids=["batch_size", "op_scan-sizes", "op_scan-mode"])
def test_a_folder_holding_another_plan_is_refused_before_the_model_loads(plan, op_scan_folder, no_model_load):
    before = sorted(p.relative_to(op_scan_folder) for p in op_scan_folder.rglob("*"))
    with pytest.raises(CanvaslabError, match="holds a study with another plan"):
        plan.run(out=op_scan_folder)
    assert sorted(p.relative_to(op_scan_folder) for p in op_scan_folder.rglob("*")) == before


def test_a_commit_order_study_into_another_plans_folder_is_refused(op_scan_folder):
    plan = CommitOrderStudy(regimes="math", seeds=1, prompts_per_regime=1, steps=2, max_new_tokens=16, bootstrap=0)
    with pytest.raises(CanvaslabError, match="holds a study with another plan"):
        plan.run(out=op_scan_folder)
    assert open_results(op_scan_folder).study == "op_scan"


def test_a_commit_order_study_is_refused_before_the_model_loads(op_scan_folder, no_model_load):
    plan = CommitOrderStudy(regimes="math", seeds=1, prompts_per_regime=1, steps=2, max_new_tokens=16, bootstrap=0)
    with pytest.raises(CanvaslabError, match="holds a study with another plan"):
        plan.run(out=op_scan_folder)


def test_the_same_plan_resumes_and_fresh_starts_over(op_scan_folder, tmp_path):
    same = OpScan(batch_sizes="2", mode="stock").run(out=op_scan_folder)  # the same plan, spelled otherwise
    assert same.outcome.ran == 0 and same.outcome.skipped > 0

    import shutil

    folder = shutil.copytree(op_scan_folder, tmp_path / "ops")
    other = OpScan(batch_sizes=(1, 3), mode="stock").run(out=folder, fresh=True)
    assert other.outcome.ran == same.outcome.skipped and other.outcome.skipped == 0
    assert open_results(folder).plan["batch_sizes"] == [1, 3]
    assert open_results(tmp_path / "ops.1").summary == same.summary  # the old study, kept under a new name


# ---- (d) generate ------------------------------------------------------------------------------------

def test_generate_gives_a_row_per_prompt_and_is_batch_invariant(tiny):
    both = generate(["a b", "c d e"], tiny, mode="invariant", steps=2)
    alone = generate(["a b"], "tiny", mode="invariant", steps=2)
    assert len(both.rows) == 2 and len(alone.rows) == 1
    assert [row.prompt for row in both.rows] == ["a b", "c d e"]
    for row in both.rows:
        assert isinstance(row.text, str) and row.tokens and all(isinstance(t, int) for t in row.tokens)
        assert set(row.stop_point) == {"stop_passes", "eos_position"}
    assert both.texts == [row.text for row in both.rows] and both.tokens == [row.tokens for row in both.rows]
    assert alone.rows[0].tokens == both.rows[0].tokens
    assert alone.rows[0].text == both.rows[0].text
    assert both.settings["max_denoising_steps"] == 2
    assert generate("a b", tiny, mode="invariant", steps=2).rows == alone.rows  # one prompt as a str


# ---- (e) the noise study's registration ---------------------------------------------------------------

def test_registering_twice_is_a_no_op_and_another_plan_is_refused(tmp_path):
    plan = NoiseStudy(design="small")
    first = plan.register(tmp_path)
    written = (tmp_path / "plan.json").stat().st_mtime_ns
    second = plan.register(tmp_path)
    assert second == first and second.sha256 == first.sha256
    assert (tmp_path / "plan.json").stat().st_mtime_ns == written
    assert (tmp_path / "plan.sha256").read_text().split()[0] == first.sha256
    assert first.conditions == 12 and first.folder == tmp_path.resolve()

    other = NoiseStudy(design="small", seed=1)
    with pytest.raises(CanvaslabError, match="holds another registered plan"):
        other.run(out=tmp_path)
    assert (tmp_path / "plan.sha256").read_text().split()[0] == first.sha256  # untouched

    replaced = other.register(tmp_path)  # `noise-study plan` again: a plan without results is replaced
    assert replaced.sha256 != first.sha256


def test_a_noise_study_needs_a_folder():
    with pytest.raises(CanvaslabError, match="out=DIR"):
        NoiseStudy(design="small").run()


def test_fresh_on_a_link_is_refused_before_the_model_loads(tmp_path, monkeypatch, capsys):
    from canvaslab.cli.main import main

    real = tmp_path / "real"
    real.mkdir()
    (real / "kept.txt").write_text("a study's files\n")
    (tmp_path / "link").symlink_to(real)
    monkeypatch.setattr("canvaslab.models.load_model", lambda *args, **kwargs: pytest.fail("the model loaded"))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["batch-study", "--prompts", "1", "--batch-sizes", "1,2", "--out", str(tmp_path / "link"), "--fresh"])
    error = capsys.readouterr().err
    assert exited.value.code == 2 and "symbolic link" in error and len(error.strip().splitlines()) == 1, error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"] and (real / "kept.txt").is_file()
