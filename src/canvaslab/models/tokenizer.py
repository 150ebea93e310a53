"""Synthetic word-level tokenizers for the presets.

Random-weight presets need a tokenizer that turns prompts into ids and ids back into readable text. A
word-level vocabulary built in memory (no download, < 1 s even at 262,144 ids) does that honestly. It
keeps DiffusionGemma's special-token ids (pad 0, eos 1, bos 2, end-of-turn 106 where the vocabulary
is large enough) and plants literal ``<unusedN>`` entries, in Gemma 4's id blocks at the real vocabulary
size, so the unused-token study has something real to find.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, EOS, BOS, UNK = "<pad>", "<eos>", "<bos>", "<unk>"
END_OF_TURN = "<end_of_turn>"
END_OF_TURN_ID = 106

# Gemma 4's `<unusedN>` id blocks at vocab 262,144 (REFERENCE §3): 6,227 tokens.
GEMMA4_UNUSED_BLOCKS: tuple[tuple[int, int], ...] = (
    (6, 45), (53, 97), (99, 99), (102, 104), (256001, 258879), (258885, 262143),
)


def default_unused_blocks(vocab_size: int) -> tuple[tuple[int, int], ...]:
    """Where ``<unusedN>`` tokens sit: Gemma 4's blocks at the real size, two small blocks otherwise."""
    if vocab_size == 262_144:
        return GEMMA4_UNUSED_BLOCKS
    tail = max(4, vocab_size // 64)
    return ((6, 13), (vocab_size - tail, vocab_size - 1))


@lru_cache(maxsize=1)
def _words() -> tuple[str, ...]:
    text = resources.files("canvaslab.models.assets").joinpath("words.txt").read_text(encoding="utf-8")
    return tuple(word for word in text.split() if word)


def synthetic_vocab(vocab_size: int, unused_blocks: tuple[tuple[int, int], ...] | None = None) -> list[str]:
    """The id -> token list: specials, planted ``<unusedN>``, English words, then ``<tok_N>`` fillers."""
    if vocab_size < 32:
        raise ValueError(f"a synthetic vocabulary needs at least 32 ids, got {vocab_size}")
    blocks = default_unused_blocks(vocab_size) if unused_blocks is None else unused_blocks
    vocab: list[str | None] = [None] * vocab_size
    vocab[0], vocab[1], vocab[2], vocab[3] = PAD, EOS, BOS, UNK
    if vocab_size > END_OF_TURN_ID:
        vocab[END_OF_TURN_ID] = END_OF_TURN
    unused_index = 0
    for start, end in blocks:
        for token_id in range(start, end + 1):
            if vocab[token_id] is not None:
                raise ValueError(f"unused block {start}-{end} overlaps a special token at id {token_id}")
            vocab[token_id] = f"<unused{unused_index}>"
            unused_index += 1
    words = iter(_words())
    for token_id in range(vocab_size):
        if vocab[token_id] is None:
            vocab[token_id] = next(words, None) or f"<tok_{token_id}>"
    return vocab  # type: ignore[return-value]


@lru_cache(maxsize=4)
def build_synthetic_tokenizer(
    vocab_size: int, unused_blocks: tuple[tuple[int, int], ...] | None = None
) -> PreTrainedTokenizerFast:
    """A word-level fast tokenizer whose ids line up with a DiffusionGemma config of ``vocab_size``."""
    vocab = synthetic_vocab(vocab_size, unused_blocks)
    model = models.WordLevel(vocab={token: i for i, token in enumerate(vocab)}, unk_token=UNK)
    backend = Tokenizer(model)
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Punctuation(behavior="isolated"),
            pre_tokenizers.Digits(individual_digits=True),
        ]
    )
    backend.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD,
        eos_token=EOS,
        bos_token=BOS,
        unk_token=UNK,
        model_max_length=1 << 20,
    )
