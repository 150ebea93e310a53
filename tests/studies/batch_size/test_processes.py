"""The study's results do not depend on the Python process that made them.

A study killed after its first run and resumed by a process with another ``PYTHONHASHSEED`` must report
what an uninterrupted run reports (transformers runs ``rotary_emb`` in hash order, which once changed
the signatures). The repeat-B=1 control can run in a fresh process, and there it sees what a same-process
repeat cannot.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import canvaslab
from canvaslab.capture.recorder import Recorder
from canvaslab.cli.main import main
from canvaslab.errors import CanvaslabError
from canvaslab.io import read_json
from canvaslab.studies.batch_size import BatchStudySettings
from canvaslab.studies.batch_size.repeat_control import fresh_process_signature, other_hash_seed
from canvaslab.studies.batch_size.study import PARTIAL_FILE, RESULT_FILE, repeat_signature

SRC = str(Path(canvaslab.__file__).resolve().parents[1])
STEPS = 2

# One prompt at B = 1, 2, 3 into folder argv[1]. With argv[2] = N > 0 the process dies like kill -9 (no
# cleanup, no exception handling) when the (N+1)-th batched run starts, after N runs were saved.
DRIVER = f"""
import os, sys
from canvaslab.models import load_model
from canvaslab.prompts import builtin_prompts
from canvaslab.studies.batch_size import BatchStudySettings, run_batch_study
kill_after, started = int(sys.argv[2]), []
def progress(message):
    if "B=1" not in message:
        if kill_after and len(started) == kill_after:
            os._exit(137)
        started.append(message)
settings = BatchStudySettings(batch_sizes=[1, 2, 3], repeat_control="same-process",
                              generation={{"max_denoising_steps": {STEPS}}})
run_batch_study(load_model("tiny"), builtin_prompts(1), settings, out_dir=sys.argv[1], progress=progress)
"""


def _start(out_dir, hash_seed: str, kill_after: int = 0) -> subprocess.Popen:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed,
           "PYTHONPATH": os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-c", DRIVER, str(out_dir), str(kill_after)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait(proc: subprocess.Popen) -> int:
    _, err = proc.communicate(timeout=900)
    assert proc.returncode in (0, 137), err[-2000:]
    return proc.returncode


def test_study_killed_and_resumed_under_another_hash_seed_matches_an_uninterrupted_one(tmp_path):
    # Hash seeds 0 and 1 run the two rotary_emb calls of a pass in opposite orders (tests/capture).
    killed, whole = _start(tmp_path / "resumed", "0", kill_after=1), _start(tmp_path / "whole", "1")
    assert _wait(killed) == 137 and _wait(whole) == 0
    assert len(read_json(tmp_path / "resumed" / PARTIAL_FILE)["runs"]) == 1  # B=2 saved, then killed
    assert _wait(_start(tmp_path / "resumed", "1")) == 0
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
    main(["batch-study", "--prompts", "1", "--batch-sizes", "1", "--steps", str(STEPS),
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
