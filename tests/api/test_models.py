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
    eos_ids, pad = set(out.settings["eos_token_id"]), out.settings["pad_token_id"]
    assert [row.eos_position for row in out.rows] == [58, 1]  # both rows end inside a 256-token canvas
    for row in out.rows:
        assert len(row.tokens) == row.eos_position and not eos_ids & set(row.tokens)
        assert row.tokens[-1:] != (pad,)
        assert loaded.tokenizer.decode(list(row.tokens), skip_special_tokens=True) == row.text
    assert out.tokens == [row.tokens for row in out.rows]


def test_a_row_that_used_its_budget_keeps_every_generated_token(monkeypatch):
    def runner(loaded, ids, **kwargs):
        rows = [RowResult(list(prompt), [7, 8, 9], "seven eight nine", [None], [2], None) for prompt in ids]
        return GenerationOutput(rows=rows, settings={"pad_token_id": 0})

    monkeypatch.setattr(generation, "generate", runner)
    out = canvaslab.generate("The river", model=canvaslab.load_model("tiny"))
    assert out.tokens == [(7, 8, 9)] and out.rows[0].eos_position is None
