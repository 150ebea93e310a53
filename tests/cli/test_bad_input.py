"""Every command x bad input: exit 2, one line on stderr, no traceback, and nothing started.

The app runs in-process through typer's CliRunner (the same group class and error handling as the
installed ``canvaslab``); the work functions every command calls are replaced by one that raises
``WorkStarted``, so a case that got past the checks would show up as that exception instead of exit 2.
A few subprocess checks run the real entry point.
"""

from __future__ import annotations

import contextlib
import importlib
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from canvaslab.cli.main import app
from canvaslab.choices import MAX_NEW_TOKENS, MAX_STEPS
from canvaslab.cli.options import MAX_SEED

# Where each command's work starts (commands import these lazily, so patching the module attribute works).
WORK = [
    ("canvaslab.models", "load_model"),
    ("canvaslab.assets", "build_corpus"),
    ("canvaslab.assets", "convert_gemma3_tokenizer"),
    ("canvaslab.studies.unused_tokens", "resolve_tokenizer"),
    ("canvaslab.studies.unused_tokens.model_facts", "read_model_facts"),
    ("canvaslab.studies.unused_tokens.noise_study", "run_noise_study"),
    ("canvaslab.analysis.order_metrics", "compute_order_metrics"),
    ("canvaslab.scoring.probes", "load_probe_suite"),
]


class WorkStarted(Exception):
    """Raised by every work function in these tests: reaching one means the input was accepted."""


def _refuse(*args, **kwargs):
    raise WorkStarted


@contextlib.contextmanager
def no_work():
    """Every work function replaced by ``_refuse`` for the block, and the originals back after it."""
    with pytest.MonkeyPatch.context() as patch:
        originals = {}
        for module, name in WORK:
            target = importlib.import_module(module)
            originals[name] = getattr(target, name)
            patch.setattr(target, name, _refuse)
        try:
            yield patch
        finally:
            _restore_copies(originals)


def _restore_copies(originals: dict) -> None:
    # A module first imported inside the block (commands import lazily: the commit-order study, the noise
    # study) binds the patch with ``from ... import name``; monkeypatch knows nothing of that copy, which would
    # outlive the test and refuse the work of every later test (tests/api).
    for module in [module for name, module in list(sys.modules.items()) if name.startswith("canvaslab")]:
        for name, value in list(vars(module).items()):
            if value is _refuse:
                setattr(module, name, originals[name])


