"""Turn the ``--tokenizer`` argument (a preset name or a local directory) into a fast tokenizer.

Nothing here downloads: the presets are built in memory or read from the local cache that
``canvaslab assets tokenizer`` fills, and a directory is read with ``local_files_only=True``. Every
way this can fail is a user error with a one-line fix, so each raises ``CanvaslabError``.
"""

from __future__ import annotations

from pathlib import Path

from transformers import PreTrainedTokenizerBase

from canvaslab.assets.gemma3_tokenizer import load_gemma3_tokenizer
from canvaslab.choices import checked_path
from canvaslab.errors import CanvaslabError
from canvaslab.models.mini import load_mini_tokenizer
from canvaslab.models.tokenizer import build_synthetic_tokenizer

TOKENIZER_PRESETS: dict[str, str] = {
    "tiny": "synthetic word-level tokenizer, vocab 512 (16 planted <unusedN>)",
    "real-shapes": "synthetic word-level tokenizer, vocab 262,144, <unusedN> in Gemma 4's id blocks",
    "gemma3": "Gemma 3's real tokenizer, from the local cache (`canvaslab assets tokenizer`)",
    "mini": "the trained `mini` model's byte-level BPE, vocab 16,384, <unusedN> in Gemma-like id blocks",
}


def _load_preset(name: str, cache_dir: str | Path | None) -> PreTrainedTokenizerBase:
    if name == "tiny":
        return build_synthetic_tokenizer(512)
    if name == "real-shapes":
        return build_synthetic_tokenizer(262_144)
    if name == "mini":
        return load_mini_tokenizer()
    return load_gemma3_tokenizer(cache_dir)


def _load_directory(path: Path) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    from canvaslab.models.loading import check_checkpoint_json

    check_checkpoint_json(path)
    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError, KeyError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CanvaslabError(f"cannot load a tokenizer from {path}: {first_line}") from error


def resolve_tokenizer(spec: str, cache_dir: str | Path | None = None) -> PreTrainedTokenizerBase:
    """The tokenizer named by ``spec``: a key of ``TOKENIZER_PRESETS`` or a directory of tokenizer files.

    ``cache_dir`` is the canvaslab cache root used by the ``gemma3`` preset (see ``canvaslab.assets``).
    Only fast tokenizers are returned: the corpus scan batches through their Rust backend.
    """
    if spec in TOKENIZER_PRESETS:
        tokenizer = _load_preset(spec, cache_dir)
    elif checked_path("--tokenizer", spec).expanduser().is_dir():
        tokenizer = _load_directory(Path(spec).expanduser())
    else:
        presets = ", ".join(TOKENIZER_PRESETS)
        raise CanvaslabError(
            f"--tokenizer {spec!r} is neither a preset ({presets}) nor an existing directory of tokenizer files"
        )
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        raise CanvaslabError(f"the tokenizer from {spec!r} is not a fast (Rust-backed) tokenizer; the scan needs one")
    return tokenizer
