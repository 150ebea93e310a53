"""The `mini` data generators: deterministic, held-out items never generated for training, varied
phrasings, and every reference answer judged correct by the commit-order study's scorers."""

from __future__ import annotations

import random
import re

import pytest

from canvaslab.errors import CanvaslabError
from canvaslab.scoring.probes import score
from canvaslab.scoring.probes.probe import make_probe
from canvaslab.training.tasks import (EVAL_TASKS, MIXTURE, TOKENIZER_STYLE, AnswerStyle, Mixture, mixture_shares, parse_shares,
                                     split_of)
from canvaslab.training.tasks.arithmetic import SUM_FORMATS, written_sum
from canvaslab.training.tasks.base import TRAIN_ONLY, phrase
from canvaslab.training.tasks.knowledge import KB_SIZE, knowledge_base
from canvaslab.training.tasks.prose import load_passages, prepare_passages

PASSAGES = [
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want "
    "of a wife. However little known the feelings or views of such a man may be on his first entering a "
    "neighbourhood, this truth is so well fixed in the minds of the surrounding families.",
    "The state of the Union is strong. We have come through a hard year together, and we have learned much about "
    "what we can do when we work as one. Our task now is to build on what we have done.",
]


@pytest.fixture(scope="module")
def passages(tmp_path_factory):
    path = tmp_path_factory.mktemp("prose") / "passages.txt"
    path.write_text("\n".join(PASSAGES * 20) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def mixture(passages):
    return Mixture(passages)


def test_same_seed_same_examples_other_seed_other_examples(mixture):
    rng = random.Random(1)
    a = [mixture.sample(rng) for _ in range(50)]
    rng = random.Random(1)
    assert a == [mixture.sample(rng) for _ in range(50)]
    rng = random.Random(2)
    assert a != [mixture.sample(rng) for _ in range(50)]


def test_training_draws_are_never_held_out_and_never_share_a_held_out_prompt(mixture):
    rng = random.Random(0)
    training = [mixture.sample(rng, "train") for _ in range(20_000)]
    assert all(example.split == "train" for example in training)
    train_prompts = {example.prompt for example in training}
    train_keys = {example.key for example in training}
    for task in EVAL_TASKS:
        if task == "prose":
            continue  # two passages: both halves exist only with a real corpus (next test)
        heldout = mixture.heldout(task, 30)
        assert len(heldout) == 30 and all(example.split == "heldout" for example in heldout)
        assert not {example.prompt for example in heldout} & train_prompts, task
        assert not {example.key for example in heldout} & train_keys, task


def test_split_is_a_function_of_the_key_alone_and_holds_out_about_a_tenth():
    keys = [f"add:{a}+{b}" for a in range(10, 100) for b in range(10, 100)]
    share = sum(split_of(key) == "heldout" for key in keys) / len(keys)
    assert 0.08 < share < 0.12
    assert [split_of(k) for k in keys[:100]] == [split_of(k) for k in keys[:100]]
    assert split_of(f"{TRAIN_ONLY}anything") == "train"


def test_factual_heldout_asks_trained_facts_in_wordings_never_trained(mixture):
    rng = random.Random(3)
    trained_wordings = {e.key for e in (mixture.sample(rng, "train") for _ in range(20_000)) if e.task == "fact"}
    for example in mixture.heldout("fact", 40):
        assert example.key not in trained_wordings
        country = next(c for c in knowledge_base() if c.name.lower() in example.prompt.lower())
        assert example.reference["answers"][0] in {country.capital, country.language, str(country.founded)}


def test_knowledge_base_is_fixed_and_unambiguous():
    base = knowledge_base()
    assert len(base) == KB_SIZE
    names = [c.name for c in base] + [c.capital for c in base] + [c.language for c in base]
    assert len(set(names)) == len(names)
    assert base[0] == knowledge_base()[0]


def test_several_phrasings_per_task(mixture):
    rng = random.Random(5)
    for task in ("add2", "fact", "json", "code"):
        prompts = [mixture.makers[task](rng).prompt for _ in range(200)]
        openings = {p.split()[0].lower() for p in prompts}
        assert len(openings) >= 5, (task, openings)


def test_phrase_keeps_case_when_asked():
    rng = random.Random(0)
    texts = [phrase(rng, "Name Ada")[0] for _ in range(300)]
    assert any(t == t.lower() for t in texts)
    rng = random.Random(0)
    assert all("Ada" in phrase(rng, "Name Ada", lowercase=False)[0] for _ in range(300))


@pytest.mark.parametrize("task", ["add2", "add3", "word", "fact", "json", "code"])
def test_reference_answers_pass_the_study_scorers(mixture, task):
    for example in mixture.heldout(task, 4):
        probe = make_probe(example.regime, example.key, example.prompt, example.reference)
        assert score(probe, example.answer) is True, example
        assert score(probe, "I do not know.") is False


@pytest.mark.parametrize("sum_format", SUM_FORMATS)
@pytest.mark.parametrize("digits", [2, 3])
def test_every_sum_format_ends_with_the_sum_at_a_fixed_width(sum_format, digits):
    rng = random.Random(digits)
    for _ in range(300):
        a, b = (rng.randint(10 ** (digits - 1), 10**digits - 1) for _ in range(2))
        written = written_sum(a, b, digits, sum_format)
        last = re.findall(r"[0-9]+", written)[-1]
        assert int(last) == a + b and written.startswith(f"{a} + {b}") and written.endswith(f"{last}.")
        assert sum_format == "plain" or len(last) == digits + 1  # units always at the same place


def test_the_columns_format_writes_each_column_with_its_carry_units_first():
    assert written_sum(24, 67, 2, "columns") == "24 + 67: 4 + 7 = 11, 2 + 6 + 1 = 09, so 091."
    assert written_sum(999, 999, 3, "columns") == "999 + 999: 9 + 9 = 18, 9 + 9 + 1 = 19, 9 + 9 + 1 = 19, so 1998."
    rng = random.Random(7)
    for _ in range(300):
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        columns = re.findall(r"(\d) \+ (\d)(?: \+ (\d))? = (\d\d)", written_sum(a, b, 3, "columns"))
        assert len(columns) == 3
        carry = 0
        for place, (x, y, c, total) in enumerate(columns):
            assert (int(x), int(y)) == (a // 10**place % 10, b // 10**place % 10)
            assert int(c or 0) == carry and int(total) == int(x) + int(y) + carry
            carry = int(total) // 10


@pytest.mark.parametrize("sum_format", SUM_FORMATS)
def test_the_sum_format_changes_answers_only(passages, sum_format):
    """Prompts, held-out keys and references are the same in every format: a model trained on one is scored on
    the same held-out prompts as one trained on another."""
    plain, other = Mixture(passages, TOKENIZER_STYLE), Mixture(passages, AnswerStyle(sum_format=sum_format))
    for task in ("add2", "add3"):
        for a, b in zip(plain.heldout(task, 20), other.heldout(task, 20)):
            assert (a.prompt, a.key, a.reference) == (b.prompt, b.key, b.reference)
            assert int(re.findall(r"[0-9]+", a.answer)[-1]) == int(re.findall(r"[0-9]+", b.answer)[-1])
            full_width = len(a.reference["answer"]) > int(task[-1])  # nothing for padding to add
            assert (a.answer == b.answer) == (sum_format == "plain" or (sum_format == "padded" and full_width))


def test_an_unknown_answer_style_is_refused():
    with pytest.raises(CanvaslabError, match="sum format 'roman'"):
        AnswerStyle(sum_format="roman")


def test_prose_passages_from_the_corpus_narrative_sources(tmp_path):
    corpus = tmp_path / "english.txt"
    documents = ["A dictionary line; not prose", " ".join(PASSAGES), "Fortune: short."]
    corpus.write_text("\n\n".join(documents), encoding="utf-8")
    (tmp_path / "english.manifest.json").write_text(
        '{"document_separator": "\\n\\n", "sources": [{"name": "wordnet", "documents": 1}, '
        '{"name": "janeausten", "documents": 1}, {"name": "fortunes", "documents": 1}]}', encoding="utf-8")
    out = tmp_path / "passages.txt"
    count = prepare_passages(corpus, out)
    texts = load_passages(str(out))
    assert count == len(texts) >= 1
    assert all("dictionary" not in t and "Fortune" not in t for t in texts)
    assert any(t.startswith("It is a truth universally acknowledged") for t in texts)
    example = Mixture(out).makers["prose"](random.Random(0))
    assert example.regime == "open_ended" and example.answer and example.answer in " ".join(PASSAGES)


def test_mixture_weights_cover_every_task():
    assert abs(sum(MIXTURE.values()) - 1.0) < 1e-9
    assert set(EVAL_TASKS) <= set(MIXTURE)


def test_the_default_answer_style_is_the_shipped_models():
    # `canvaslab mini train` with its defaults writes the training answers as the shipped `mini` saw them
    assert AnswerStyle() == TOKENIZER_STYLE


def test_share_overrides_change_the_training_draws_and_never_the_held_out_examples(passages):
    default, weighted = Mixture(passages), Mixture(passages, shares={"add3": 0.5, "prose": 0.0})
    drawn = [weighted.sample(random.Random(f"draw/{i}")).task for i in range(2000)]
    assert "prose" not in drawn and 0.4 < drawn.count("add3") / len(drawn) < 0.6
    for task in set(EVAL_TASKS) - {"prose"}:  # (the fixture's two passages hold none out)
        assert [e.prompt for e in weighted.heldout(task, 5)] == [e.prompt for e in default.heldout(task, 5)]


def test_without_overrides_the_draws_are_the_earlier_runs(passages):
    # the pools of runs 1-6 (drawn before shares could be changed) come out again bit for bit only if the tasks are
    # drawn with MIXTURE's own numbers in its order: scaled or reordered weights would change rng.choices' picks
    for shares in (None, {}):
        mixture = Mixture(passages, shares=shares)
        assert mixture.tasks == list(MIXTURE) and mixture.weights == list(MIXTURE.values())
    weighted = Mixture(passages, shares={"add3": 0.27})  # an override: every share scaled by 1 / 1.09
    assert abs(weighted.weights[weighted.tasks.index("add3")] - 0.27 / 1.09) < 1e-12


def test_mixture_shares_are_scaled_to_one_and_bad_ones_refused():
    shares = mixture_shares({"add3": 0.27, "fact": 0.10, "code": 0.07})
    assert abs(sum(shares.values()) - 1) < 1e-12 and abs(shares["add3"] - 0.27) < 1e-9
    assert parse_shares(" add3=0.27 , fact=0.1,") == {"add3": 0.27, "fact": 0.1}
    for bad in ({"add4": 0.1}, {"add3": float("nan")}, {task: 0.0 for task in MIXTURE}):
        with pytest.raises(CanvaslabError):
            mixture_shares(bad)
