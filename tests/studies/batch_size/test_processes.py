"""The study's results do not depend on the Python process that made them.

A study killed after its first run and resumed by a process with another ``PYTHONHASHSEED`` must report
what an uninterrupted run reports (transformers runs ``rotary_emb`` in hash order, which once changed
the signatures). The repeat-B=1 control can run in a fresh process, and there it sees what a same-process
repeat cannot.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import canvaslab
from canvaslab.capture.recorder import Recorder
from canvaslab.cli.main import main
from canvaslab.errors import CanvaslabError
from canvaslab.io import read_json
from canvaslab.studies.batch_size import BatchStudySettings
from canvaslab.studies.batch_size.repeat_control import fresh_process_signature, other_hash_seed
from canvaslab.studies.batch_size.study import RESULT_FILE, repeat_signature

SRC = str(Path(canvaslab.__file__).resolve().parents[1])
STEPS = 2

# Two prompts at B = 1, 2 into folder argv[1]; prints the engine's outcome as its last line.
DRIVER = f"""
import json, sys
from canvaslab.models import load_model
from canvaslab.prompts import builtin_prompts
from canvaslab.studies.batch_size import BatchStudySettings
from canvaslab.studies.batch_size.study import BatchSizeStudy, model_plan
from canvaslab.studies.engine import run_study
settings = BatchStudySettings(batch_sizes=[1, 2], repeat_control="same-process",
                              generation={{"max_denoising_steps": {STEPS}}})
loaded = load_model("tiny")
study = BatchSizeStudy(model_plan(loaded), builtin_prompts(2), settings, loaded=loaded)
_, outcome = run_study(study, sys.argv[1])
print(json.dumps({{"ran": outcome.ran, "skipped": outcome.skipped, "failed": len(outcome.failed)}}))
"""


def _start(out_dir, hash_seed: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed,
           "PYTHONPATH": os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-c", DRIVER, str(out_dir)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _outcome(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


def _records(folder: Path) -> list[str]:
    """The units stored in ``folder`` (record files are named by a hash of the unit id, which they hold)."""
    return sorted(read_json(path)["unit"] for path in (folder / "store" / "records").glob("*.json"))


def test_study_sigkilled_mid_unit_and_resumed_under_another_hash_seed_matches_an_uninterrupted_one(tmp_path):
    """kill -9 while the second prompt runs: the first prompt's record survives, the second is run once more,
    and the summary is an uninterrupted run's (made under another hash seed: hash order must not matter)."""
    killed = _start(tmp_path / "resumed", "0")
    deadline = time.monotonic() + 600
    while not _records(tmp_path / "resumed") and time.monotonic() < deadline and killed.poll() is None:
        time.sleep(0.05)
    os.kill(killed.pid, signal.SIGKILL)  # the first prompt is stored; the second is running
    killed.communicate(timeout=60)
    assert killed.returncode == -signal.SIGKILL and _records(tmp_path / "resumed") == ["builtin-0"]
    assert _outcome(_start(tmp_path / "resumed", "1")) == {"ran": 1, "skipped": 1, "failed": 0}
    assert _outcome(_start(tmp_path / "whole", "1")) == {"ran": 2, "skipped": 0, "failed": 0}
    resumed, uninterrupted = read_json(tmp_path / "resumed" / RESULT_FILE), read_json(tmp_path / "whole" / RESULT_FILE)
    assert resumed["equivalence_classes_per_prompt"] == uninterrupted["equivalence_classes_per_prompt"]
    assert resumed["summary"] == uninterrupted["summary"]
    assert resumed["runs"] == uninterrupted["runs"]  # signatures, origins, texts: all of it


def _bump_lm_head(model):
    """A state of this process only: one logit of row 0 changed on every pass."""
    def bump(module, args, output):
        output = output.clone()
        output.view(-1)[7] += 1.0
        return output
    return model.lm_head.register_forward_hook(bump)


def test_fresh_process_repeat_sees_what_a_same_process_repeat_cannot(tiny, prompt_ids):
    settings = BatchStudySettings(batch_sizes=[1], generation={"max_denoising_steps": STEPS})
    clean = repeat_signature(tiny, settings, prompt_ids)
    handle = _bump_lm_head(tiny.model)
    try:
        perturbed = repeat_signature(tiny, settings, prompt_ids)
        perturbed_again = repeat_signature(tiny, settings, prompt_ids)
    finally:
        handle.remove()
    fresh = fresh_process_signature(tiny, settings, prompt_ids)
    assert perturbed != clean and perturbed_again == perturbed  # the same-process repeat is blind to it
    assert fresh["signature"] == clean  # identical across processes and hash seeds...
    assert fresh["signature"] != perturbed  # ...and the fresh process does not share this one's state
    assert fresh["python_hash_seed"] == other_hash_seed(os.environ.get("PYTHONHASHSEED") or "random")


def test_other_hash_seed_differs_from_a_known_one():
    assert other_hash_seed("0") == "1" and other_hash_seed("4294967295") == "0"
    assert other_hash_seed("random").isdigit()


def test_repeat_control_choice_is_recorded(tmp_path):
    main(["batch-study", "--prompts", "1", "--batch-sizes", "1,2", "--steps", str(STEPS),
          "--repeat-control", "same-process", "--out", str(tmp_path)])
    result = read_json(tmp_path / RESULT_FILE)
    assert result["config"]["settings"]["repeat_control"] == "same-process"
    assert result["repeat_control"]["process"] == "same-process"
    assert result["repeat_control"]["identical"] is result["summary"]["repeat_control_identical"] is True


def test_unknown_repeat_control_is_refused_before_any_work(capsys, monkeypatch):
    monkeypatch.setattr(Recorder, "__enter__", lambda self: pytest.fail("work started"))
    with pytest.raises(SystemExit) as exit_info:
        main(["batch-study", "--repeat-control", "other-process"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "--repeat-control 'other-process'" in err and len(err.splitlines()) == 1


def test_fresh_process_control_needs_a_reloadable_model(tiny, prompt_ids, monkeypatch):
    monkeypatch.setattr(tiny, "source", {"kind": "in-memory"})
    with pytest.raises(CanvaslabError, match="same-process"):
        fresh_process_signature(tiny, BatchStudySettings(batch_sizes=[1]), prompt_ids)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state


_CONTROL = """import os, sys, time
from canvaslab.studies.batch_size.repeat_control import die_with_parent
die_with_parent(os.getppid())
print("ready", flush=True)
time.sleep(120)
"""
_PARENT = f"""import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", {_CONTROL!r}])
print(child.pid, flush=True)
child.wait()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_fresh_process_control_dies_with_a_killed_study():
    env = {**os.environ, "PYTHONPATH": SRC}
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True, env=env)
    child = int(parent.stdout.readline())
    assert parent.stdout.readline().strip() == "ready"  # the control is running, its death wish set
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child)


def test_the_control_exits_at_once_when_its_parent_is_already_gone():
    request = json.dumps({"parent": -1, "model": {}, "settings": {}, "prompt_ids": []})
    done = subprocess.run([sys.executable, "-c", "from canvaslab.studies.batch_size.repeat_control import main; main()"],
                          input=request, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC},
                          timeout=60)
    assert done.returncode == 1 and done.stdout == "" and done.stderr == ""  # gone before loading anything
