"""A call's identity in the capture is the same in every Python process.

transformers calls DiffusionGemma's ``rotary_emb`` once per element of ``set(layer_types)``, so the two
calls of a pass run in an order set by ``PYTHONHASHSEED``. Their values do not depend on that order, and
neither may their keys: signatures are compared across processes (a resumed study, a repeat control in
a fresh process).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import canvaslab
from canvaslab.capture import Recorder
from canvaslab.generation import generate

SETTINGS = {"max_denoising_steps": 2}
SRC = str(Path(canvaslab.__file__).resolve().parents[1])

# Prints one capture's {pass|name@occurrence: output digest}, and the order in which the two rotary_emb
# calls of the first pass ran (their outputs), as JSON.
DUMP = """
import json
from canvaslab.capture import Recorder
from canvaslab.generation import generate
from canvaslab.models import load_model
tiny = load_model("tiny")
ids = tiny.tokenizer("the man said that the water in the river was cold")["input_ids"]
recorder = Recorder(tiny.model, 1)
with recorder:
    generate(tiny, [ids], seed=2, observers=[recorder], generation={"max_denoising_steps": 2})
records = recorder.capture.records
print(json.dumps({"outputs": {f"{r.pass_key.label()}|{r.name}@{r.occurrence}": r.output for r in records},
                  "rotary_order": [r.output for r in records if "rotary_emb" in r.name][:2]}))
"""


def _outputs_by_key(capture):
    return {(r.pass_key, r.name, r.occurrence): r.output for r in capture.records}


def _capture_with_layer_type_order(tiny, ids, order):
    """Capture with transformers' per-layer-type loops forced into ``order`` (what a hash seed does)."""
    owners = [tiny.model.model.encoder.language_model, tiny.model.model.decoder]
    saved = [owner.unique_layer_types for owner in owners]
    try:
        for owner in owners:
            owner.unique_layer_types = list(order)
        recorder = Recorder(tiny.model, 1)
        with recorder:
            generate(tiny, [ids], seed=2, observers=[recorder], generation=SETTINGS)
        return recorder.capture
    finally:
        for owner, value in zip(owners, saved):
            owner.unique_layer_types = value


def test_call_keys_do_not_depend_on_layer_type_iteration_order(tiny, prompt_ids):
    types = sorted(set(tiny.model.config.text_config.layer_types))
    assert len(types) == 2  # the tiny model has both kinds, so the loop really runs twice
    forward = _capture_with_layer_type_order(tiny, prompt_ids, types)
    backward = _capture_with_layer_type_order(tiny, prompt_ids, types[::-1])
    assert _outputs_by_key(forward) == _outputs_by_key(backward)
    rotary = {name for _, name, _ in _outputs_by_key(forward) if "rotary_emb" in name}
    assert rotary == {f"model.{part}.rotary_emb[{kind}]" for part in ("encoder.language_model", "decoder")
                      for kind in types}


def test_capture_is_identical_under_different_hash_seeds():
    # Two seeds that run the two calls in opposite orders (asserted below): the in-process test above
    # covers the orders themselves; this one checks that nothing else in a process changes a key or value.
    seeds = ["0", "1"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-c", DUMP], env={**env, "PYTHONHASHSEED": seed},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for seed in seeds]
    dumps = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]
        dumps.append(json.loads(out.strip().splitlines()[-1]))
    # the seeds really ran the two rotary_emb calls in both orders ...
    assert len({tuple(dump["rotary_order"]) for dump in dumps}) == 2
    # ...and every call still has the same key and value
    assert len(dumps[0]["outputs"]) > 100
    assert all(dump["outputs"] == dumps[0]["outputs"] for dump in dumps[1:])
