"""The vocabulary scan: which ``<unusedN>`` tokens exist, how many land in random canvas noise, and how
often ordinary text produces them.

DiffusionGemma draws canvas noise uniformly from its whole vocabulary, so every id is equally likely in
the initial canvas, including thousands of literal ``<unusedN>`` entries that text never produces. This
module measures the three facts that make that worth studying: the unused tokens themselves (found by
name, grouped into contiguous id blocks), the number expected in one fully random canvas, and their
frequency in a corpus. The corpus pass also keeps a frequency count for *every* id, because the noise
study needs the corpus's rarest ordinary tokens as a control (unused tokens have frequency zero).

What counts as an occurrence: the ids the tokenizer emits for the text with its default settings, no
BOS/EOS added. Special-token strings are recognised as the tokenizer itself recognises them. Gemma 3's
``<unusedN>`` entries are special added tokens, so a literal ``<unused3>`` in the text becomes that id
and is counted: what the model would see. canvaslab's synthetic word-level tokenizers do not register
them as added tokens; there a literal ``<unused3>`` is split into ``<``, ``unused``, ``3``, ``>`` and
counts nothing.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np
from transformers import PreTrainedTokenizerBase

from canvaslab.errors import CanvaslabError
from canvaslab.io import atomic_writer
from canvaslab.studies.unused_tokens.text_stream import DEFAULT_CHUNK_BYTES, iter_line_batches

UNUSED_TOKEN_PATTERN = re.compile(r"^<unused\d+>$")


@dataclass(frozen=True)
class UnusedTokens:
    """The ``<unusedN>`` entries of one vocabulary, ids ascending."""

    ids: tuple[int, ...]
    tokens: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.ids)

    @property
    def blocks(self) -> list[tuple[int, int]]:
        return contiguous_blocks(self.ids)


@dataclass
class CorpusScan:
    """Token counts over a corpus: ``token_counts[i]`` is how often id ``i`` was produced."""

    files: list[str]
    tokens_scanned: int
    seconds: float
    token_counts: np.ndarray

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_scanned / self.seconds if self.seconds > 0 else float("inf")

    def occurrences(self, ids: Iterable[int]) -> dict[int, int]:
        """Count of each id in ``ids`` (ids the corpus never produced count 0)."""
        return {int(i): int(self.token_counts[i]) if i < len(self.token_counts) else 0 for i in ids}


def vocabulary_size(tokenizer: PreTrainedTokenizerBase) -> int:
    """Ids the tokenizer can emit, added tokens included: the rows noise is drawn from."""
    return len(tokenizer)


def find_unused_tokens(tokenizer: PreTrainedTokenizerBase) -> UnusedTokens:
    """Every vocabulary entry whose whole text is ``<unused`` + digits + ``>``."""
    found = sorted(
        (token_id, token) for token, token_id in tokenizer.get_vocab().items() if UNUSED_TOKEN_PATTERN.match(token)
    )
    return UnusedTokens(ids=tuple(i for i, _ in found), tokens=tuple(t for _, t in found))


def contiguous_blocks(ids: Sequence[int]) -> list[tuple[int, int]]:
    """Group ids into inclusive ``(first, last)`` runs of consecutive integers: [6, 7, 9] -> [(6, 7), (9, 9)]."""
    blocks: list[tuple[int, int]] = []
    for token_id in sorted(ids):
        if blocks and token_id == blocks[-1][1] + 1:
            blocks[-1] = (blocks[-1][0], token_id)
        else:
            blocks.append((token_id, token_id))
    return blocks


DIFFUSION_GEMMA_CANVAS = 256  # DiffusionGemma's canvas_length (transformers' DiffusionGemmaConfig)


@dataclass(frozen=True)
class CanvasLength:
    """The canvas the expected count is for, and where its length comes from (printed and written)."""

    tokens: int
    source: str


def canvas_length_of(tokenizer_spec: str) -> CanvasLength:
    """The canvas of the model a ``--tokenizer`` value belongs to: a preset model's (``tiny``, ``real-shapes``),
    a registered model's (``mini``: its checkpoint's ``config.json``), or a checkpoint folder's ``config.json``
    ``canvas_length``; DiffusionGemma's 256 for a tokenizer of no model (``gemma3``, a tokenizer folder)."""
    from canvaslab.models.presets import PRESETS
    from canvaslab.models.registry import find_model

    if tokenizer_spec in PRESETS:
        return CanvasLength(PRESETS[tokenizer_spec].build_config().canvas_length, f"the {tokenizer_spec} model's")
    path = Path(tokenizer_spec).expanduser()
    if not path.is_dir():
        try:
            package = find_model(tokenizer_spec)
        except CanvaslabError:  # a model of this repository that is not installed: its recipe's canvas
            package = None
            if tokenizer_spec == "mini":
                from canvaslab.models.mini import MINI_CANVAS

                return CanvasLength(MINI_CANVAS, "the mini recipe's (canvaslab.models.mini; mini is not installed)")
        if package is not None and package.kind == "diffusion":
            tokens = _config_canvas(package.folder / "config.json")
            if tokens is not None:
                return CanvasLength(tokens, f"{tokenizer_spec}'s ({package.folder / 'config.json'})")
    else:
        tokens = _config_canvas(path / "config.json")
        if tokens is not None:
            return CanvasLength(tokens, f"canvas_length of {path / 'config.json'}")
    return CanvasLength(DIFFUSION_GEMMA_CANVAS, "DiffusionGemma's, as the tokenizer names no model whose canvas "
                        "is known; --canvas-length sets another")


