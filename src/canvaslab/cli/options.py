"""The options every command shares, and the one set of rules that checks their values.

Every check here runs while the command line is parsed, before anything is imported or loaded (torch and
transformers take seconds to import, a model minutes to load): a bad value ends in one line naming the
option and what it allows (``CanvaslabError``, printed by ``cli.app``) and exit code 2. Values that need
a file or the model (a prompt file's content, ``--layers`` against the model's depth) are checked by the
loaders, still before any weights are read. The choices and the rules are ``canvaslab.choices`` (torch-free),
shared with the Python API and the layers that act on them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Callable, Optional, Sequence

import typer

from canvaslab.errors import CanvaslabError
from canvaslab.terminal import printable

from canvaslab import choices
from canvaslab.choices import DTYPES, MAX_BATCH, MAX_NEW_TOKENS, MAX_SEED, MAX_STEPS, MODES, PRESET_NAMES, RNGS


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
    if value is not None and not 0 < value < float("inf"):  # also refuses nan
        raise _bad(param, value, "must be a finite number above 0")
    return value


# ---- choices and lists -------------------------------------------------------------------------------

def one_of(allowed: Sequence[str]) -> Callable:
    def check(ctx, param, value):
        return value if value is None else choices.one_of(option_name(param), value, allowed)

    return check




def batch_sizes(ctx, param, value):
    choices.batch_sizes(value)
    return value


def prompts(ctx, param, value):
    """A count of built-in prompts, or a file (its content is checked when it is read)."""
    choices.builtin_prompt_count(value)
    return value


# ---- paths -------------------------------------------------------------------------------------------

def path(ctx, param, value):
    """Any path (or a repeated option's paths) the system could open, kept as given: the check every other path
    rule starts with, for paths a command reads in its own way (a tokenizer folder, a corpus, a study folder)."""
    for item in value if isinstance(value, (list, tuple)) else () if value is None else (value,):
        choices.checked_path(option_name(param), item)
    return value


def writable_folder(ctx, param, value):
    """An output folder: an existing folder or one that can be created, where files can be written."""
    return value if value is None else choices.writable_folder(option_name(param), value)


def existing_writable_folder(ctx, param, value):
    """A study folder that must already exist (written by an earlier step) and will be written to."""
    return choices.existing_writable_folder(option_name(param), value)


def existing_folder(ctx, param, value):
    """A folder that must already exist and is only read."""
    return value if value is None else choices.existing_folder(option_name(param), value)


def writable_file(ctx, param, value):
    """An output file: not a folder, and its folder exists or can be created."""
    return value if value is None else choices.writable_file(option_name(param), value)


def readable_file(suffixes: Sequence[str] = ()) -> Callable:
    def check(ctx, param, value):
        return value if value is None else choices.readable_file(option_name(param), value, suffixes)

    return check


# ---- models ------------------------------------------------------------------------------------------

def model(ctx, param, value):
    """An installed model's name (``mini``) is checked here, from its package's entry point (no torch): one of
    canvaslab's models that is not installed, or a broken package, is one line before anything loads."""
    if value is not None and value not in PRESET_NAMES:
        from canvaslab.models.registry import find_diffusion_model

        choices.checked_path(option_name(param), value)  # a name or a path: either must be one the system can open
        find_diffusion_model(value)
    return value


# ---- the shared options ------------------------------------------------------------------------------

Model = Annotated[str, typer.Option("--model", help="preset (tiny, real-shapes), installed model (mini), a local "
                                                    "checkpoint directory, or a config.json (random weights)",
                                    callback=model)]
Dtype = Annotated[str, typer.Option("--dtype", help=f"{', '.join(DTYPES)} (auto: the model's)",
                                    callback=one_of(DTYPES))]
def device(ctx, param, value):
    return value if value is None else choices.device(option_name(param), value)


Device = Annotated[str, typer.Option("--device", help="cpu, cuda, cuda:N or auto", callback=device)]
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
                                              callback=whole_number(1, MAX_STEPS))]
MaxNewTokens = Annotated[Optional[int], typer.Option("--max-new-tokens", help="tokens to generate (default: the model's)",
                                                     callback=whole_number(1, MAX_NEW_TOKENS))]
BatchSizes = Annotated[str, typer.Option("--batch-sizes", help="comma-separated; B=1 is the reference",
                                         callback=batch_sizes)]
Bootstrap = Annotated[int, typer.Option("--bootstrap", help="prompt-clustered bootstrap resamples; 0 = no CIs",
                                        callback=whole_number(0))]


# ---- the study engine's options (every study command) ------------------------------------------------

def executor(ctx, param, value):
    choices.engine_options(value, None, None, 0)
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
Fresh = Annotated[bool, typer.Option("--fresh/--no-fresh", help="start over: the folder's old study is kept under a new name "
                                                     "(DIR.1, ...)")]


def engine_options(executor: str, ray_address: Optional[str], workers: Optional[int], retries: int,
                   fresh: bool) -> dict:
    """``run_study``'s keyword arguments; Ray-only options without ``--executor ray`` are refused."""
    choices.engine_options(executor, ray_address, workers, retries)
    return {"executor": executor, "ray_address": ray_address, "workers": workers, "retries": retries, "fresh": fresh}


def run_and_print(study: str, run: Callable, out: Optional[Path], wide: bool = False, files: Sequence[str] = (),
                  phases: Optional[dict[str, str]] = None) -> None:
    """What every study command does once its options are checked: ``run(progress)`` (a call of the Python API
    returning ``Results``) under a progress line, then the study's tables, the files written and the outcome
    (exit 1 if a unit failed). ``study``: its name in the registry of studies; ``phases``: later phases the
    study reports by name, each with its own unit (``cli.progress.Phased``)."""
    from rich.console import Console

    from canvaslab.api.registry import study_type
    from canvaslab.cli.progress import Deferred, Phased, progress

    kind = study_type(study)
    with Phased(Deferred(progress(kind.section.title.lower(), kind.unit)), phases or {}) as report:
        results = run(report)
    console = Console()
    for table in results.tables(wide):
        console.print(table, crop=False, highlight=False)
    if out is not None:
        console.print(printable(f"wrote {', '.join(str(out / name) for name in (files or [kind.result_file]))}"),
                      markup=False, emoji=False, highlight=False)
    finish(console, results.outcome, kind.unit)


def finish(console, outcome, unit: str) -> None:
    """The study's final line; failed units (after their retries) end the command with exit code 1."""
    failed = outcome.failed
    first = f" (first: {printable(next(iter(failed)))}: {printable(next(iter(failed.values())))})" if failed else ""
    others = f", {outcome.by_others} finished by another process" if outcome.by_others else ""
    console.print(f"{unit}: {outcome.ran} ran, {outcome.skipped} skipped as already done{others}, {len(failed)} failed"
                  f"{first}", highlight=False)
    if failed:
        raise typer.Exit(1)
