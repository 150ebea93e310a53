"""A trained model is asked, by default, questions it answers in words, each as a user turn of its chat template;
the presets' synthetic tokenizers keep their plain sentences."""

from __future__ import annotations

from canvaslab.api import BatchSizeStudy
from canvaslab.prompts import BUILTIN_PROMPTS, QUESTION_PROMPTS
from canvaslab.studies.batch_size import BatchStudySettings
from canvaslab.studies.batch_size.study import BatchSizeStudy as Units


def test_built_in_prompts_are_questions_for_a_trained_model_and_sentences_for_a_preset():
    assert [p.text for p in BatchSizeStudy(model="mini", prompts=2).prompt_list()] == list(QUESTION_PROMPTS[:2])
    assert [p.text for p in BatchSizeStudy(model="tiny", prompts=2).prompt_list()] == list(BUILTIN_PROMPTS[:2])
    assert len(QUESTION_PROMPTS) == len(BUILTIN_PROMPTS)


class _Tokenizer:
    def __init__(self, template):
        self.chat_template = template

    def __call__(self, text):
        return {"input_ids": [len(word) for word in text.split()]}

    def apply_chat_template(self, messages, **kwargs):
        return {"input_ids": [7, *self(messages[0]["content"])["input_ids"], 9]}


def test_prompts_are_encoded_through_the_chat_template_when_the_tokenizer_has_one():
    prompts = BatchSizeStudy(model="mini", prompts=1).prompt_list()
    units = Units({"spec": "mini"}, prompts, BatchStudySettings(batch_sizes=[1, 2]))
    assert units.encoded(_Tokenizer("{{ messages }}")) == {"builtin-0": [7, 4, 3, 7, 2, 14, 9]}
    assert units.encoded(_Tokenizer(None)) == {"builtin-0": [4, 3, 7, 2, 14]}
