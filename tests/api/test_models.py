"""``canvaslab.generate``'s rows: ``tokens`` are the answer's, the ones ``text`` decodes, without the
end-of-sequence token or the padding that fills the canvas after it."""

from __future__ import annotations

import canvaslab
from canvaslab import generation
from canvaslab.generation.runner import GenerationOutput, RowResult


def test_tokens_are_the_answer_without_the_end_token_or_padding():
    loaded = canvaslab.load_model("tiny")
    out = canvaslab.generate(["The river", "A much longer prompt about rivers and lakes"], model=loaded, steps=2,
                             max_new_tokens=40)
    eos_ids = set(out.settings["eos_token_id"])
    for row in out.rows:  # where a row ends depends on the machine's arithmetic; these hold wherever it ends
        assert row.eos_position is None or len(row.tokens) == row.eos_position
        assert not eos_ids & set(row.tokens)
        assert loaded.tokenizer.decode(list(row.tokens), skip_special_tokens=True) == row.text
    assert out.tokens == [row.tokens for row in out.rows]


def test_an_end_token_planted_by_the_runner_cuts_the_tokens_there(monkeypatch):
    def runner(loaded, ids, **kwargs):
        rows = [RowResult(list(prompt), [7, 8, 1, 0, 0], "seven eight", [2], [2], 2) for prompt in ids]
        return GenerationOutput(rows=rows, settings={"pad_token_id": 0, "eos_token_id": [1]})

    monkeypatch.setattr(generation, "generate", runner)
    out = canvaslab.generate("The river", model=canvaslab.load_model("tiny"))
    assert out.tokens == [(7, 8)] and out.rows[0].eos_position == 2


def test_a_row_that_used_its_budget_keeps_every_generated_token(monkeypatch):
    def runner(loaded, ids, **kwargs):
        rows = [RowResult(list(prompt), [7, 8, 9], "seven eight nine", [None], [2], None) for prompt in ids]
        return GenerationOutput(rows=rows, settings={"pad_token_id": 0})

    monkeypatch.setattr(generation, "generate", runner)
    out = canvaslab.generate("The river", model=canvaslab.load_model("tiny"))
    assert out.tokens == [(7, 8, 9)] and out.rows[0].eos_position is None


def test_a_row_gives_its_answer_tokens_cut_at_the_end_token():
    ended = RowResult([5], [7, 8, 1, 0, 0], "seven eight", [2], [2], 2)
    unended = RowResult([5], [7, 8, 9], "seven eight nine", [None], [2], None)
    assert (ended.answer_tokens, unended.answer_tokens) == ([7, 8], [7, 8, 9])
