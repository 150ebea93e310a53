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




def test_frequent_word_salad_passes_the_pair_share_but_not_the_frequent_word_share(tmp_path):
    # Session 25's arm D wrote "the the, of the, to to of": every pair of frequent words occurs somewhere
    rare = [first + vowel + "x" for first in "bcdfghk" for vowel in "aeiou"]  # 35 words, each once
    passages = tmp_path / "passages.txt"
    passages.write_text("the cat and the dog. " * 30 + "the the and and " + " ".join(rare) + ".\n")
    examples = [Example("prose", "open_ended", "k1", "Continue: The dog", " ".join(rare[-4:]) + ".")]
    salad = summarize(examples, [{"text": "the the cat, and the dog the and"}], passages)["prose"]
    english = summarize(examples, [{"text": " ".join(rare[-6:])}], passages)["prose"]
    assert salad["english_bigram_share"] == english["english_bigram_share"] == 1.0
    assert salad["frequent_word_share"] == 1.0 > english["frequent_word_share"] == 0.0
    assert salad["reference_frequent_word_share"] == english["reference_frequent_word_share"] == 0.0


def test_the_sibling_answers_greedily_by_default_and_samples_at_a_temperature():
    import torch
    from transformers import Gemma4ForCausalLM

    from canvaslab.models.mini import ar_sibling_config, load_mini_tokenizer
    from canvaslab.training.evaluate import answer_causal

    torch.manual_seed(0)
    model = Gemma4ForCausalLM(ar_sibling_config(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                num_attention_heads=2, head_dim=16, global_head_dim=16,
                                                moe_intermediate_size=16, num_experts=4)).eval()
    examples = [Example("prose", "open_ended", "k1", "Continue: The cat", "sat.")] * 3
    answer = lambda **kw: [a["text"] for a in answer_causal(model, load_mini_tokenizer(), examples,  # noqa: E731
                                                             max_new_tokens=12, eos_ids=(), **kw)]
    greedy = answer()
    assert len(set(greedy)) == 1 and answer() == greedy  # the same prompt, the same argmax path
    torch.manual_seed(0)
    sampled = answer(temperature=5.0)  # near-uniform over 16,384 ids: three rows cannot agree by chance
    assert len(set(sampled)) == 3
