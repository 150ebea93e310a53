"""Every script in benchmarks/ runs: a CPU smoke run of each on the smallest thing it supports (``tiny``, toy
sizes, one or two passes), in a subprocess with a timeout, writing into tmp_path. Each run must write its
result with the expected keys and, beside it, the ``result.json`` manifest (``canvaslab.environment.
record_result``) that names it. ``--help`` says what each script measures and exits 0. A script without a
smoke run here, or one that reaches for a private canvaslab name, fails the suite."""

from __future__ import annotations

import ast
import io
import json
import os
import re
import runpy
import shutil
import signal
import subprocess
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
MANIFEST_KEYS = {"file", "command", "shows", "canvaslab_version", "git_commit", "git_dirty", "date", "environment"}
PASSAGES = [f"Passage number {i} begins with this sentence. It goes on with a second one about item {i}, "
            f"which is long enough to be a real continuation of the opening sentence." for i in range(80)]


def scripts() -> list[str]:
    return sorted(path.name for path in BENCHMARKS.iterdir() if path.suffix in (".py", ".sh"))


def kill_session(session: int) -> None:
    """Every process of the session a timed-out command led (the shell scripts' ``timeout`` stages sit in
    process groups of their own, so killing the command's group would leave them running)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == session:
                os.kill(int(stat.parent.name), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            pass


def run(command: list[str], timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    """One benchmark command from the repository root, one torch thread, this interpreter first on the PATH
    (the shell scripts call ``python``); on a timeout everything it started is killed."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
                   "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]), **env}
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_session(process.pid)
        process.communicate()
        raise
    print(f"{' '.join(command[:2])}: {time.monotonic() - started:.1f} s")
    assert process.returncode == 0, f"{' '.join(command)} failed ({process.returncode}):\n{stdout[-3000:]}\n{stderr[-3000:]}"
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def python(script: str, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    return run([sys.executable, str(BENCHMARKS / script), *args], timeout=timeout, **env)


def read(path: Path, *keys: str, manifest: bool = True) -> dict:
    """The JSON result at ``path``, which must hold ``keys``, and (``manifest``) the manifest entry beside it
    that names it."""
    assert path.is_file(), f"{path} was not written"
    result = json.loads(path.read_text())
    assert set(keys) <= set(result), f"{path.name} lacks {sorted(set(keys) - set(result))}"
    if manifest:
        manifested(path)
    return result


def manifested(path: Path) -> dict:
    """The manifest entry (``result.json``) for the file or folder ``path``."""
    folder = path if path.is_dir() else path.parent
    manifest = folder / "result.json"
    assert manifest.is_file(), f"no result.json beside {path}"
    name = "." if path.is_dir() else path.name
    runs = [run for run in json.loads(manifest.read_text())["runs"] if run["file"] == name]
    assert len(runs) == 1, f"{manifest} names {name} {len(runs)} times"
    assert MANIFEST_KEYS <= set(runs[0]) and runs[0]["shows"] and runs[0]["command"]
    return runs[0]


@pytest.fixture(scope="module")
def passages(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("passages") / "prose.txt"
    path.write_text("\n".join(PASSAGES) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, passages) -> Path:
    """A toy `mini` and sibling trained for 2 steps and evaluated on one held-out prompt per task: the smoke run
    of mini_train_h200.py, whose folder the quality and judge scripts read."""
    out = tmp_path_factory.mktemp("tiny_run") / "run"
    python("mini_train_h200.py", "--tiny", "--device", "cpu", "--steps", "2", "--batch-size", "4", "--examples", "16",
           "--eval-per-task", "2", "--eval-tasks", "add2,prose", "--passages", str(passages), "--out", str(out))
    return out


# ---- one smoke run per script ------------------------------------------------------------------------------

def smoke_throughput(tmp_path, request):
    out = tmp_path / "throughput.json"
    python("throughput.py", "--model", "tiny", "--device", "cpu", "--batch-sizes", "1", "--modes", "stock,invariant",
           "--steps", "3", "--repeats", "1", "--out", str(out))
    rows = read(out, "environment", "runs")["runs"]
    assert [row["mode"] for row in rows] == ["stock", "invariant"]
    assert {"ms_per_row_step", "pass_ms_per_row_step", "vs_stock", "pass_vs_stock"} <= set(rows[0])
    # the long calls run 6 passes: the intervals after the fourth and fifth pass are the steady ones
    assert all(row["steady_intervals"] == 2 and row["steady_pass_ms_per_row_step"] > 0 for row in rows)


def smoke_load_memory(tmp_path, request):
    built, loaded, checkpoint = tmp_path / "built.json", tmp_path / "loaded.json", tmp_path / "checkpoint"
    python("load_memory.py", "--model", "tiny", "--device", "cpu", "--save", str(checkpoint), "--out", str(built))
    python("load_memory.py", "--model", str(checkpoint), "--device", "cpu", "--out", str(loaded))
    keys = ("load_s", "weights_gib", "host_peak_gib", "host_peak_rise_gib", "host_anonymous_peak_gib",
            "host_anonymous_rise_gib", "environment")
    assert read(built, *keys, "save_s")["weights_gib"] > 0 and list(checkpoint.glob("*.safetensors"))
    assert read(loaded, *keys)["largest_shard_gib"] > 0


def smoke_card_limits(tmp_path, request):
    speed, out = tmp_path / "throughput_2l.json", tmp_path / "limits.json"
    speed.write_text(json.dumps({"environment": {"model_source": {"layers": 2}}, "runs": [
        {"mode": "invariant", "batch": 1, "steady_pass_ms_per_row_step": 4.0, "pass_ms_per_row_step": 5.0}]}))
    python("card_limits.py", "--model", "tiny", "--device", "cpu", "--out", str(out), "--speed", str(speed))
    result = read(out, "card", "limits", "speed", "environment")
    assert result["card"]["copy_gb_s"] > 0 and result["card"]["bf16_matmul_tflop_s"] > 0
    (limit,) = result["limits"]
    assert limit["layers"] == 2 and limit["weight_read_ms"] > 0 and limit["compute_ms_per_row"] > 0
    (row,) = result["speed"]
    assert row["bound"] == "weight read" and row["vs_weight_read_limit"] == 4.0 / limit["weight_read_ms"]


def smoke_gpu_run(tmp_path, request):
    out = tmp_path / "run"
    run(["bash", str(BENCHMARKS / "gpu_run.sh"), str(out), "600"], timeout=300, MODEL="tiny", DEVICE="cpu", L6="1",
        L30="2", ONLY="limits,load_30l")
    log = (out / "log.txt").read_text()
    assert "== limits exit=0" in log and "== load_30l exit=0" in log and "SKIPPED" not in log
    assert read(out / "load" / "load_2l.json", "load_s", "weights_gib")["weights_gib"] > 0
    assert read(out / "limits.json", "card", "limits")["limits"][0]["layers"] == 1
    assert "gpu_run.sh" in manifested(out)["command"]


def smoke_needle(tmp_path, request):
    out = tmp_path / "needle.json"
    python("needle.py", "--model", "tiny", "--device", "cpu", "--batch-sizes", "2", "--filler-tokens", "8,16",
           "--steps", "2", "--out", str(out))
    result = read(out, "environment", "mode", "alone", "runs")
    assert [run["identical"] for run in result["runs"]] == [True]  # invariant mode: the needle's bytes are its own


def smoke_tracer_overhead(tmp_path, request):
    out = tmp_path / "tracer.json"
    python("tracer_overhead.py", "--model", "tiny", "--device", "cpu", "--batch-size", "1", "--steps", "2",
           "--repeats", "1", "--out", str(out))
    read(out, "environment", "config", "generate_s", "overhead_pct", "on_accept_s", "trace_build_s")


def smoke_memory_probe(tmp_path, request):
    out = tmp_path / "memory.json"
    python("memory_probe.py", "--model", "tiny", "--layers", "2", "--device", "cpu", "--batch-size", "2",
           "--filler-tokens", "8,16", "--steps", "1", "--out", str(out))
    result = read(out, "config", "environment", "outcome", "phases")
    assert result["outcome"] == "finished"
    assert [phase["at"] for phase in result["phases"]][:3] == ["model loaded", "before encoder", "encoder"]


def smoke_sandbox_overhead(tmp_path, request):
    if shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap (CI installs it: .ci/run)")
    out = tmp_path / "sandbox.json"
    python("sandbox_overhead.py", "--code-synthesis", "1", "--human-eval", "1", "--repeats", "1", "--floor-repeats",
           "1", "--out", str(out))
    result = read(out, "probes", "median_sandbox_s", "median_unprotected_s", "median_overhead_s", "per_probe",
                  "environment")
    assert result["probes"] == 2


def smoke_engine_ray_scaling(tmp_path, request):
    pytest.importorskip("ray")
    out = tmp_path / "scaling.json"
    python("engine_ray_scaling.py", "--prompts", "1", "--configs", "local,ray-1", "--out", str(out), timeout=240)
    result = read(out, "results", "same_summary_everywhere", "environment")
    assert list(result["results"]) == ["local", "ray, 1 worker"] and result["same_summary_everywhere"]


def smoke_profile_generate(tmp_path, request):
    out = tmp_path / "profile.txt"
    python("profile_generate.py", "--model", "tiny", "--device", "cpu", "--modes", "invariant", "--steps", "1",
           "--rows", "5", "--out", str(out))
    text = out.read_text()
    assert "## mode=invariant batch=1" in text and "### phases" in text and "### by CPU time" in text
    manifested(out)


def smoke_compiled_proof(tmp_path, request):
    out = tmp_path / "proof.json"
    python("compiled_proof.py", "--model", "tiny", "--device", "cpu", "--path", "graphs", "--fills", "copies,mixed",
           "--batch-sizes", "1,2", "--steps", "2", "--out", str(out))
    result = read(out, "runs", "summary", "config", "environment")
    assert result["summary"]["compared"] == 2 and result["summary"]["diverged"] == 0


def smoke_h200_kernel_sweep(tmp_path, request):
    out = tmp_path / "kernels"
    python("h200_kernel_sweep.py", "--tiny", "--stages", "sweep,cublas_1k", "--out", str(out),
           TRITON_INTERPRET="1")
    result = read(out / "sweep.json", "shapes", "sweep", "cublas_1k", "environment")
    assert result["sweep"] and not str(result["sweep"]).startswith("failed")


def smoke_h200_speed_run(tmp_path, request):
    out = tmp_path / "speed"
    run(["bash", str(BENCHMARKS / "h200_speed_run.sh"), str(out), "600"], timeout=300, MODEL="tiny", DEVICE="cpu",
        L6="2", L30="2", SMALL="1,2", BIG="2", NEEDLE="2", COMPILED_PATH="graphs",
        ONLY="throughput_6l,proof_6l_stock_mixed,needle_6l")
    log = (out / "log.txt").read_text()
    for stage in ("throughput_6l", "proof_6l_stock_mixed", "needle_6l"):
        assert f"== {stage} exit=0" in log, log
    read(out / "throughput_6l.json", "environment", "runs")
    read(out / "needle_6l.json", "runs")
    assert json.loads((out / "proof" / "stock_6l_mixed" / "batch_study.json").read_text())["summary"]
    assert "h200_speed_run.sh" in manifested(out)["command"]


def smoke_mini_quality(tmp_path, request):
    run_folder = tmp_path / "run"  # the tiny run, marked as trained on the grammar data: its own split is drawn
    shutil.copytree(request.getfixturevalue("tiny_run"), run_folder)
    training = json.loads((run_folder / "training.json").read_text())
    (run_folder / "training.json").write_text(json.dumps({**training, "data": "grammar"}))
    out = tmp_path / "quality.json"
    python("mini_quality.py", "--run", str(run_folder), "--per-task", "1", "--tasks", "add2,add_mixed", "--out", str(out))
    result = read(out, "per_task", "answers", "diffusion", "autoregressive", "environment", "in_template",
                  "heldout_template", "table", "failures")
    assert [answer["task"] for answer in result["answers"]["diffusion"]] == ["add2"]
    assert result["data"] == "grammar"  # the run's own data version
    assert "column by column" in result["in_template"]["answers"]["diffusion"][0]["expected"]  # a worked sum
    assert [a["task"] for a in result["heldout_template"]["answers"]["autoregressive"]] == ["add2", "add_mixed"]
    assert {(row["split"], row["task"], row["n"]) for row in result["table"]} == {
        ("in_template", "add2", 1), ("heldout_template", "add2", 1), ("heldout_template", "add_mixed", 1)}
    manifested(out.with_suffix(".md"))


def smoke_mini_prose_judge(tmp_path, request):
    run_folder, passages = request.getfixturevalue("tiny_run"), request.getfixturevalue("passages")
    quality = run_folder / "quality_diffusion_autoregressive_add2_prose.json"
    out = tmp_path / "judge.json"
    python("mini_prose_judge.py", "--passages", str(passages), "--answers", f"tiny={quality}", "--per-task", "2",
           "--judge", str(run_folder / "autoregressive"), "--out", str(out))
    result = read(out, "per_task", "sets", "environment")
    assert list(result["sets"]) == ["references", "sibling greedy", "sibling sampled T=0.8", "tiny"]
    assert {"sibling_nll", "word_pairs", "frequent_word_share"} <= set(result["sets"]["tiny"]["summary"])


def smoke_mini_token_counts(tmp_path, request):
    passages = request.getfixturevalue("passages")
    out = tmp_path / "counts"
    python("mini_token_counts.py", "--passages", str(passages), "--examples", "40", "--out", str(out))
    assert (out / "token_counts.npy").is_file()
    summary = json.loads((out / "counts.json").read_text())
    assert summary["examples"] == 40 and summary["tokens"] > 0
    manifested(out / "token_counts.npy")


def smoke_mini_train_h200(tmp_path, request):
    run_folder = request.getfixturevalue("tiny_run")  # the fixture is this script's smoke run
    training = read(run_folder / "training.json", "settings", "diffusion", "autoregressive", "environment",
                    manifest=False)  # the manifest names the run's folder
    assert training["settings"]["steps"] == 2
    for model in ("diffusion", "autoregressive"):
        assert (run_folder / model / "config.json").is_file()
    assert json.loads((run_folder / "quality_diffusion_autoregressive_add2_prose.json").read_text())["answers"]
    assert "mini_train_h200.py" in manifested(run_folder)["command"]


def smoke_mini_h200_calls(tmp_path, request):
    passages = request.getfixturevalue("passages")
    state, pack = tmp_path / "state", tmp_path / "pack"
    run(["bash", str(BENCHMARKS / "mini_h200_calls.sh"), str(state), str(passages), str(pack), "200"], timeout=200,
        TINY="1", DEVICE="cpu", STEPS="2", BATCH="4", EXAMPLES="16", COMPILE="", EVAL_TASKS="add2",
        EVAL_PER_TASK="1", STUDIES="0", DATA="grammar")
    for folder, model in (("d", "diffusion"), ("a", "autoregressive")):
        assert json.loads((state / folder / "training.json").read_text())["data"] == "grammar"
        assert list((pack / model).glob("model*.safetensors"))
    assert (pack / "results.tgz").is_file()
    assert json.loads(next((state / "d").glob("quality_*.json")).read_text())["data"] == "grammar"
    assert "STUDIES=0" in manifested(state)["command"]


def smoke_serve_load(tmp_path, request):
    out = tmp_path / "serve"
    python("serve_load.py", "--model", "tiny", "--device", "cpu", "--modes", "invariant,stock", "--batchings",
           "continuous,static", "--levels", "1,4", "--steps", "2", "--repeats", "1", "--out", str(out))
    result = read(out / "serve_load.json", "environment", "config", "runs")
    assert list(result["runs"]) == ["invariant/continuous", "invariant/static", "stock/continuous", "stock/static"]
    for name in ("invariant/continuous", "invariant/static"):
        invariant = result["runs"][name]
        assert invariant["differing"] == 0 and invariant["probe_answers"] == 2 * 4
    level = result["runs"]["invariant/continuous"]["levels"][0]
    assert {"requests_per_s", "tokens_per_s", "canvas_tokens_per_s", "latency_p50_s", "latency_p99_s",
            "first_chunk_p50_s", "first_chunk_p99_s", "batch_sizes"} <= set(level)
    assert level["canvas_tokens_per_s"] >= level["tokens_per_s"] > 0 and level["first_chunk_p50_s"] > 0


def smoke_serve_hostile(tmp_path, request):
    out = tmp_path / "hostile"
    python("serve_hostile.py", "--model", "tiny", "--steps", "2", "--descriptors", "512", "--slow", "600",
           "--seconds", "2", "--read-timeout", "1", "--out", str(out), timeout=600)
    result = read(out / "serve_hostile.json", "environment", "config", "scenarios", "busy_port")
    for name, scenario in result["scenarios"].items():
        assert scenario["slow_clients_connected_before_the_normal_client"] == 600, name
        assert scenario["normal_client"]["/health"]["statuses"].get("200", 0) >= 1, name
        assert scenario["stop"]["exit_status"] == 0, name
        assert scenario["server_log"]["tracebacks"] == 0 == scenario["server_log"]["asyncio_accept_tracebacks"], name
    assert result["scenarios"]["cap"]["server_log"]["accept_error_lines"] == 0
    assert 1 <= result["scenarios"]["flood"]["server_log"]["accept_error_lines"] <= 3  # 600 connections, 512 files
    assert result["busy_port"]["exit_status"] == 2 and result["busy_port"]["output_lines"] == 1
    assert not result["busy_port"]["loaded_the_model"]


def smoke_lm_eval_serve(tmp_path, request):
    pytest.importorskip("lm_eval", reason="lm-eval is in the eval extra")
    pytest.importorskip("tenacity", reason="lm-eval's API models need lm-eval[api]")
    out = tmp_path / "lm_eval"
    python("lm_eval_serve.py", "--model", "tiny", "--steps", "2", "--limit", "2", "--max-tokens", "8", "--out",
           str(out), timeout=600)
    result = read(out / "lm_eval_serve.json", "environment", "config", "runs", "server")
    assert list(result["runs"]) == ["local-completions", "local-chat-completions"]
    for run in result["runs"].values():
        assert run["samples"] == 2 and "exact_match,none" in run["scores"]
    assert result["server"]["/v1/completions 200"] == result["server"]["/v1/chat/completions 200"] == 2
    assert not [key for key in result["server"] if key.startswith("/v1/") and not key.endswith(" 200")]


def smoke_whole_generations(tmp_path, request):
    out = tmp_path / "whole.json"
    python("whole_generations.py", "--model", "tiny", "--device", "cpu", "--prompt-lengths", "8,16", "--batch-sizes",
           "1,2", "--modes", "invariant,stock", "--repeats", "1", "--steps", "2", "--out", str(out))
    result = read(out, "environment", "config", "cells", "largest_batch")
    cells = [(cell["prompt_length"], cell["batch_size"]) for cell in result["cells"]]
    assert cells == [(8, 1), (8, 2), (16, 1), (16, 2)]
    for cell in result["cells"]:
        for mode in ("invariant", "stock"):
            timed = cell["modes"][mode]
            assert timed["calls"] == 1 and timed["passes"] == 2 and timed["peak_memory_gib"] is None
            assert 0 < timed["time_to_first_canvas_s"] <= timed["latency_s"] and 0 <= timed["outside_passes_share"] < 1
    assert result["largest_batch"] == {"invariant": {"8": 2, "16": 2}, "stock": {"8": 2, "16": 2}}


def smoke_noise_wall_time(tmp_path, request):
    plan = tmp_path / "plan"
    run([sys.executable, "-m", "canvaslab.cli.main", "noise-study", "plan", "--model", "tiny", "--design", "smoke", "--out",
         str(plan)])
    out = tmp_path / "wall.json"
    python("noise_wall_time.py", "--plan", str(plan), "--batch-size", "6", "--groups", "2", "--out", str(out))
    result = read(out, "plan_sha256", "groups", "conditions", "seconds", "conditions_per_s", "environment")
    assert result["groups"] == 2 and result["conditions"] == 12
    assert all(seconds > 0 for seconds in result["seconds"].values())


SMOKE = {
    "noise_wall_time.py": smoke_noise_wall_time,
    "throughput.py": smoke_throughput,
    "needle.py": smoke_needle,
    "load_memory.py": smoke_load_memory,
    "card_limits.py": smoke_card_limits,
    "gpu_run.sh": smoke_gpu_run,
    "tracer_overhead.py": smoke_tracer_overhead,
    "memory_probe.py": smoke_memory_probe,
    "sandbox_overhead.py": smoke_sandbox_overhead,
    "engine_ray_scaling.py": smoke_engine_ray_scaling,
    "profile_generate.py": smoke_profile_generate,
    "compiled_proof.py": smoke_compiled_proof,
    "h200_kernel_sweep.py": smoke_h200_kernel_sweep,
    "h200_speed_run.sh": smoke_h200_speed_run,
    "mini_quality.py": smoke_mini_quality,
    "mini_prose_judge.py": smoke_mini_prose_judge,
    "mini_token_counts.py": smoke_mini_token_counts,
    "mini_train_h200.py": smoke_mini_train_h200,
    "mini_h200_calls.sh": smoke_mini_h200_calls,
    "serve_load.py": smoke_serve_load,
    "serve_hostile.py": smoke_serve_hostile,
    "lm_eval_serve.py": smoke_lm_eval_serve,
    "whole_generations.py": smoke_whole_generations,
}


@pytest.mark.parametrize("script", sorted(SMOKE))
def test_the_script_runs_on_the_cpu_and_writes_its_result_with_a_manifest(script, tmp_path, request):
    SMOKE[script](tmp_path, request)


# ---- --help --------------------------------------------------------------------------------------------------

def python_help(script: str, monkeypatch) -> str:
    """``python benchmarks/SCRIPT --help``'s output, run as ``__main__`` in this process (torch is already imported
    here: seconds saved per script); it must exit 0."""
    path = BENCHMARKS / script
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setattr(sys, "argv", [str(path), "--help"])
    environment, modules = dict(os.environ), set(sys.modules)
    printed = io.StringIO()
    try:
        with redirect_stdout(printed), pytest.raises(SystemExit) as exited:
            runpy.run_path(str(path), run_name="__main__")
    finally:
        for name in set(os.environ) - set(environment):  # a script's os.environ.setdefault stays in the script
            del os.environ[name]
        for name in set(sys.modules) - modules:  # the sibling scripts it imported (needle, tracer_overhead)
            if str(BENCHMARKS) in str(getattr(sys.modules[name], "__file__", "") or ""):
                del sys.modules[name]
    assert exited.value.code in (0, None)
    return printed.getvalue()


@pytest.mark.parametrize("script", [name for name in sorted(SMOKE) if name.endswith(".py")])
def test_the_python_script_says_what_it_measures_with_help(script, monkeypatch):
    printed = python_help(script, monkeypatch)
    first_line = ast.get_docstring(ast.parse((BENCHMARKS / script).read_text())).splitlines()[0]
    assert first_line in printed and "--out" in printed


@pytest.mark.parametrize("script", [name for name in sorted(SMOKE) if name.endswith(".sh")])
def test_the_shell_script_prints_its_usage_with_help(script):
    for flag in ("--help", "-h"):
        done = subprocess.run(["bash", str(BENCHMARKS / script), flag], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0 and f"bash benchmarks/{script}" in done.stdout and not done.stderr


# ---- benchmarks/README.md ----------------------------------------------------------------------------------

def readme_commands() -> list[tuple[str, list[str]]]:
    """(script, options) of every ``python benchmarks/...`` or ``bash benchmarks/...`` command in a code span."""
    text = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    return [(script, re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", arguments))
            for script, arguments in re.findall(r"`(?:python|bash) benchmarks/([\w.]+)([^`]*)`", text)]


def test_the_readme_shows_how_to_run_every_script():
    assert sorted({script for script, _ in readme_commands()}) == scripts()


@pytest.mark.parametrize("script, options", readme_commands(), ids=[script for script, _ in readme_commands()])
def test_the_readme_command_uses_options_the_script_has(script, options, monkeypatch):
    if script.endswith(".py"):
        printed = python_help(script, monkeypatch)
    else:
        printed = subprocess.run(["bash", str(BENCHMARKS / script), "--help"], capture_output=True, text=True,
                                 timeout=30).stdout
    assert [option for option in options if not re.search(rf"{option}(?![\w-])", printed)] == []


# ---- the suite covers every script; scripts use public names only -------------------------------------------

def test_every_script_in_benchmarks_has_a_smoke_run():
    assert scripts() == sorted(SMOKE), "add a smoke run to tests/benchmarks/test_smoke.py (or remove the entry)"


def private_canvaslab_names(source: str) -> list[str]:
    """``_private`` names a script takes from canvaslab: imported, or reached as an attribute of something it
    imported from canvaslab (a module or a class). Dunder names are public protocol."""
    def private(name: str) -> bool:
        return any(part.startswith("_") and not (part.startswith("__") and part.endswith("__"))
                   for part in name.split("."))

    found, bound = [], set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "canvaslab":
            for alias in node.names:
                bound.add(alias.asname or alias.name)
                if private(node.module) or private(alias.name):
                    found.append(f"from {node.module} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "canvaslab":
                    bound.add(alias.asname or "canvaslab")
                    if private(alias.name):
                        found.append(f"import {alias.name}")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and private(node.attr):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in bound:
                found.append(f"{ast.unparse(node)}")
    return found


def test_the_private_name_check_finds_imports_and_attributes():
    source = ("from canvaslab.training.evaluate import _words\nimport canvaslab._x\n"
              "from canvaslab.generation.fused_step import CapturedStep\nCapturedStep._replay\n"
              "from canvaslab.invariant import triton_kernels as tk\ntk._kernel(1)\nCapturedStep.__call__\n"
              "import torch\ntorch.cuda.memory._snapshot()\n")
    assert private_canvaslab_names(source) == ["from canvaslab.training.evaluate import _words", "import canvaslab._x",
                                               "CapturedStep._replay", "tk._kernel"]


@pytest.mark.parametrize("script", scripts())
def test_the_script_uses_only_public_canvaslab_names(script):
    source = (BENCHMARKS / script).read_text()
    if script.endswith(".py"):
        assert private_canvaslab_names(source) == []
    else:  # the shell scripts' python -c snippets
        assert re.findall(r"from canvaslab[\w.]* import [^\n']*\b_[a-z]\w*|canvaslab[\w.]*\._[a-z]\w*", source) == []


@pytest.mark.parametrize("bad, said", [
    (["--examples", "0"], "--examples 0"),
    (["--passages", "missing.txt"], "no such file"),
    (["--mixture", "nosuchtask=1"], "no task 'nosuchtask'"),
])
def test_the_token_counts_refuse_bad_input_in_one_line(tmp_path, bad, said):
    passages = tmp_path / "prose.txt"
    passages.write_text("A river runs to the sea.\n")
    args = [sys.executable, str(BENCHMARKS / "mini_token_counts.py"), "--passages", str(passages),
            "--out", str(tmp_path / "out"), *bad]
    done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and said in lines[0], done.stderr[-2000:]
    assert not (tmp_path / "out").exists()


def refused_before_work(script: str, args: list[str], out: Path, said: str) -> None:
    """``script`` with ``args`` exits 2 with ``said`` on its last line, no traceback, and ``out`` not written."""
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), *args, "--out", str(out)], cwd=out.parent,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and said in done.stderr.strip().splitlines()[-1], done.stderr[-2000:]
    assert "Traceback" not in done.stderr and not out.exists()


def test_profile_steady_on_a_cpu_is_one_line_before_any_model_loads(tmp_path):
    refused_before_work("profile_generate.py", ["--steady", "--device", "cpu"], tmp_path / "p.txt",
                        "--steady needs --device cuda")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="side by side needs a core per batching")
def test_serve_load_side_by_side_runs_the_batchings_at_once_on_pinned_cores_into_one_result(tmp_path):
    out = tmp_path / "serve"
    python("serve_load.py", "--model", "tiny", "--device", "cpu", "--modes", "invariant", "--batchings",
           "continuous,static", "--levels", "1", "--steps", "2", "--repeats", "1", "--side-by-side", "--out", str(out))
    result = read(out / "serve_load.json", "environment", "config", "runs", "side_by_side")
    assert list(result["runs"]) == ["invariant/continuous", "invariant/static"]
    assert all(run["differing"] == 0 and run["probe_answers"] == 4 for run in result["runs"].values())
    assert len(set(result["side_by_side"]["cores"])) == 2
    assert "--side-by-side" in manifested(out / "serve_load.json")["command"]
    assert sorted(path.name for path in out.iterdir()) == ["result.json", "serve_load.json"]  # no arm left behind


def test_serve_load_side_by_side_is_refused_off_the_cpu_in_one_line(tmp_path):
    refused_before_work("serve_load.py", ["--side-by-side", "--device", "cuda"], tmp_path / "out",
                        "--side-by-side pins CPU cores")


def test_the_anonymous_peak_sees_a_host_copy_made_and_freed_inside_the_block():
    anonymous_peak = runpy.run_path(str(BENCHMARKS / "load_memory.py"))["AnonymousPeak"]
    read_anonymous = anonymous_peak.read
    with anonymous_peak(interval_s=0.0005) as peak:
        copy = bytearray(256 * 2 ** 20)  # 256 MiB of anonymous memory, every page touched
        copy[:: 4096] = b"x" * len(copy[:: 4096])
        deadline = time.monotonic() + 120  # the sampler thread's turn may come late on a loaded machine
        while (peak.peak is None or peak.peak - peak.before < 0.2) and time.monotonic() < deadline:
            time.sleep(0.01)
        del copy
        released = read_anonymous()
    assert peak.peak - peak.before >= 0.2 > released - peak.before  # GiB: the copy seen, and gone once freed