def _config_canvas(config: Path) -> int | None:
    """``canvas_length`` of a checkpoint's ``config.json``, or None where it has none."""
    from canvaslab.io import read_json

    try:
        tokens = read_json(config, max_bytes=1 << 24, follow_links=True).get("canvas_length")
    except (OSError, ValueError, AttributeError):  # read_json's refusals of a huge or deep file are ValueErrors
        return None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0 else None


def expected_unused_per_canvas(canvas_length: int, n_unused: int, vocab_size: int) -> float:
    """Mean number of unused tokens in one canvas of ``canvas_length`` ids drawn uniformly from the vocabulary."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    return canvas_length * n_unused / vocab_size


def _count_batch(backend, lines: list[str], counts: np.ndarray) -> tuple[int, np.ndarray]:
    """Tokenize one batch through the Rust backend (parallel) and add its ids to ``counts``."""
    encodings = backend.encode_batch_fast(lines, add_special_tokens=False)
    ids = np.fromiter(chain.from_iterable(encoding.ids for encoding in encodings), dtype=np.int64)
    if ids.size == 0:
        return 0, counts
    batch_counts = np.bincount(ids, minlength=len(counts))
    if len(batch_counts) > len(counts):  # an id past len(tokenizer): widen rather than drop it
        counts = np.concatenate([counts, np.zeros(len(batch_counts) - len(counts), dtype=np.int64)])
    counts += batch_counts
    return int(ids.size), counts


def scan_corpus(
    tokenizer: PreTrainedTokenizerBase,
    paths: Sequence[str | Path],
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> CorpusScan:
    """Stream UTF-8 text files through the tokenizer and count every id produced.

    Files are read ``chunk_bytes`` at a time and tokenized line by line in batches (see ``text_stream``),
    so memory stays bounded and the counts do not depend on ``chunk_bytes``.
    """
    backend = tokenizer.backend_tokenizer
    counts = np.zeros(vocabulary_size(tokenizer), dtype=np.int64)
    total = 0
    start = time.perf_counter()
    for path in paths:
        for lines in iter_line_batches(path, chunk_bytes=chunk_bytes):
            produced, counts = _count_batch(backend, lines, counts)
            total += produced
    seconds = time.perf_counter() - start
    return CorpusScan(files=[str(p) for p in paths], tokens_scanned=total, seconds=seconds, token_counts=counts)


def save_token_counts(path: str | Path, counts: np.ndarray) -> Path:
    """Write the per-id counts as ``.npy``, atomically (the noise study reads them for its rare-token control)."""
    with atomic_writer(path, binary=True) as handle:
        np.save(handle, np.asarray(counts, dtype=np.int64))
    return Path(path)


def load_token_counts(path: str | Path) -> np.ndarray:
    """The per-id counts written by ``save_token_counts``: ``counts[i]`` = occurrences of id ``i``."""
    try:
        counts = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise CanvaslabError(f"--token-counts {path}: not a readable .npy array ({str(error).splitlines()[0]}); "
                             "`canvaslab vocab-scan --corpus ...` writes token_counts.npy") from None
    if counts.ndim != 1 or counts.dtype.kind not in "iu":
        raise CanvaslabError(f"--token-counts {path}: expected one integer count per token id, found a "
                             f"{counts.ndim}-d {counts.dtype} array")
    return counts


def scan_report(
    tokenizer_name: str,
    tokenizer: PreTrainedTokenizerBase,
    canvas_length: int,
    corpus: CorpusScan | None = None,
    canvas_source: str | None = None,
) -> dict:
    """The JSON-ready summary ``canvaslab vocab-scan`` prints and writes; ``canvas_source`` says where
    ``canvas_length`` comes from (``CanvasLength.source``)."""
    unused = find_unused_tokens(tokenizer)
    vocab = vocabulary_size(tokenizer)
    report: dict = {
        "tokenizer": tokenizer_name,
        "vocab_size": vocab,
        "unused_count": unused.count,
        "unused_id_blocks": [list(block) for block in unused.blocks],
        "canvas_length": canvas_length,
        "canvas_length_source": canvas_source,
        "expected_unused_per_canvas": expected_unused_per_canvas(canvas_length, unused.count, vocab),
        "corpus": None,
    }
    if corpus is not None:
        counts = corpus.occurrences(unused.ids)
        nonzero = [
            {"token": token, "id": token_id, "count": counts[token_id]}
            for token_id, token in zip(unused.ids, unused.tokens)
            if counts[token_id]
        ]
        report["corpus"] = {
            "files": corpus.files,
            "tokens_scanned": corpus.tokens_scanned,
            "seconds": round(corpus.seconds, 3),
            "tokens_per_second": corpus.tokens_per_second,
            "unused_occurrences_total": sum(counts.values()),
            "unused_occurrences": nonzero,
        }
    return report
