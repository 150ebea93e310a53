"""Distilled prose answers (``canvaslab.training.distill``, ``AnswerStyle.prose_answers``): a teacher's
continuations replace the training answers only; prompts, held-out examples and their references stay the
passages' own, and a file written for other passages is refused."""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from canvaslab.errors import CanvaslabError
from canvaslab.training.tasks import AnswerStyle, Mixture
from canvaslab.training.tasks.base import split_of
from canvaslab.training.tasks.prose import ANSWERS_FORMAT, checked_answers_file, load_answers, passage_key

PASSAGES = [f"Passage number {i} begins with this sentence. It goes on with a second one about item {i}, "
            f"which is long enough to be a real continuation of the opening sentence." for i in range(80)]


@pytest.fixture(scope="module")
def passages(tmp_path_factory):
    path = tmp_path_factory.mktemp("distill") / "passages.txt"
    path.write_text("\n".join(PASSAGES) + "\n", encoding="utf-8")
    return path


def _answers_file(path, passages, answers=None, **header):
    train = [p for p in PASSAGES if split_of(passage_key(p)) == "train"]
    content = {"format": ANSWERS_FORMAT, "passages_sha256": hashlib.sha256(passages.read_bytes()).hexdigest(),
               "answers": answers if answers is not None else {passage_key(p): f"TEACHER {passage_key(p)}" for p in train},
               **header}
    path.write_text(json.dumps(content), encoding="utf-8")
    return path


def test_the_fixture_holds_passages_of_both_splits():
    splits = [split_of(passage_key(p)) for p in PASSAGES]
    assert "heldout" in splits and "train" in splits


def test_teacher_answers_replace_the_training_answers_and_nothing_else(passages, tmp_path):
    answers = _answers_file(tmp_path / "answers.json", passages)
    own, taught = Mixture(passages), Mixture(passages, AnswerStyle(prose_answers=str(answers)))
    rng_own, rng_taught = random.Random(3), random.Random(3)
    prose_seen = 0
    for _ in range(300):
        a, b = own.sample(rng_own), taught.sample(rng_taught)
        assert (a.task, a.prompt, a.key, a.reference) == (b.task, b.prompt, b.key, b.reference)
        if a.task == "prose":
            prose_seen += 1
            assert b.answer == f"TEACHER {a.key}" and a.answer == a.reference["reference_continuation"]
        else:
            assert a.answer == b.answer
    assert prose_seen > 20
    for task in ("prose", "add3"):
        assert own.heldout(task, 5) == taught.heldout(task, 5)  # the evaluation is unchanged


def test_answers_for_other_passages_or_not_an_answers_file_are_refused(passages, tmp_path):
    other = _answers_file(tmp_path / "other.json", passages, passages_sha256="0" * 64)
    with pytest.raises(CanvaslabError, match="written for other passages"):
        Mixture(passages, AnswerStyle(prose_answers=str(other)))
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(CanvaslabError, match="not readable as JSON"):
        checked_answers_file(tmp_path / "junk.json", passages)
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(CanvaslabError, match=f"not a {ANSWERS_FORMAT} file"):
        checked_answers_file(tmp_path / "list.json", passages)
    with pytest.raises(CanvaslabError, match="no such file"):
        checked_answers_file(tmp_path / "none.json", passages)
    with pytest.raises(CanvaslabError, match="needs --passages"):
        checked_answers_file(other, None)
    with pytest.raises(CanvaslabError, match="need the passages"):
        Mixture(None, AnswerStyle(prose_answers=str(other)))


def test_distill_asks_the_teacher_about_every_training_passage_and_no_held_out_one(passages, tmp_path):
    import torch
    from transformers import Gemma4ForCausalLM

    from canvaslab.models.mini import ar_sibling_config, load_mini_tokenizer
    from canvaslab.training.distill import distill_prose, training_passages

    rows = training_passages(passages)
    assert {key for key, _, _ in rows} == {passage_key(p) for p in PASSAGES if split_of(passage_key(p)) == "train"}
    torch.manual_seed(0)
    teacher = tmp_path / "teacher"
    Gemma4ForCausalLM(ar_sibling_config(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=2, head_dim=16, global_head_dim=16,
                                        moe_intermediate_size=16, num_experts=4)).save_pretrained(teacher)
    out = tmp_path / "answers.json"
    summary = distill_prose(passages, teacher, load_mini_tokenizer(), out, max_new_tokens=6, log=lambda _: None)
    written = json.loads(out.read_text())
    assert summary["passages"] == len(rows) == len(written["answers"]) and written["decoding"] == "greedy"
    assert set(written["answers"]) == {key for key, _, _ in rows}
    assert all(text.strip() for text in written["answers"].values())
    # the file is what training reads
    assert load_answers(str(out), hashlib.sha256(passages.read_bytes()).hexdigest()) == written["answers"]


def test_a_pool_without_prose_answers_keeps_its_earlier_name_and_one_with_them_gets_its_own(passages, tmp_path):
    from canvaslab.models.mini import load_mini_tokenizer
    from canvaslab.training.loop import TrainSettings
    from canvaslab.training.run import RunSpec, _example_pool

    answers = _answers_file(tmp_path / "answers.json", passages)
    settings, tokenizer = TrainSettings(steps=1, batch_size=4), load_mini_tokenizer()
    earlier = {"count": 4, "seed": 0, "max_answer_tokens": 256, "vocabulary": len(tokenizer),
               "answers": {"sum_format": "plain"}, "passages": hashlib.sha256(passages.read_bytes()).hexdigest()}
    earlier_name = f"pool-{hashlib.sha256(json.dumps(earlier, sort_keys=True).encode()).hexdigest()[:16]}.pt"
    for style, folder in ((AnswerStyle(), "own"), (AnswerStyle(prose_answers=str(answers)), "taught")):
        _example_pool(RunSpec(tmp_path, passages, settings, examples=4, answers=style,
                              checkpoint_dir=tmp_path / folder), tokenizer)
    assert [p.name for p in (tmp_path / "own").iterdir()] == [earlier_name]
    assert [p.name for p in (tmp_path / "taught").iterdir()] != [earlier_name]


