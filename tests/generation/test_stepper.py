"""Pass-by-pass generation: in invariant mode a row's tokens, text, stop point, drafts and committed canvases are
the bytes ``canvaslab.generate`` gives it alone, whichever rows join or leave around it and at whatever pass."""

from __future__ import annotations

import pytest

from canvaslab.errors import CanvaslabError
from canvaslab.generation import generate
from canvaslab.generation.stepper import PassStepper, generate_stepwise
from canvaslab.invariant.shadowing import shadowed

TEXTS = ("the man said that the water in the river was cold", "hello", "a b c d e f g h i j k l m n o p",
         "why is the sky blue ?", "one two three")
SHORT = {"max_denoising_steps": 3, "max_new_tokens": 96}  # up to 3 canvases of 32 tokens


class _Drafts:
    """transformers' streamer protocol, recording each canvas's drafts and committed tokens of row 0."""

    def __init__(self):
        self.canvases, self.drafts, self.prompt_seen = [], [], False

    def put_draft(self, value):
        self.drafts.append(value[0].tolist())

    def put(self, value):
        if self.prompt_seen:
            self.canvases.append((self.drafts, value[0].tolist()))
            self.drafts = []
        self.prompt_seen = True

    def end(self):
        pass


def _alone(loaded, prompt, key, generation):
    """``canvaslab.generate`` of the row alone, and per canvas its drafts and committed tokens."""
    streamer, original = _Drafts(), loaded.model.generate
    with shadowed(loaded.model, "generate", lambda *a, **k: original(*a, streamer=streamer, **k)):
        [row] = generate(loaded, [prompt], rng="row", requests=[key], mode="invariant", generation=generation).rows
    return row, streamer.canvases


def _stepwise(loaded, prompts, keys, generation, **schedule):
    seen = {}

    def record(reports):
        for report in reports:
            drafts, _ = seen.setdefault(id(report.row), {}).setdefault(report.canvas, ([], None))
            drafts.append(report.draft)
            if report.committed is not None:
                seen[id(report.row)][report.canvas] = (drafts, report.committed)

    results = generate_stepwise(loaded, prompts, keys, generation=generation, on_pass=record, **schedule)
    return results, list(seen.values())


@pytest.fixture(scope="module")
def rows(tiny_short_canvas):
    prompts = [tiny_short_canvas.tokenizer(text)["input_ids"] for text in TEXTS]
    keys = [f"request {i}" for i in range(len(prompts))]
    return prompts, keys, [_alone(tiny_short_canvas, p, k, SHORT) for p, k in zip(prompts, keys)]


def _check(results, alone):
    for result, (expected, _) in zip(results, alone):
        assert (result.tokens, result.text, result.stop_point, result.passes) == \
               (expected.tokens, expected.text, expected.stop_point, expected.passes)


@pytest.mark.parametrize("schedule", [
    {},  # all at once, each leaving when done
    {"joins": [0, 1, 2, 3, 4]},  # one more row at every pass
    {"joins": [0, 0, 0, 0, 0], "max_rows": 2},  # freed slots refilled from the queue at the pass a row left
], ids=["together", "a-join-every-pass", "refilled"])
def test_every_row_is_the_bytes_it_has_alone(tiny_short_canvas, rows, schedule):
    prompts, keys, alone = rows
    results, _ = _stepwise(tiny_short_canvas, prompts, keys, SHORT, **schedule)
    assert [len(result.stop_passes) for result in results] == [len(row.stop_passes) for row, _ in alone]
    assert len({len(result.stop_passes) for result in results}) > 1  # rows left after different canvases
    _check(results, alone)


def test_drafts_and_committed_canvases_are_the_rows_alone(tiny_short_canvas, rows):
    prompts, keys, alone = rows
    order = [2, 0, 4, 1, 3]  # joins at passes 0..4 in this order
    joins = [order.index(i) for i in range(len(prompts))]
    results, streams = _stepwise(tiny_short_canvas, prompts, keys, SHORT, joins=joins)
    for started, canvases in zip(order, streams):
        assert [canvases[c] for c in sorted(canvases)] == alone[started][1]


def test_a_row_joining_amid_others_second_canvas_leaves_their_caches_alone(tiny_short_canvas, rows):
    """Rows joining while others are on their second and third canvases (longer prefixes than the joiner's)."""
    prompts, keys, alone = rows
    results, _ = _stepwise(tiny_short_canvas, prompts, keys, SHORT, joins=[0, 3, 4, 6, 7])
    _check(results, alone)


def test_a_finished_row_cannot_take_another_pass(tiny_short_canvas, rows):
    prompts, keys, _ = rows
    stepper = PassStepper(tiny_short_canvas)
    row = stepper.start(prompts[1], keys[1], {"max_denoising_steps": 1, "max_new_tokens": 32})
    [report] = stepper.step([row])
    assert report.done and report.committed is not None
    with pytest.raises(CanvaslabError, match="not done"):
        stepper.step([row])
    assert stepper.result(row).tokens == report.committed
