"""Every choice canvaslab validates, and the rules that check a value against it, in one torch-free module.

The command line (``canvaslab.cli``), the Python API (``canvaslab.api``) and the layers that act on a choice
(the modes, the samplers, the probe suites...) all import these tuples from here, so a choice is spelled once.
Checking a value imports nothing heavy: a bad value is one line (``CanvaslabError``) naming the option as the
command line spells it, before torch or a model loads.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Optional, Sequence, Union

from canvaslab.errors import CanvaslabError
from canvaslab.io import check_names

MAX_SEED = 2**63 - 1  # seeds are stored in int64 tensors and JSON; larger ones are not portable
MAX_BATCH = 4096
# Denoising passes per canvas and tokens per answer: far above any real budget (DiffusionGemma's default is 48
# passes of a 256-token canvas), low enough that a typo is refused instead of overflowing an int32 later.
MAX_STEPS = 4096
MAX_NEW_TOKENS = 65536
BUILTIN_PROMPT_COUNT = 16  # len(canvaslab.prompts.BUILTIN_PROMPTS), checked there at import

PRESET_NAMES = ("tiny", "real-shapes")  # random-weight presets (canvaslab.models.presets)
DTYPES = ("auto", "float32", "bfloat16", "float16")  # auto: the checkpoint's own
RNGS = ("row", "stock")  # row: a random stream per row; stock: transformers' own sampling
MODES = ("stock", "rowwise", "invariant")  # canvaslab.invariant.modes
BATCHINGS = ("continuous", "static")  # canvaslab serve: rows join at pass boundaries, or whole batches
SCAN_MODES = (*MODES, "both")  # the op scan's --mode: both = stock and invariant
FILLS = ("copies", "mixed")  # what shares the studied row's batch
REPEAT_CONTROLS = ("fresh-process", "same-process")  # where the B=1 repeat runs
EXECUTORS = ("local", "ray")
EXPORT_FORMATS = ("parquet", "csv")

# The commit-order study's probe regimes, the splits of each regime and the suites that hold them.
REGIMES = ("math", "code_completion", "code_synthesis", "factual", "open_ended", "json")
CODE_REGIMES = ("code_completion", "code_synthesis")
PROBE_SPLITS = ("exploratory", "confirmatory")
ALL_SPLITS = "all"
SPLITS = (*PROBE_SPLITS, ALL_SPLITS)
SUITES = ("default", "mini", "mini-large")
# The regimes each suite has: what the default regimes mean for it (the mini suites have no code completion).
SUITE_REGIMES = {"default": REGIMES, **dict.fromkeys(("mini", "mini-large"),
                                                     ("math", "code_synthesis", "factual", "open_ended", "json"))}

# Plan schema /2: default (2,304 conditions, GPU) and small (12, CPU tests). Plan schema /3 (first-pass outcomes):
# pilot, confirmatory (sized from a finished pilot, --pilot DIR) and smoke (CPU tests). Plan schema /4 (controls
# graded by training frequency, float32, a later-pass arm): the same three, prefixed graded-.
NOISE_DESIGNS = ("default", "small", "pilot", "confirmatory", "smoke", "graded-pilot", "graded-confirmatory",
                 "graded-smoke")
NOISE_CONFIRMATORY_DESIGNS = ("confirmatory", "graded-confirmatory")  # sized from a finished pilot (--pilot DIR)
NOISE_CHECK_DESIGNS = ("small", "smoke", "graded-smoke")  # toy sizes that test the machinery: their answers are not findings
NOISE_BATCH_SIZE = 36  # rows of the safeguard's batched runs: one per prompt, seed and budget of the default design
TOKENIZER_PRESETS = ("tiny", "real-shapes", "gemma3", "mini")  # the vocabulary scan's named tokenizers
DATA_VERSIONS = ("shipped", "grammar")  # `mini train --data`: the shipped recipe's generators, or the grammar


def one_of(option: str, value, choices: Sequence[str]):
    if value not in choices:
        raise CanvaslabError(f"{option} {value!r}: must be one of {', '.join(choices)}")
    return value


def whole_number(option: str, value, minimum: int, maximum: Optional[int] = None):
    """``value`` if it is a whole number in ``[minimum, maximum]`` (booleans are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or \
            (maximum is not None and value > maximum):
        allowed = f"from {minimum} to {maximum}" if maximum is not None else f"{minimum} or more"
        shown = value if isinstance(value, int) and not isinstance(value, bool) else repr(value)
        raise CanvaslabError(f"{option} {shown}: must be a whole number {allowed}")
    return value


def optional_whole_number(option: str, value, minimum: int, maximum: Optional[int] = None):
    return None if value is None else whole_number(option, value, minimum, maximum)


def positive_number(option: str, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):  # and nan
        raise CanvaslabError(f"{option} {value}: must be a finite number above 0")
    return value


DEVICES = ("auto", "cpu", "cuda", "cuda:N")  # auto: cuda where torch sees one, else cpu


def device(option: str, value) -> str:
    """``value`` if it names a device canvaslab runs on: cpu, cuda, cuda:N (a GPU's index) or auto. Others torch
    knows (meta, mps, xla...) hold no weights canvaslab can generate with, or are untested: refused here."""
    if not isinstance(value, str) or re.fullmatch(r"auto|cpu|cuda(:\d{1,4})?", value) is None:
        raise CanvaslabError(f"{option} {value!r}: must be {', '.join(DEVICES[:-1])} or {DEVICES[-1]} "
                             "(N: the GPU's index)")
    return value


def unicode_text(option: str, value: str) -> str:
    """``value`` if it is Unicode text; one line where it holds a lone surrogate: bytes that were not UTF-8 (an
    argument the system decoded with ``surrogateescape``), which no tokenizer encodes and no file can hold."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise CanvaslabError(f"{option}: character {error.start + 1} is not Unicode text (a byte that is not "
                             "UTF-8?); give UTF-8 text") from None
    return value


def batch_sizes(value) -> list[int]:
    """``"1,2,3,4"`` or ``(1, 2, 3, 4)`` -> ``[1, 2, 3, 4]``, sorted; B=1 is always included, as the reference."""
    if isinstance(value, str):
        try:
            sizes = [int(part) for part in value.split(",")]
        except ValueError:
            raise CanvaslabError(f"--batch-sizes {value!r}: give whole numbers separated by commas, "
                                 "e.g. 1,2,3,4") from None
    else:
        if not isinstance(value, (list, tuple, range)):
            raise CanvaslabError(f"--batch-sizes {value!r}: give a sequence of whole numbers, e.g. (1, 2, 3, 4)")
        sizes = list(value)
        if any(isinstance(size, bool) or not isinstance(size, int) for size in sizes):
            raise CanvaslabError(f"--batch-sizes {value!r}: give whole numbers, e.g. (1, 2, 3, 4)")
    shown = value if isinstance(value, str) else ",".join(map(str, sizes))
    bad = [size for size in sizes if not 1 <= size <= MAX_BATCH]
    if bad:
        raise CanvaslabError(f"--batch-sizes {shown}: {bad[0]} is impossible; batch sizes run from 1 to {MAX_BATCH}")
    sizes = sorted(set(sizes) | {1})
    if len(sizes) < 2:
        raise CanvaslabError(f"--batch-sizes {shown}: give a size other than 1 too; B=1 is the reference every "
                             "other size is compared with, e.g. 1,2,3,4")
    return sizes


def builtin_prompt_count(value: str) -> bool:
    """Whether ``--prompts`` names a count of built-in prompts (else a file); a count out of range is refused."""
    if re.fullmatch(r"\s*[+-]?\d+\s*", value) is None:
        return False
    if not 1 <= int(value) <= BUILTIN_PROMPT_COUNT:
        raise CanvaslabError(f"--prompts {value}: the built-in set has 1 to {BUILTIN_PROMPT_COUNT} prompts; "
                             "pass a file for more")
    return True


def regimes(value, suite: str = "default") -> tuple[str, ...]:
    """``"math,json"`` or ``("math", "json")`` -> the regimes; None -> the suite's own."""
    if value is None:
        return SUITE_REGIMES[suite]
    names = [name.strip() for name in (value.split(",") if isinstance(value, str) else value) if name.strip()]
    unknown = [name for name in names if name not in REGIMES]
    if unknown or not names:
        raise CanvaslabError(f"--regimes {value!r}: give one or more of {', '.join(REGIMES)}, comma-separated")
    return tuple(names)


def engine_options(executor: str, ray_address: Optional[str], workers: Optional[int], retries: int) -> None:
    """The study engine's options: a known executor, and Ray-only options only with Ray."""
    one_of("--executor", executor, EXECUTORS)
    optional_whole_number("--workers", workers, 1, MAX_BATCH)
    whole_number("--retries", retries, 0, 100)
    if executor != "ray" and (ray_address is not None or workers is not None):
        raise CanvaslabError(f"{'--ray-address' if ray_address is not None else '--workers'} needs --executor ray")
    if executor == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise CanvaslabError("--executor ray: needs Ray: pip install 'canvaslab[ray]'")


# ---- paths --------------------------------------------------------------------------------------------

def checked_path(option: str, value: Union[str, os.PathLike]) -> Path:
    """``value`` as a path, or one line refusing it where the system could neither create nor open it (a name
    over 255 bytes, a whole path over 4,095): the one check every path a user gives passes first."""
    if not isinstance(value, (str, os.PathLike)) or isinstance(value, bytes):
        raise CanvaslabError(f"{option} {value!r}: give a path as a text")
    return check_names(value, option)


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


def _check_can_create(option: str, path: Path) -> None:
    existing = _nearest_existing(path)
    if not existing.is_dir():
        raise CanvaslabError(f"{option} {path}: {existing} is a file, so nothing can be created under it")
    why = _probe_writable(existing)
    if why is not None:
        raise CanvaslabError(f"{option} {path}: cannot write in {existing} ({why})")


def writable_folder(option: str, value) -> Path:
    """An output folder: an existing folder or one that can be created, where files can be written."""
    path = checked_path(option, value)
    if path.exists() and not path.is_dir():
        raise CanvaslabError(f"{option} {path}: is a file; give a folder")
    _check_can_create(option, path)
    return path


def existing_writable_folder(option: str, value) -> Path:
    """A study folder that must already exist (written by an earlier step) and will be written to."""
    path = checked_path(option, value)
    if not path.is_dir():
        raise CanvaslabError(f"{option} {path}: {'is not a folder' if path.exists() else 'does not exist'}")
    _check_can_create(option, path)
    return path


def existing_folder(option: str, value) -> Path:
    """A folder that must already exist and is only read (e.g. a finished pilot study)."""
    path = checked_path(option, value)
    if not path.is_dir():
        raise CanvaslabError(f"{option} {path}: {'is not a folder' if path.exists() else 'does not exist'}")
    return path


def writable_file(option: str, value, suffixes: Sequence[str] = ()) -> Path:
    """An output file: not a folder, with one of ``suffixes`` if given, in a folder that exists or can be made."""
    path = checked_path(option, value)
    if path.is_dir():
        raise CanvaslabError(f"{option} {path}: is a folder; give a file path")
    if suffixes and path.suffix not in suffixes:
        raise CanvaslabError(f"{option} {path}: name a {' or '.join(suffixes)} file")
    # an existing file (or a link, which the writer replaces rather than follows) is replaced: its folder counts
    _check_can_create(option, path.parent if os.path.lexists(path) else path)
    return path


def readable_file(option: str, value, suffixes: Sequence[str] = ()) -> Path:
    """An input file that exists, is a file, has one of ``suffixes`` if given, and can be read."""
    path = checked_path(option, value)
    if suffixes and path.suffix not in suffixes:
        raise CanvaslabError(f"{option} {path}: must be a {' or '.join(suffixes)} file")
    if not path.is_file():
        raise CanvaslabError(f"{option} {path}: {'is a folder, not a file' if path.exists() else 'no such file'}")
    try:
        with path.open("rb") as handle:
            handle.read(1)
    except OSError as error:
        raise CanvaslabError(f"{option} {path}: cannot be read ({error.strerror})") from None
    return path
