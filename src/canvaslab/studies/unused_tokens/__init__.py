"""The unused-token study (seed 000): do the vocabulary's literal ``<unusedN>`` entries, which text never
produces but canvas noise does, act like hidden mask symbols?

This package holds the vocabulary scan (``vocab_scan``): the unused tokens, how many a random canvas
holds on average, and how often a corpus produces each id.
"""

from canvaslab.studies.unused_tokens.tokenizer_source import TOKENIZER_PRESETS, resolve_tokenizer
from canvaslab.studies.unused_tokens.vocab_scan import (
    CorpusScan,
    UnusedTokens,
    contiguous_blocks,
    expected_unused_per_canvas,
    find_unused_tokens,
    load_token_counts,
    save_token_counts,
    scan_corpus,
    scan_report,
)

__all__ = [
    "TOKENIZER_PRESETS",
    "CorpusScan",
    "UnusedTokens",
    "contiguous_blocks",
    "expected_unused_per_canvas",
    "find_unused_tokens",
    "load_token_counts",
    "resolve_tokenizer",
    "save_token_counts",
    "scan_corpus",
    "scan_report",
]