@pytest.fixture
def files(tmp_path, monkeypatch) -> Iterator[Path]:
    """A folder of the paths the cases name, as the working directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x\n")
    (tmp_path / "counts.txt").write_text("not an array\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "plan").mkdir()
    (tmp_path / "traces.jsonl").write_text("{}\n")
    with no_work():
        yield tmp_path


def invoke(args: list[str]):
    return CliRunner().invoke(app, args)


def assert_one_line_error(result, *fragments: str) -> str:
    output = result.output + result.stderr
    assert "Traceback" not in output
    assert not isinstance(result.exception, WorkStarted), "the bad input was accepted and work started"
    assert result.exit_code == 2, (result.exit_code, output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


NOT_WRITABLE = "/proc/canvaslab-out"  # /proc refuses new files, for root too

CASES = {
    # batch-study
    "batch-study --steps 0": (["batch-study", "--steps", "0"], "--steps 0", "from 1 to"),
    "batch-study --steps -5": (["batch-study", "--steps", "-5"], "--steps -5"),
    "batch-study --max-new-tokens 0": (["batch-study", "--max-new-tokens", "0"], "--max-new-tokens 0"),
    "batch-study --layers 0": (["batch-study", "--layers", "0"], "--layers 0"),
    "batch-study --seed -1": (["batch-study", "--seed", "-1"], "--seed -1", "from 0"),
    "batch-study --seed 2**63": (["batch-study", "--seed", str(2**63)], "--seed"),
    "batch-study --model-seed -1": (["batch-study", "--model-seed", "-1"], "--model-seed -1"),
    "batch-study --prompts -1": (["batch-study", "--prompts", "-1"], "--prompts -1", "built-in"),
    "batch-study --prompts 0": (["batch-study", "--prompts", "0"], "--prompts 0"),
    "batch-study --prompts 99": (["batch-study", "--prompts", "99"], "--prompts 99", "pass a file"),
    "batch-study --prompts missing": (["batch-study", "--prompts", "missing.txt"], "missing.txt", "does not exist"),
    "batch-study --batch-sizes 1": (["batch-study", "--batch-sizes", "1"], "--batch-sizes 1", "other than 1"),
    "batch-study --batch-sizes 0,2": (["batch-study", "--batch-sizes", "0,2"], "0 is impossible"),
    "batch-study --batch-sizes 1,x": (["batch-study", "--batch-sizes", "1,x"], "whole numbers"),
    "batch-study --fill random": (["batch-study", "--fill", "random"], "--fill", "copies, mixed"),
    "batch-study --rng sometimes": (["batch-study", "--rng", "sometimes"], "--rng", "row, stock"),
    "batch-study --mode bogus": (["batch-study", "--mode", "bogus"], "--mode", "stock, rowwise, invariant"),
    "batch-study --dtype int3": (["batch-study", "--dtype", "int3"], "--dtype", "float32"),
    "batch-study --out file": (["batch-study", "--out", "afile"], "--out afile", "is a file"),
    "batch-study --out under file": (["batch-study", "--out", "afile/sub"], "--out afile/sub", "is a file"),
    "batch-study --out not writable": (["batch-study", "--out", NOT_WRITABLE], "--out", "cannot write"),
    "batch-study --executor dask": (["batch-study", "--executor", "dask"], "--executor 'dask'", "local, ray"),
    "batch-study --retries -1": (["batch-study", "--retries", "-1"], "--retries -1"),
    "batch-study --workers 0": (["batch-study", "--executor", "ray", "--workers", "0"], "--workers 0"),
    "batch-study --ray-address without ray": (["batch-study", "--ray-address", "auto"], "--ray-address",
                                              "--executor ray"),
    "batch-study --workers without ray": (["batch-study", "--workers", "2"], "--workers", "--executor ray"),
    # generate
    "generate --steps 0": (["generate", "--prompt", "hi", "--steps", "0"], "--steps 0"),
    "generate --max-new-tokens 0": (["generate", "--prompt", "hi", "--max-new-tokens", "0"], "--max-new-tokens 0"),
    "generate --max-new-tokens -3": (["generate", "--prompt", "hi", "--max-new-tokens", "-3"], "--max-new-tokens -3"),
    "generate --seed -1": (["generate", "--prompt", "hi", "--seed", "-1"], "--seed -1"),
    "generate --prompt ''": (["generate", "--prompt", "  "], "--prompt", "empty"),
    "generate --layers -2": (["generate", "--prompt", "hi", "--layers", "-2"], "--layers -2"),
    # op-scan
    "op-scan --batch-sizes 1": (["op-scan", "--batch-sizes", "1"], "--batch-sizes 1", "other than 1"),
    "op-scan --mode bogus": (["op-scan", "--mode", "bogus"], "--mode", "both"),
    "op-scan --layers 0": (["op-scan", "--layers", "0"], "--layers 0"),
    "op-scan --seed -1": (["op-scan", "--seed", "-1"], "--seed -1"),
    "op-scan --out file": (["op-scan", "--out", "afile"], "--out afile"),
    "op-scan --executor bogus": (["op-scan", "--executor", "bogus"], "--executor"),
    # export
    "export no store": (["export", "folder"], "folder holds no study store"),
    "export missing folder": (["export", "nope"], "nope: no such folder"),
    "export a file": (["export", "afile"], "afile: is a file, not a folder"),
    "export --format xlsx": (["export", "folder", "--format", "xlsx"], "--format", "parquet"),
    # order-metrics
    "order-metrics missing traces": (["order-metrics", "nope.jsonl", "--out", "o"], "TRACES nope.jsonl", "no such file"),
    "order-metrics traces folder": (["order-metrics", "folder", "--out", "o"], "TRACES folder", "folder"),
    "order-metrics --out file": (["order-metrics", "traces.jsonl", "--out", "afile"], "--out afile"),
    "order-metrics --bootstrap -1": (["order-metrics", "traces.jsonl", "--out", "o", "--bootstrap", "-1"], "--bootstrap -1"),
    "order-metrics --seed -1": (["order-metrics", "traces.jsonl", "--out", "o", "--seed", "-1"], "--seed -1"),
    # order-study
    "order-study --seeds 0": (["order-study", "--out", "o", "--seeds", "0"], "--seeds 0"),
    "order-study --prompts-per-regime 0": (["order-study", "--out", "o", "--prompts-per-regime", "0"], "--prompts-per-regime 0"),
    "order-study --batch-size 0": (["order-study", "--out", "o", "--batch-size", "0"], "--batch-size 0"),
    "order-study --split bogus": (["order-study", "--out", "o", "--split", "bogus"], "--split", "confirmatory"),
    "order-study --regimes poetry": (["order-study", "--out", "o", "--regimes", "math,poetry"], "--regimes", "factual"),
    "order-study --bootstrap -1": (["order-study", "--out", "o", "--bootstrap", "-1"], "--bootstrap -1"),
    "order-study --steps 0": (["order-study", "--out", "o", "--steps", "0"], "--steps 0"),
    "order-study --out file": (["order-study", "--out", "afile"], "--out afile"),
    "order-study --retries -1": (["order-study", "--out", "o", "--retries", "-1"], "--retries -1"),
    "order-study --baseline missing": (["order-study", "--out", "o", "--baseline", "nope"], "--baseline nope"),
    # vocab-scan
    "vocab-scan --canvas-length 0": (["vocab-scan", "--tokenizer", "tiny", "--canvas-length", "0"], "--canvas-length 0"),
    "vocab-scan --out file": (["vocab-scan", "--tokenizer", "tiny", "--out", "afile"], "--out afile"),
    "vocab-scan --corpus missing": (["vocab-scan", "--tokenizer", "tiny", "--out", "o", "--corpus", "nope.txt"], "nope.txt"),
    # noise-study plan / run
    "noise plan --token-counts .txt": (["noise-study", "plan", "--out", "p", "--token-counts", "counts.txt"],
                                       "--token-counts counts.txt", ".npy"),
    "noise plan --token-counts missing": (["noise-study", "plan", "--out", "p", "--token-counts", "nope.npy"],
                                          "--token-counts nope.npy", "no such file"),
    "noise plan --seed -1": (["noise-study", "plan", "--out", "p", "--seed", "-1"], "--seed -1"),
    "noise plan --margin 0": (["noise-study", "plan", "--out", "p", "--margin", "0"], "--margin 0"),
    "noise plan --margin nan": (["noise-study", "plan", "--out", "p", "--margin", "nan"], "--margin nan"),
    "noise plan --design bogus": (["noise-study", "plan", "--out", "p", "--design", "bogus"], "--design", "small"),
    "noise plan --out file": (["noise-study", "plan", "--out", "afile"], "--out afile"),
    "noise plan --layers 0": (["noise-study", "plan", "--out", "p", "--layers", "0"], "--layers 0"),
    "noise run missing dir": (["noise-study", "run", "nope"], "DIRECTORY nope", "does not exist"),
    "noise run dir is a file": (["noise-study", "run", "afile"], "DIRECTORY afile", "not a folder"),
    "noise run --batch-size 0": (["noise-study", "run", "plan", "--batch-size", "0"], "--batch-size 0"),
    "noise run --limit 0": (["noise-study", "run", "plan", "--limit", "0"], "--limit 0"),
    "noise run --executor bogus": (["noise-study", "run", "plan", "--executor", "bogus"], "--executor"),
    # assets
    "assets corpus --out folder": (["assets", "corpus", "--out", "folder"], "--out folder", "is a folder"),
    "assets corpus --out under file": (["assets", "corpus", "--out", "afile/c.txt"], "--out afile/c.txt"),
    "assets corpus --out not writable": (["assets", "corpus", "--out", f"{NOT_WRITABLE}/c.txt"], "cannot write"),
    "assets tokenizer --cache-dir file": (["assets", "tokenizer", "--cache-dir", "afile"], "--cache-dir afile"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_value_is_one_line_before_any_work(files, case):
    args, *fragments = CASES[case]
    assert_one_line_error(invoke(args), *fragments)


USAGE_ERRORS = {
    "no arguments": [],
    "unknown command": ["nosuchcommand"],
    "unknown option": ["batch-study", "--bogus"],
    "not a number": ["batch-study", "--steps", "abc"],
    "generate without --prompt": ["generate"],
    "order-study without --out": ["order-study"],
    "vocab-scan without --tokenizer": ["vocab-scan"],
    "order-metrics without traces": ["order-metrics", "--out", "o"],
    "noise-study alone": ["noise-study"],
    "noise-study run without folder": ["noise-study", "run"],
    "assets corpus without --out": ["assets", "corpus"],
}


@pytest.mark.parametrize("case", sorted(USAGE_ERRORS))
def test_usage_error_prints_usage_and_exits_2(files, case):
    result = invoke(USAGE_ERRORS[case])
    output = result.output + result.stderr
    assert result.exit_code == 2, output
    assert "Traceback" not in output and "Usage:" in output
    assert not isinstance(result.exception, WorkStarted)


# (command before the option, option, smallest allowed, largest allowed)
NUMERIC = [
    (["batch-study"], "--steps", 1, MAX_STEPS),
    (["batch-study"], "--max-new-tokens", 1, MAX_NEW_TOKENS),
    (["batch-study"], "--layers", 1, None),
    (["batch-study"], "--seed", 0, MAX_SEED),
    (["generate", "--prompt", "hi"], "--model-seed", 0, MAX_SEED),
    (["op-scan"], "--seed", 0, MAX_SEED),
    (["order-study", "--out", "o"], "--seeds", 1, None),
    (["order-study", "--out", "o"], "--batch-size", 1, None),
    (["order-study", "--out", "o"], "--bootstrap", 0, None),
    (["order-metrics", "traces.jsonl", "--out", "o"], "--seed", 0, MAX_SEED),
    (["vocab-scan", "--tokenizer", "tiny", "--out", "o"], "--canvas-length", 1, None),
    (["noise-study", "plan", "--out", "p"], "--seed", 0, MAX_SEED),
    (["noise-study", "run", "plan"], "--limit", 1, None),
]


def _in_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("numeric")
    (folder / "plan").mkdir()
    (folder / "traces.jsonl").write_text("{}\n")
    return folder


@pytest.fixture(scope="module")
def numeric_folder(tmp_path_factory):
    return _in_files(tmp_path_factory)


def _run_numeric(folder: Path, prefix: list[str], option: str, value: int):
    with no_work() as patch:
        patch.chdir(folder)
        return invoke([*prefix, option, str(value)])


@pytest.mark.parametrize("prefix, option, low, high", NUMERIC, ids=[" ".join([*p[:2], o]) for p, o, _, _ in NUMERIC])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_numeric_options_refuse_out_of_range_and_accept_the_rest(numeric_folder, prefix, option, low, high, data):
    below = data.draw(st.integers(max_value=low - 1), label="below")
    assert_one_line_error(_run_numeric(numeric_folder, prefix, option, below), f"{option} {below}")
    if high is not None:
        above = data.draw(st.integers(min_value=high + 1, max_value=high * 4), label="above")
        assert_one_line_error(_run_numeric(numeric_folder, prefix, option, above), f"{option} {above}")
    valid = data.draw(st.integers(min_value=low, max_value=high if high is not None else 10**9), label="valid")
    result = _run_numeric(numeric_folder, prefix, option, valid)
    assert isinstance(result.exception, WorkStarted), (result.exit_code, result.output, result.stderr)


def test_no_patch_outlives_its_block(numeric_folder, monkeypatch):
    """The order study's module, first imported while the work is refused, must not keep the refusal: the
    study of a later test would stop at its measures."""
    import canvaslab.analysis.order_metrics as order_metrics

    monkeypatch.delitem(sys.modules, "canvaslab.studies.commit_order.study", raising=False)
    result = _run_numeric(numeric_folder, ["order-study", "--out", "o"], "--seeds", 1)
    assert isinstance(result.exception, WorkStarted)
    study = sys.modules["canvaslab.studies.commit_order.study"]
    assert study.compute_order_metrics is order_metrics.compute_order_metrics


def test_checks_after_parsing_still_come_before_any_weights(tmp_path, monkeypatch):
    """--layers against the model's depth and a damaged state file need the model spec / the folder."""
    import canvaslab.models.loading as loading

    monkeypatch.setattr(loading, "_random_model", _refuse)
    monkeypatch.setattr(loading.DiffusionGemmaForBlockDiffusion, "from_pretrained", _refuse)
    assert_one_line_error(invoke(["generate", "--prompt", "hi", "--layers", "5"]), "--layers 5", "has 2 layers")
    damaged = tmp_path / "study"
    (damaged / "store").mkdir(parents=True)
    (damaged / "store" / "plan.json").write_text('{"study": ')
    line = assert_one_line_error(invoke(["batch-study", "--out", str(damaged)]), "plan.json is damaged")
    assert "--fresh" in line
    # a folder holding a study with other choices: refused naming the field, before the model loads
    from canvaslab.prompts import builtin_prompts
    from canvaslab.studies.batch_size import BatchStudySettings
    from canvaslab.studies.batch_size.study import BatchSizeStudy
    from canvaslab.studies.engine.plan import register

    other = tmp_path / "other"
    spec = {"spec": "tiny", "dtype": "auto", "device": "cpu", "layers": None, "seed": 0}
    register(other, "batch_size", BatchSizeStudy(spec, builtin_prompts(3), BatchStudySettings([1, 2, 3, 4])).plan())
    line = assert_one_line_error(invoke(["batch-study", "--batch-sizes", "1,2", "--out", str(other)]),
                                 "plan.settings.batch_sizes was [1,2,3,4], now [1,2]")


