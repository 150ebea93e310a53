"""The options every command shares, and the one set of rules that checks their values.

Every check here runs while the command line is parsed, before anything is imported or loaded (torch and
transformers take seconds to import, a model minutes to load): a bad value ends in one line naming the
option and what it allows (``CanvaslabError``, printed by ``cli.app``) and exit code 2. Values that need
a file or the model (a prompt file's content, ``--layers`` against the model's depth) are checked by the
loaders, still before any weights are read. The allowed choices are spelled out here so that checking them
needs no import of the layers that use them; ``tests/cli`` holds them equal to those layers' own lists.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Annotated, Callable, Optional, Sequence

import typer

from canvaslab.errors import CanvaslabError

MAX_SEED = 2**63 - 1  # seeds are stored in int64 tensors and JSON; larger ones are not portable
MAX_BATCH = 4096
BUILTIN_PROMPT_COUNT = 16  # canvaslab.prompts.BUILTIN_PROMPTS (held equal by a test)

DTYPES = ("auto", "float32", "bfloat16", "float16")
RNGS = ("row", "stock")
MODES = ("stock", "rowwise", "invariant")
FILLS = ("copies", "mixed")
PRESET_NAMES = ("tiny", "real-shapes")  # canvaslab.models.PRESETS (held equal by a test)


def option_name(param) -> str:
    """``--steps`` for an option, ``TRACES`` for an argument: how the user typed or saw it."""
    return param.opts[0] if param.param_type_name == "option" else (param.metavar or param.name).upper()


def _bad(param, value, allowed: str) -> CanvaslabError:
    return CanvaslabError(f"{option_name(param)} {value}: {allowed}")


# ---- numbers -----------------------------------------------------------------------------------------

def whole_number(minimum: int, maximum: Optional[int] = None) -> Callable:
    """A callback accepting whole numbers in ``[minimum, maximum]`` (None, an unset option, passes)."""

    def check(ctx, param, value):
        if value is not None and (value < minimum or (maximum is not None and value > maximum)):
            allowed = f"from {minimum} to {maximum}" if maximum is not None else f"{minimum} or more"
            raise _bad(param, value, f"must be a whole number {allowed}")
        return value

    return check


def positive_number(ctx, param, value):
    if value is not None and not value > 0:  # also refuses nan
        raise _bad(param, value, "must be a number above 0")
    return value


# ---- choices and lists -------------------------------------------------------------------------------

def one_of(choices: Sequence[str]) -> Callable:
    def check(ctx, param, value):
        if value is not None and value not in choices:
            raise _bad(param, repr(value), f"must be one of {', '.join(choices)}")
        return value

    return check


def parse_batch_sizes(spec: str) -> list[int]:
    """``"1,2,3,4"`` -> ``[1, 2, 3, 4]``; B=1 is always included, as the reference."""
    try:
        sizes = [int(part) for part in spec.split(",")]
    except ValueError:
        raise CanvaslabError(f"--batch-sizes {spec!r}: give whole numbers separated by commas, e.g. 1,2,3,4") from None
    bad = [size for size in sizes if not 1 <= size <= MAX_BATCH]
    if bad:
        raise CanvaslabError(f"--batch-sizes {spec}: {bad[0]} is impossible; batch sizes run from 1 to {MAX_BATCH}")
    sizes = sorted(set(sizes) | {1})
    if len(sizes) < 2:
        raise CanvaslabError(f"--batch-sizes {spec}: give a size other than 1 too; B=1 is the reference every "
                             "other size is compared with, e.g. 1,2,3,4")
    return sizes


def batch_sizes(ctx, param, value):
    parse_batch_sizes(value)
    return value


def prompts(ctx, param, value):
    """A count of built-in prompts, or a file (its content is checked when it is read)."""
    if re.fullmatch(r"\s*[+-]?\d+\s*", value) and not 1 <= int(value) <= BUILTIN_PROMPT_COUNT:
        raise _bad(param, value, f"the built-in set has 1 to {BUILTIN_PROMPT_COUNT} prompts; pass a file for more")
    return value


# ---- paths -------------------------------------------------------------------------------------------

def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not os.path.lexists(path):
        path = path.parent
    return path


def _probe_writable(folder: Path) -> Optional[str]:
    """Why nothing can be written in ``folder`` (None if a file can be created there).

    A real probe, not permission bits: root ignores those, but not a read-only mount or /proc."""
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".canvaslab-probe-")
    except OSError as error:
        return error.strerror or str(error)
    os.close(fd)
    os.unlink(name)
    return None


def _check_can_create(param, path: Path) -> None:
    existing = _nearest_existing(path)
    if not existing.is_dir():
        raise _bad(param, path, f"{existing} is a file, so nothing can be created under it")
    why = _probe_writable(existing)
    if why is not None:
        raise _bad(param, path, f"cannot write in {existing} ({why})")


def writable_folder(ctx, param, value):
    """An output folder: an existing folder or one that can be created, where files can be written."""
    if value is not None:
        if value.exists() and not value.is_dir():
            raise _bad(param, value, "is a file; give a folder")
        _check_can_create(param, value)
    return value


def existing_writable_folder(ctx, param, value):
    """A study folder that must already exist (written by an earlier step) and will be written to."""
    if not value.is_dir():
        raise _bad(param, value, "is not a folder" if value.exists() else "does not exist")
    _check_can_create(param, value)
    return value


def writable_file(ctx, param, value):
    """An output file: not a folder, and its folder exists or can be created."""
    if value is not None:
        if value.is_dir():
            raise _bad(param, value, "is a folder; give a file path")
        _check_can_create(param, value)
    return value


def readable_file(suffixes: Sequence[str] = ()) -> Callable:
    def check(ctx, param, value):
        if value is None:
            return None
        if suffixes and value.suffix not in suffixes:
            raise _bad(param, value, f"must be a {' or '.join(suffixes)} file")
        if not value.is_file():
            raise _bad(param, value, "is a folder, not a file" if value.exists() else "no such file")
        try:
            with value.open("rb") as handle:
                handle.read(1)
        except OSError as error:
            raise _bad(param, value, f"cannot be read ({error.strerror})") from None
        return value

    return check


# ---- models ------------------------------------------------------------------------------------------

def model(ctx, param, value):
    """An installed model's name (``mini``) is checked here, from its package's entry point (no torch): one of
    canvaslab's models that is not installed, or a broken package, is one line before anything loads."""
    if value is not None and value not in PRESET_NAMES:
        from canvaslab.models.registry import find_diffusion_model

        find_diffusion_model(value)
    return value


