"""Every prompt must be long enough, after the model's own tokenization, for how the study encodes it: the
copied prompt cache holds all its tokens but the last, so it needs 2. Checked before any unit runs."""

import pytest

import canvaslab
from canvaslab.errors import CanvaslabError
from canvaslab.prompts import Prompt
from canvaslab.studies.batch_size import BatchStudySettings
from canvaslab.studies.batch_size.study import BatchSizeStudy as Units


def test_api_refuses_a_one_token_prompt_before_any_unit(tmp_path):
    plan = canvaslab.BatchSizeStudy(prompts=["the man said that the water was cold", "hello"], batch_sizes=(1, 2),
                                    steps=1, repeat_control="same-process")
    out = tmp_path / "study"
    with pytest.raises(CanvaslabError) as error:
        plan.run(out)
    message = str(error.value)
    assert "text-1" in message and "hello" in message and "1 token" in message
    assert "at least 2" in message and "--no-copy-prompt-cache" in message
    assert not out.exists()  # no store left behind, no failure note


def _prepare(tiny, texts, copy_prompt_cache):
    prompts = [Prompt(f"p{i}", text) for i, text in enumerate(texts)]
    settings = BatchStudySettings(batch_sizes=[1, 2], copy_prompt_cache=copy_prompt_cache)
    return Units({"source": "tiny"}, prompts, settings, loaded=tiny).prepare()


def test_one_token_prompts_need_the_prompt_encoded_in_the_batch(tiny):
    assert tiny.tokenizer("hello")["input_ids"] == [3]  # one <unk>: the tiny tokenizer adds no <bos>
    with pytest.raises(CanvaslabError, match="p1"):
        _prepare(tiny, ["tell a story", "hello"], copy_prompt_cache=True)
    assert _prepare(tiny, ["hello"], copy_prompt_cache=False).encoded == {"p0": [3]}


class _Dropping:
    """A tokenizer that drops what it does not know: a prompt can come out empty."""

    def __call__(self, text):
        return {"input_ids": []}


def test_an_empty_prompt_after_tokenization_is_refused_without_the_cache(tiny, monkeypatch):
    monkeypatch.setattr(tiny, "tokenizer", _Dropping())
    with pytest.raises(CanvaslabError, match="prompt .hello. encodes to no tokens"):
        _prepare(tiny, ["hello"], copy_prompt_cache=False)
