"""The held-out templates (``canvaslab.training.tasks.heldout_templates``) share nothing with training: no
template, wrapper, story, question form, JSON key name or value type, function behaviour, function or argument
name, sum width or word 5-gram of fixed template text, checked on the template sets and on 20,000 sampled
training prompts; the training sampler never reaches their generators; their reference answers score right."""

from __future__ import annotations

import json
import random
import re

import pytest

from canvaslab.scoring.probes import score
from canvaslab.scoring.probes.probe import make_probe
from canvaslab.training.tasks import EVAL_TASKS, Mixture, arithmetic, base, code, heldout_templates, knowledge, prose
from canvaslab.training.tasks import structured
from canvaslab.training.tasks.base import HELD_OUT_TEMPLATE, HELD_OUT_TEMPLATE_SPLIT, split_of

PASSAGES = [
    f"Passage number {i} opens with this sentence about the harbour. It goes on with a second sentence about "
    f"item {i}, long enough to be a real continuation of the opening one." for i in range(200)
]
SAMPLES = 20_000
N = 5  # word n-grams of fixed template text that may not be shared


@pytest.fixture(scope="module")
def mixture(tmp_path_factory):
    path = tmp_path_factory.mktemp("prose") / "passages.txt"
    path.write_text("\n".join(PASSAGES) + "\n", encoding="utf-8")
    return Mixture(path)


@pytest.fixture(scope="module")
def training(mixture):
    rng = random.Random(7)
    return [mixture.sample(rng, "train") for _ in range(SAMPLES)]


@pytest.fixture(scope="module")
def template_examples(mixture):
    return {task: mixture.heldout_templates(task, 200) for task in mixture.template_tasks()}


_PLACEHOLDER = re.compile(r"\{[a-z]+\}")
_TOKEN = re.compile(r"[a-z_']+|\d+|[+\-*/%<>=]+")


def words(text: str) -> list[str]:
    """Lower-cased words and operators; a number or a placeholder is ``_``."""
    tokens = _TOKEN.findall(_PLACEHOLDER.sub(" _ ", text.lower()))
    return ["_" if token.isdigit() else token for token in tokens]


def ngrams(text: str, fixed_only: bool = False) -> set[tuple[str, ...]]:
    tokens = words(text)
    grams = {tuple(tokens[i:i + N]) for i in range(len(tokens) - N + 1)}
    return {g for g in grams if "_" not in g} if fixed_only else grams


class _Placeholders(random.Random):
    """An rng that makes the training JSON generators write their templates: every choice ``{v}``."""

    def __init__(self, coin: float) -> None:
        super().__init__(0)
        self.coin = coin

    def choice(self, seq):
        return "{v}"

    def randint(self, a, b):
        return 4242

    def random(self):
        return self.coin


def training_templates() -> dict[str, set[str]]:
    json_cores = set()
    for coin in (0.0, 0.99):
        for make in structured.RECORDS.values():
            _, cores = make(_Placeholders(coin))
            json_cores |= {core.replace("4242", "{v}") for core in cores}
    return {
        "sum": set(arithmetic.ADDITION_CORES),
        "word": set(arithmetic.GAIN_STORIES + arithmetic.LOSS_STORIES),
        "fact": {q for qs in knowledge.QUESTIONS.values() for q in qs} | set(knowledge.STATEMENT_CORES),
        "json": json_cores,
        "code": set(code.CORES) | {d for f in code.FAMILIES.values() for d in f.describe},
        "prose": set(prose.CORES),
    }


def heldout_template_texts() -> dict[str, set[str]]:
    placeholder_values = {"skills": ["{v}"]}
    json_cores = {core({key: placeholder_values.get(key, "{v}") for key in "title pages rating hardcover team "
                        "salary remote skills destination nights cost booked station temperature humidity sunny".split()})
                  for record in heldout_templates.RECORDS.values() for core in record.cores}
    return {
        "sum": set(heldout_templates.ADDITION_CORES),
        "word": set(heldout_templates.GAIN_STORIES + heldout_templates.LOSS_STORIES),
        "fact": {q for qs in heldout_templates.QUESTIONS.values() for q in qs},
        "json": json_cores,
        "code": set(heldout_templates.CODE_CORES) | {d for f in heldout_templates.FAMILIES.values() for d in f.describe},
        "prose": set(heldout_templates.PROSE_CORES),
    }


def test_every_evaluation_task_has_held_out_templates(mixture):
    assert set(EVAL_TASKS) <= set(mixture.template_tasks())
    assert "add_mixed" in mixture.template_tasks()
    assert "prose" not in Mixture(None).template_tasks()


def test_template_sets_are_disjoint_from_the_training_ones():
    trained, heldout = training_templates(), heldout_template_texts()
    every_trained = set().union(*trained.values())
    every_trained_grams = set().union(*(ngrams(t) for t in every_trained))
    for family, templates in heldout.items():
        assert templates and not templates & every_trained, family
        for template in templates:
            shared = ngrams(template) & every_trained_grams
            assert not shared, f"{family}: {template!r} shares {sorted(shared)[:3]} with a training template"
    assert set(heldout_templates.PREFIXES) & set(base.PREFIXES) == {""}
    assert set(heldout_templates.SUFFIXES) & set(base.SUFFIXES) == {""}


