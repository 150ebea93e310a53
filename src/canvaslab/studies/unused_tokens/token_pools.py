"""The id pools a condition plants from: unused tokens and the two ordinary-token controls.

- ``unused``: every literal ``<unusedN>`` entry (``find_unused_tokens``), stored as id blocks.
- ``random``: the rest of the vocabulary, drawn uniformly: "is an unused token different from whatever
  else the noise would have put there?"
- ``rare``: ordinary ids that text produces least often. Unused tokens have corpus frequency zero, so
  a difference against ``random`` could be rarity rather than unusedness; this control separates the two.

Special ids (pad, eos, bos, unk, end-of-turn and the generation's eos/pad ids) are in no pool: planting
an eos would change the output for a reason that has nothing to do with the question.

The rare pool is picked once, at plan time, and written into the plan as explicit ids, so the run never
needs the counts file. With a counts file (``canvaslab vocab-scan --corpus ... -> token_counts.npy``) it
is the ``RARE_POOL_SIZE`` ordinary ids with the smallest *non-zero* count (ties by id): a zero in a
14M-token English corpus cannot tell a token no text uses from, say, a Korean word piece. Without one
it falls back to the highest ordinary ids, because SentencePiece/BPE vocabularies (and canvaslab's
synthetic ones, which list words by frequency) assign ids roughly in order of decreasing frequency.
The plan records which rule was used.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from transformers import PreTrainedTokenizerBase

from canvaslab.errors import CanvaslabError
from canvaslab.studies.unused_tokens.vocab_scan import find_unused_tokens, load_token_counts

TOKEN_CLASSES = ("unused", "random", "rare")
RARE_POOL_SIZE = 256

CORPUS_RULE = (f"the {RARE_POOL_SIZE} ordinary ids with the smallest non-zero corpus count (ties by id); "
               "zero-count ids are left out because a zero in one English corpus does not make a token unused")
FALLBACK_RULE = (f"no token-counts file: the highest ordinary ids, min({RARE_POOL_SIZE}, ordinary ids / 4) of them, "
                 "because SentencePiece/BPE and canvaslab's synthetic vocabularies assign ids roughly by "
                 "decreasing frequency")


@dataclass
class TokenPools:
    """The pools as the plan stores them: compact, explicit, enough to redraw every condition's tokens."""

    unused_blocks: list[list[int]]
    excluded_ids: list[int]
    rare_ids: list[int]
    rare_source: dict[str, Any]
    # /4 plans: frequency stratum -> its ids (graded.STRATA); absent from the JSON of earlier plans
    strata: dict[str, list[int]] | None = None

    def ids(self, token_class: str, vocab_size: int) -> np.ndarray:
        """The ids of one class, ascending."""
        unused = np.zeros(vocab_size, dtype=bool)
        for first, last in self.unused_blocks:
            unused[first:last + 1] = True
        if token_class == "unused":
            return np.flatnonzero(unused)
        if token_class == "rare":
            return np.asarray(sorted(self.rare_ids), dtype=np.int64)
        if token_class == "random":
            return np.flatnonzero(_ordinary_mask(unused, self.excluded_ids))
        if self.strata is not None and token_class in self.strata:
            return np.asarray(sorted(self.strata[token_class]), dtype=np.int64)
        raise CanvaslabError(f"unknown token class {token_class!r} (one of: {', '.join(TOKEN_CLASSES)})")


def _ordinary_mask(unused: np.ndarray, excluded_ids: list[int]) -> np.ndarray:
    ordinary = ~unused
    ordinary[[i for i in excluded_ids if i < len(ordinary)]] = False
    return ordinary


def ordinary_ids(pools: TokenPools, vocab_size: int) -> np.ndarray:
    """The ids that are neither unused nor special: what the ordinary controls draw from."""
    return pools.ids("random", vocab_size)


def excluded_ids(tokenizer: PreTrainedTokenizerBase, generation_defaults: dict[str, Any], vocab_size: int) -> list[int]:
    """Special ids that no condition plants: the tokenizer's specials plus the generation's eos and pad."""
    eos = generation_defaults.get("eos_token_id") or []
    ids = set(tokenizer.all_special_ids) | set(eos if isinstance(eos, list) else [eos])
    if generation_defaults.get("pad_token_id") is not None:
        ids.add(generation_defaults["pad_token_id"])
    return sorted(i for i in ids if 0 <= i < vocab_size)


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rare_from_counts(counts: np.ndarray, ordinary: np.ndarray, path: Path) -> tuple[list[int], dict[str, Any]]:
    if len(counts) != len(ordinary):
        raise CanvaslabError(f"--token-counts {path} has {len(counts)} ids but the model's vocabulary has "
                             f"{len(ordinary)}: scan a corpus with the model's own tokenizer")
    candidates = np.flatnonzero(ordinary & (counts > 0))
    if candidates.size == 0:
        raise CanvaslabError(f"--token-counts {path}: the corpus produced no ordinary token at all")
    order = np.lexsort((candidates, counts[candidates]))
    rare = candidates[order[:RARE_POOL_SIZE]]
    source = {"kind": "corpus", "rule": CORPUS_RULE, "file": str(path), "sha256": file_sha256(path),
              "corpus_tokens": int(counts.sum()), "count_range": [int(counts[rare].min()), int(counts[rare].max())]}
    return sorted(int(i) for i in rare), source


def _rare_fallback(ordinary: np.ndarray) -> tuple[list[int], dict[str, Any]]:
    ids = np.flatnonzero(ordinary)
    size = max(1, min(RARE_POOL_SIZE, ids.size // 4))
    return sorted(int(i) for i in ids[-size:]), {"kind": "fallback", "rule": FALLBACK_RULE}


def build_token_pools(tokenizer: PreTrainedTokenizerBase, vocab_size: int, generation_defaults: dict[str, Any],
                      token_counts: str | Path | None = None) -> TokenPools:
    """The three pools for a model whose vocabulary is ``tokenizer``'s (ids ``< vocab_size``)."""
    unused = find_unused_tokens(tokenizer)
    if unused.count == 0:
        raise CanvaslabError("the model's tokenizer has no <unusedN> tokens: there is nothing to study")
    excluded = excluded_ids(tokenizer, generation_defaults, vocab_size)
    pools = TokenPools([list(block) for block in unused.blocks], excluded, [], {})
    unused_mask = np.zeros(vocab_size, dtype=bool)
    unused_mask[pools.ids("unused", vocab_size)] = True
    ordinary = _ordinary_mask(unused_mask, excluded)
    if token_counts is None:
        pools.rare_ids, pools.rare_source = _rare_fallback(ordinary)
    else:
        path = Path(token_counts)
        if not path.is_file():
            raise CanvaslabError(f"--token-counts {path}: no such file (`canvaslab vocab-scan --corpus ...` writes it)")
        pools.rare_ids, pools.rare_source = _rare_from_counts(load_token_counts(path), ordinary, path)
    return pools
