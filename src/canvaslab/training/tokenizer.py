"""The `mini` tokenizer: a byte-level BPE trained on the training text, laid out like Gemma's.

Id layout (vocabulary ``VOCAB_SIZE``):

- 0 ``<pad>``, 1 ``<eos>``, 2 ``<bos>``, 3 ``<unk>``, 4 ``<mask>``, 5 ``<image_soft_token>``
- 6-104: ``<unused0>``..``<unused98>`` (Gemma keeps its low unused ids here too)
- 105 ``<start_of_turn>``, 106 ``<end_of_turn>``, 107 ``<start_of_image>``, 108 ``<end_of_image>``
- 109 .. V-TAIL-1: the learned byte-level BPE (256 byte symbols + merges); digits are split one per
  token, so numbers are spelled digit by digit
- the last ``TAIL_UNUSED`` ids: ``<unused99>``.. (Gemma's high unused block)

The ``<unusedN>`` entries are special added tokens that no training text contains (checked when the
tokenizer is built): uniform canvas noise draws them, the data never does, which is what the
unused-token study needs a model to have been trained with.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from canvaslab.training import chat

VOCAB_SIZE = 16384
TAIL_UNUSED = 256
LOW_UNUSED = range(6, 105)
UNUSED_TOTAL = len(LOW_UNUSED) + TAIL_UNUSED
# the head's 109 specials and the 256 byte symbols, with room for merges
MIN_VOCAB_SIZE = 512


def head_specials() -> list[str]:
    """The special tokens of ids 0..108, in id order (the trainer assigns ids in this order)."""
    specials = [chat.PAD, chat.EOS, chat.BOS, chat.UNK, chat.MASK, "<image_soft_token>"]
    specials += [f"<unused{i}>" for i in range(len(LOW_UNUSED))]
    specials += [chat.START_OF_TURN, chat.END_OF_TURN, "<start_of_image>", "<end_of_image>"]
    return specials


def train_tokenizer(texts: Iterable[str], vocab_size: int = VOCAB_SIZE, tail_unused: int = TAIL_UNUSED
                    ) -> PreTrainedTokenizerFast:
    """Train the BPE on ``texts`` and wrap it as a transformers fast tokenizer with the chat template; the last
    ``tail_unused`` ids (at least) are Gemma's high ``<unusedN>`` block."""
    backend = Tokenizer(models.BPE(unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    backend.decoder = decoders.ByteLevel()
    specials = head_specials()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - tail_unused,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer=trainer)
    learned = backend.get_vocab_size()
    tail = vocab_size - learned
    backend.add_special_tokens(
        [AddedToken(f"<unused{len(LOW_UNUSED) + i}>", special=True, normalized=False) for i in range(tail)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=chat.BOS, eos_token=chat.EOS, pad_token=chat.PAD, unk_token=chat.UNK,
        additional_special_tokens=[chat.START_OF_TURN, chat.END_OF_TURN],
        model_max_length=4096,
    )
    tokenizer.chat_template = chat.CHAT_TEMPLATE
    tokenizer.add_bos_token = False  # the chat format writes <bos> itself
    _check_layout(tokenizer, vocab_size)
    return tokenizer


def _check_layout(tokenizer: PreTrainedTokenizerFast, vocab_size: int) -> None:
    ids = tokenizer.convert_tokens_to_ids(head_specials())
    if ids != list(range(len(ids))) or len(tokenizer) != vocab_size:
        raise RuntimeError(f"BPE layout broken: head ids {ids[:8]}..., size {len(tokenizer)} != {vocab_size}")


def unused_ids(tokenizer: PreTrainedTokenizerFast) -> list[int]:
    vocab = tokenizer.get_vocab()
    return sorted(i for token, i in vocab.items() if token.startswith("<unused"))


def encode(tokenizer: PreTrainedTokenizerFast, texts: list[str]) -> list[list[int]]:
    """Ids of already chat-formatted texts (no extra BOS/EOS)."""
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


def save(tokenizer: PreTrainedTokenizerFast, out: Path) -> None:
    tokenizer.save_pretrained(str(out))


def build_mini_tokenizer(passages: Path | None, out: Path, examples: int = 60_000, seed: int = 0,
                         vocab_size: int = VOCAB_SIZE, tail_unused: int = TAIL_UNUSED) -> PreTrainedTokenizerFast:
    """The shipped tokenizer's recipe: BPE on ``examples`` chat-formatted training exchanges of seed ``seed``,
    written in the answer style it was made with (``TOKENIZER_STYLE``): a later style trains on the same vocabulary."""
    from canvaslab.training.batches import generate_texts
    from canvaslab.training.tasks import TOKENIZER_STYLE

    rows = generate_texts(passages, examples, seed, style=TOKENIZER_STYLE)
    tokenizer = train_tokenizer([prompt + answer for _, prompt, answer in rows], vocab_size, tail_unused)
    save(tokenizer, out)
    return tokenizer