def test_names_keys_types_behaviours_and_widths_are_new():
    assert not set(heldout_templates.NAMES) & set(arithmetic.NAMES)
    assert not set(heldout_templates.ITEMS) & set(arithmetic.ITEMS)
    assert not set(heldout_templates.ARGUMENTS) & {"x", "n", "value"}
    trained_bodies = {f.body for f in code.FAMILIES.values()}
    assert not {f.body for f in heldout_templates.FAMILIES.values()} & trained_bodies
    trained_names = {name for f in code.FAMILIES.values() for name in f.names}
    for family in heldout_templates.FAMILIES.values():
        assert not set(family.names) & trained_names
        assert not any(name.startswith(t.removesuffix("_k")) for name in family.names for t in trained_names)
    rng = random.Random(0)
    trained_keys = {key for _ in range(300) for make in structured.RECORDS.values() for key in make(rng)[0]}
    heldout_keys = {key for record in heldout_templates.RECORDS.values() for key in record.make(rng)}
    assert trained_keys and heldout_keys and not trained_keys & heldout_keys
    assert {width for pair in heldout_templates.MIXED_WIDTHS for width in pair} == {1, 2, 3}
    assert all(a != b for a, b in heldout_templates.MIXED_WIDTHS)


def test_the_training_sampler_never_produces_a_held_out_template(training, template_examples):
    assert all(e.split == "train" and not e.key.startswith(HELD_OUT_TEMPLATE) for e in training)
    train_prompts = {e.prompt for e in training}
    train_grams = set().union(*(ngrams(e.prompt) for e in training))
    heldout_fixed = set().union(*(ngrams(t, fixed_only=True) for ts in heldout_template_texts().values() for t in ts))
    assert heldout_fixed and not heldout_fixed & train_grams
    trained_fixed = set().union(*(ngrams(t, fixed_only=True) for ts in training_templates().values() for t in ts))
    for task, examples in template_examples.items():
        assert len(examples) == 200 and len({e.prompt for e in examples}) == 200, task
        assert all(e.split == HELD_OUT_TEMPLATE_SPLIT and split_of(e.key) == HELD_OUT_TEMPLATE_SPLIT for e in examples)
        assert not {e.prompt for e in examples} & train_prompts, task
        for example in examples:
            assert not ngrams(example.prompt) & trained_fixed, (task, example.prompt)
    # what training writes: JSON keys, sum widths, function bodies
    json_keys = {key for e in training if e.task == "json" for key in e.reference["required_values"]}
    assert json_keys and not json_keys & {k for e in template_examples["json"] for k in e.reference["required_values"]}
    widths = {tuple(len(n) for n in re.findall(r"\d+", e.answer)[:2]) for e in training if e.task in ("add2", "add3")}
    assert widths == {(2, 2), (3, 3)}
    assert all(len(set(map(len, re.findall(r"\d+", e.answer)[:2]))) == 2 for e in template_examples["add_mixed"])
    trained_bodies = {e.answer.split("return ")[1].split("\n")[0] for e in training if e.task == "code"}
    heldout_bodies = {e.answer.split("return ")[1].split("\n")[0] for e in template_examples["code"]}
    assert not trained_bodies & heldout_bodies
    value_types = {type(v) for e in template_examples["json"] for v in e.reference["required_values"].values()}
    assert {float, list} <= value_types
    assert not {float, list} & {type(v) for e in training if e.task == "json"
                                for v in e.reference["required_values"].values()}


def test_held_out_sums_and_passages_are_never_trained_in_any_wording(mixture, template_examples):
    for task in ("add2", "add3"):
        for example in template_examples[task]:
            a, b = re.findall(r"\d+", example.answer)[:2]
            assert split_of(f"add:{a}+{b}") == "heldout"
    heldout_passages = {prose.passage_key(p) for p in PASSAGES if split_of(prose.passage_key(p)) == "heldout"}
    assert heldout_passages
    assert {e.key.rsplit(":", 1)[-1] for e in template_examples["prose"]} <= {k.split(":")[1] for k in heldout_passages}


def test_reference_answers_score_right(template_examples):
    for task, examples in template_examples.items():
        for example in examples[:20] if task != "code" else examples[:3]:
            if example.regime == "open_ended":
                continue
            probe = make_probe(example.regime, example.key, example.prompt, example.reference)
            assert score(probe, example.answer) is True, (task, example.prompt, example.answer)
            if example.regime == "json":
                assert json.loads(example.answer) == example.reference["required_values"]


def test_held_out_templates_are_reproducible_and_seeded(mixture):
    assert mixture.heldout_templates("fact", 10, seed=0) == mixture.heldout_templates("fact", 10, seed=0)
    assert mixture.heldout_templates("fact", 10, seed=0) != mixture.heldout_templates("fact", 10, seed=1)
