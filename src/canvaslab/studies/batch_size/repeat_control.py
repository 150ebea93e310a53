"""The batch-size study's repeat control, in this process or in a fresh one.

The control re-runs the first prompt at B=1 and checks that its signature equals the reference's: that
the machine is deterministic at all, so differences between batch sizes are the batch's doing. Run in
the study's own process it cannot see what changes from one process to the next (the hash seed, which
sets the order of some of transformers' loops, lazily chosen kernels, allocator state). A study that was
killed and resumed compares signatures made in different processes, so by default the control runs in a
fresh interpreter with another ``PYTHONHASHSEED``, loading the model the same way.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from canvaslab.choices import REPEAT_CONTROLS, one_of
from canvaslab.errors import CanvaslabError

_HASH_SEEDS = 1 << 32  # PYTHONHASHSEED runs from 0 to 2**32 - 1
_CHILD = "from canvaslab.studies.batch_size.repeat_control import main; main()"


def check_repeat_control(value: str) -> None:
    one_of("--repeat-control", value, REPEAT_CONTROLS)


def this_hash_seed() -> str:
    """This process's ``PYTHONHASHSEED``; "random" when unset (Python then draws one it does not reveal)."""
    return os.environ.get("PYTHONHASHSEED") or "random"


def other_hash_seed(seed: str) -> str:
    """A hash seed other than ``seed`` (when ``seed`` is known), chosen deterministically."""
    return str((int(seed) + 1) % _HASH_SEEDS) if seed.isdigit() else "0"


def model_spec(loaded) -> dict[str, Any]:
    """The ``load_model`` arguments that rebuild ``loaded`` in another process."""
    source = loaded.source
    spec = source.get("name") if source.get("kind") == "preset" else source.get("path")
    if spec is None:
        raise CanvaslabError("the fresh-process repeat control needs a model loaded by canvaslab.models.load_model; "
                             "use --repeat-control same-process")
    arguments = {"spec": spec, "dtype": str(loaded.model.dtype).removeprefix("torch."), "device": str(loaded.device),
                 "layers": source.get("layers"), "seed": source.get("seed", 0)}
    # trained weights are named by their fingerprint (canvaslab.api.models.model_record); random ones by the arguments
    return arguments if source.get("weights") is None else {**arguments, "weights": source["weights"]}


def fresh_process_signature(loaded, settings, prompt_ids: list[int]) -> dict[str, str]:
    """Run B=1 of ``prompt_ids`` in a new interpreter; its capture signature and hash seed."""
    seed = other_hash_seed(this_hash_seed())
    source_root = str(Path(__file__).resolve().parents[3])  # this canvaslab, not another install
    env = {**os.environ, "PYTHONHASHSEED": seed,
           "PYTHONPATH": os.pathsep.join(filter(None, [source_root, os.environ.get("PYTHONPATH")]))}
    request = {"model": model_spec(loaded), "settings": asdict(settings), "prompt_ids": list(prompt_ids),
               "parent": os.getpid()}
    done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(request), capture_output=True,
                          text=True, env=env)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise CanvaslabError(f"the fresh-process repeat control failed (exit {done.returncode}): {last}")
    return {"signature": json.loads(done.stdout.strip().splitlines()[-1])["signature"], "python_hash_seed": seed}


def run_repeat_control(loaded, settings, prompt_ids: list[int], reference_signature: str,
                       same_process_signature: Callable[[], str]) -> dict[str, Any]:
    """The control's record for the study JSON: how it ran and whether it matched the reference."""
    if settings.repeat_control == "fresh-process":
        repeat = fresh_process_signature(loaded, settings, prompt_ids)
    else:
        repeat = {"signature": same_process_signature(), "python_hash_seed": this_hash_seed()}
    return {"process": settings.repeat_control, "python_hash_seed": {"study": this_hash_seed(),
                                                                      "repeat": repeat["python_hash_seed"]},
            "identical": repeat["signature"] == reference_signature}


def die_with_parent(parent: int) -> None:
    """Have the kernel kill this process when its parent dies: a study killed with ``kill -9`` must not
    leave its control running on, holding a second copy of the model (Linux's PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(1)


def main() -> None:
    """The fresh process: read the request on stdin, print ``{"signature": ...}`` as the last line."""
    request = json.load(sys.stdin)
    die_with_parent(request["parent"])
    from canvaslab.models import load_study_model
    from canvaslab.studies.batch_size.study import BatchStudySettings, repeat_signature

    loaded = load_study_model(request["model"])
    settings = BatchStudySettings(**request["settings"])
    print(json.dumps({"signature": repeat_signature(loaded, settings, request["prompt_ids"])}))