def test_damaged_token_counts_are_refused_before_the_plan(tmp_path, monkeypatch):
    import canvaslab.studies.unused_tokens.plan as plan

    monkeypatch.setattr(plan, "build_plan", _refuse)
    bad_npy = tmp_path / "counts.npy"
    bad_npy.write_text("not numpy")
    assert_one_line_error(invoke(["noise-study", "plan", "--out", str(tmp_path / "p"), "--design", "small",
                                  "--token-counts", str(bad_npy)]), "--token-counts", "not a readable .npy")
    assert not (tmp_path / "p").exists()


def test_config_file_layers_are_checked_before_weights(tmp_path, monkeypatch, tiny):
    import canvaslab.models.loading as loading

    tiny.model.config.save_pretrained(tmp_path)
    monkeypatch.setattr(loading, "_random_model", _refuse)
    assert_one_line_error(invoke(["generate", "--prompt", "hi", "--model", str(tmp_path / "config.json"),
                                  "--layers", "3"]), "--layers 3", "has 2 layers")


@pytest.mark.parametrize("args", [["nosuchcommand"], ["batch-study", "--bogus"],
                                  ["batch-study", "--steps", "0", "--prompts", "1", "--batch-sizes", "1,2"],
                                  ["batch-study", "--batch-sizes", "1"]])
def test_entry_point_exits_2_without_traceback(args):
    """The installed entry point (as the before-stop probes run it), in a process of its own."""
    done = subprocess.run([sys.executable, "-c", "from canvaslab.cli.main import main; main()", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_bad_input_is_answered_without_importing_torch():
    """Usage and value errors must not wait for torch and transformers (seconds, minutes on a busy machine)."""
    code = ("import sys\nfrom canvaslab.cli.main import main\ntry:\n    main(['batch-study', '--steps', '0'])\n"
            "except SystemExit as e:\n    print(e.code, 'torch' in sys.modules, 'transformers' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["2", "False", "False"], done.stdout + done.stderr