# ---- the shared options ------------------------------------------------------------------------------

Model = Annotated[str, typer.Option("--model", help="preset (tiny, real-shapes), installed model (mini), a local "
                                                    "checkpoint directory, or a config.json (random weights)",
                                    callback=model)]
Dtype = Annotated[str, typer.Option("--dtype", help=f"{', '.join(DTYPES)} (auto: the model's)",
                                    callback=one_of(DTYPES))]
Device = Annotated[str, typer.Option("--device", help="cpu, cuda, cuda:N or auto")]
Layers = Annotated[Optional[int], typer.Option("--layers", help="keep the first N decoder/encoder layers",
                                               callback=whole_number(1))]
ModelSeed = Annotated[int, typer.Option("--model-seed", help="seed of the random weights (presets and config.json)",
                                        callback=whole_number(0, MAX_SEED))]
Seed = Annotated[int, typer.Option("--seed", help="generation seed", callback=whole_number(0, MAX_SEED))]
Rng = Annotated[str, typer.Option("--rng", help="row: per-row random streams; stock: transformers' own sampling",
                                  callback=one_of(RNGS))]
Mode = Annotated[str, typer.Option("--mode", help="stock | rowwise (the seeds' row-by-row fix) | invariant "
                                                  "(batch-invariant ops)", callback=one_of(MODES))]
Steps = Annotated[Optional[int], typer.Option("--steps", help="max denoising steps (default: the model's)",
                                              callback=whole_number(1))]
MaxNewTokens = Annotated[Optional[int], typer.Option("--max-new-tokens", help="tokens to generate (default: the model's)",
                                                     callback=whole_number(1))]
BatchSizes = Annotated[str, typer.Option("--batch-sizes", help="comma-separated; B=1 is the reference",
                                         callback=batch_sizes)]
Bootstrap = Annotated[int, typer.Option("--bootstrap", help="prompt-clustered bootstrap resamples; 0 = no CIs",
                                        callback=whole_number(0))]


def study_model(model: str, dtype: str, device: str, layers: Optional[int], seed: int) -> dict:
    """The ``--model`` arguments as a study's plan records them, with the fingerprint of the trained weights
    behind the name (``canvaslab.models.weights``): a folder resumed with retrained weights is another plan.
    Random weights have none, and their plans stay as before it existed (their folders still resume)."""
    from canvaslab.models.weights import weights_fingerprint

    spec = {"spec": model, "dtype": dtype, "device": device, "layers": layers, "seed": seed}
    weights = weights_fingerprint(model)
    return spec if weights is None else {**spec, "weights": weights}


def generation_overrides(steps: Optional[int], max_new_tokens: Optional[int]) -> dict:
    return {"max_denoising_steps": steps, "max_new_tokens": max_new_tokens}


# ---- the study engine's options (every study command) ------------------------------------------------

EXECUTORS = ("local", "ray")  # canvaslab.studies.engine.EXECUTORS (held equal by a test)


def executor(ctx, param, value):
    one_of(EXECUTORS)(ctx, param, value)
    if value == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise _bad(param, value, "needs Ray: pip install 'canvaslab[ray]'")
    return value


Executor = Annotated[str, typer.Option("--executor", help="local: this process, one model; ray: one model-holding "
                                                          "worker per GPU (or CPU) of a Ray cluster",
                                       callback=executor)]
RayAddress = Annotated[Optional[str], typer.Option("--ray-address", help="join this Ray cluster (auto: the one "
                                                                         "`ray start` began); default: a local one")]
Workers = Annotated[Optional[int], typer.Option("--workers", help="Ray workers (default: one per GPU, else per CPU)",
                                                callback=whole_number(1, MAX_BATCH))]
Retries = Annotated[int, typer.Option("--retries", help="times a failed unit is retried before it is recorded "
                                                        "as failed", callback=whole_number(0, 100))]
Fresh = Annotated[bool, typer.Option("--fresh", help="start over: the folder's old study is kept under a new name "
                                                     "(DIR.1, ...)")]


def engine_options(executor: str, ray_address: Optional[str], workers: Optional[int], retries: int,
                   fresh: bool) -> dict:
    """``run_study``'s keyword arguments; Ray-only options without ``--executor ray`` are refused."""
    if executor != "ray" and (ray_address is not None or workers is not None):
        raise CanvaslabError(f"{'--ray-address' if ray_address is not None else '--workers'} needs --executor ray")
    return {"executor": executor, "ray_address": ray_address, "workers": workers, "retries": retries, "fresh": fresh}


def finish(console, outcome, unit: str) -> None:
    """The study's final line; failed units (after their retries) end the command with exit code 1."""
    console.print(outcome.line(unit), highlight=False)
    if outcome.failed:
        raise typer.Exit(1)
