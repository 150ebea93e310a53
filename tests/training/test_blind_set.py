"""The blind test set (``canvaslab.training.tasks.blind``): deterministic bytes whose hash is the registered one,
its own grammar (no prompt equal to, or sharing a fixed word 5-gram with, a sampled training, in-template
held-out or held-out-template prompt), and canonical answers that its checkers score right."""

from __future__ import annotations

import json
import random

import pytest

from canvaslab.training.evaluate import judge
from canvaslab.training.tasks import Mixture, blind, grammar
from canvaslab.training.tasks.base import split_of

SAMPLES = 3_000  # training prompts per data version


@pytest.fixture(scope="module")
def blind_set() -> list[blind.Example]:
    return blind.blind_examples()


@pytest.fixture(scope="module")
def known_prompts() -> list[str]:
    """Sampled training prompts of both data versions, and the in-template and held-out-template splits."""
    prompts = []
    for data in ("shipped", "grammar"):
        mixture = Mixture(None, data=data)
        rng = random.Random(11)
        prompts += [mixture.sample(rng, "train").prompt for _ in range(SAMPLES)]
        prompts += [e.prompt for task in blind.BLIND_TASKS for e in mixture.heldout(task, 100)]
    prompts += [e.prompt for task in blind.BLIND_TASKS for e in Mixture(None).heldout_templates(task, 100)]
    return prompts


def test_another_seed_gives_another_set():
    assert blind.set_sha256(per_task=5, seed=blind.BLIND_SEED + 1) != blind.set_sha256(per_task=5)


def test_every_task_has_its_stated_size_of_distinct_prompts(blind_set):
    for task in blind.BLIND_TASKS:
        prompts = [e.prompt for e in blind_set if e.task == task]
        assert len(prompts) == len(set(prompts)) == blind.PER_TASK


def test_each_line_names_task_prompt_reference_and_checker():
    lines = blind.set_bytes(per_task=3).decode("ascii").splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 3 * len(blind.BLIND_TASKS)
    assert {r["task"] for r in records} == set(blind.BLIND_TASKS)
    for record in records:
        assert {"id", "task", "prompt", "reference", "checker"} <= set(record)
        assert record["checker"] == blind.CHECKERS[record["regime"]]
        assert blind.example_of(record).prompt == record["prompt"]


def test_no_blind_item_reaches_a_training_or_heldout_template():
    assert blind.reaching_items() == []


@pytest.mark.slow
def test_no_blind_prompt_is_a_sampled_training_or_heldout_prompt(blind_set, known_prompts):
    known = {p.lower() for p in known_prompts}
    assert not [e.prompt for e in blind_set if e.prompt.lower() in known]


@pytest.mark.slow
def test_no_blind_prompt_shares_a_fixed_5gram_with_a_sampled_training_or_heldout_prompt(blind_set, known_prompts):
    known = set().union(*(grammar.fixed_ngrams(p) for p in known_prompts))
    shared = {e.prompt: grammar.fixed_ngrams(e.prompt) & known for e in blind_set}
    assert not {prompt: grams for prompt, grams in shared.items() if grams}


def test_the_guard_refuses_instances_of_training_and_heldout_templates():
    assert blind.reaches_known("What is 12 + 34?", "What is 12 + 34?")  # shipped
    assert blind.reaches_known("Increase 12 by 34.", "Hi! Increase 12 by 34.")  # grammar
    assert blind.reaches_known("Total up 12 and 34.", "Total up 12 and 34.")  # held-out template
    assert blind.reaches_known("x", "Now create a JSON object containing a = 1.")  # a fixed 5-gram
    assert not blind.reaches_known("Please total 12 with 34.", "Please total 12 with 34.")


def test_blind_wrappers_are_neither_training_nor_heldout_wrappers():
    ours = {w.strip().lower() for w in (*blind.OPENERS, *blind.CLOSERS) if w.strip()}
    assert ours and not ours & blind.known_wrappers()


def test_sums_and_word_problems_use_operand_pairs_held_out_of_training(blind_set):
    for example in blind_set:
        parts = example.key.split(":")
        if example.task in ("add2", "add3"):
            assert split_of(f"add:{parts[-1]}") == "heldout"
        elif example.task == "word":
            assert split_of(f"word:{parts[2][:4]}:{parts[-2]}:{parts[-1]}") == "heldout"


@pytest.mark.parametrize("task", [t for t in blind.BLIND_TASKS if t != "code"])
def test_canonical_answers_score_right_and_a_wrong_answer_wrong(task):
    for example in blind.task_items(task, 10):
        assert judge(example, example.answer) is True
        assert judge(example, "I do not know.") is False


def test_canonical_code_passes_its_tests_in_the_sandbox():
    for example in blind.task_items("code", 2):
        assert judge(example, example.answer) is True
        assert judge(example, "```python\ndef nothing(x):\n    return x\n```") is False


def test_the_registered_hash_is_the_sets():
    registration = blind.registered()
    assert registration["generator_version"] == blind.GENERATOR_VERSION
    assert (registration["seed"], registration["per_task"]) == (blind.BLIND_SEED, blind.PER_TASK)
    assert blind.set_sha256(registration["per_task"], registration["seed"]) == registration["sha256"]
