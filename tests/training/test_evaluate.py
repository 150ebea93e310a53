"""The prose proxies of the quality benchmark: English words, and English word pairs."""

from __future__ import annotations

from canvaslab.training.evaluate import english_bigram_fraction, english_fraction, summarize
from canvaslab.training.tasks import Example

PASSAGES = "The cat sat on the mat. The dog ran to the door, and the cat ran after it.\n"


def test_shuffled_english_passes_the_word_share_but_not_the_pair_share(tmp_path):
    passages = tmp_path / "passages.txt"
    passages.write_text(PASSAGES)
    ordered, shuffled = "the cat sat on the mat", "on mat sat cat"
    assert english_fraction(ordered, passages) == english_fraction(shuffled, passages) == 1.0
    assert english_bigram_fraction(ordered, passages) == 1.0
    assert english_bigram_fraction(shuffled, passages) == 0.0
    assert english_bigram_fraction("cat", passages) == 0.0  # no pair to judge


def test_the_prose_summary_carries_both_shares(tmp_path):
    passages = tmp_path / "passages.txt"
    passages.write_text(PASSAGES)
    examples = [Example("prose", "open_ended", "k1", "Continue: The cat", "sat on the mat.")] * 2
    answers = [{"text": "the dog ran to the door"}, {"text": "door the to ran dog the"}]
    summary = summarize(examples, answers, passages)["prose"]
    assert summary["english_word_share"] == 1.0 and summary["english_bigram_share"] == 0.5
