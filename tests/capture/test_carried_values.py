"""A difference made in what one denoising pass hands to the next is named as that carried value.

Between decoder passes, transformers' loop hands on two values computed outside any module: the
renoised canvas (``sampler.renoise_canvas``) and the self-conditioning logits (the pass's processed
logits). A difference planted there, in one element of row 0 after pass ``k`` only, must be reported as
created in that hand-over, from pass ``k``, not as unrecorded code somewhere inside pass ``k + 1``.
"""

import pytest

from canvaslab.capture import Recorder, compare_captures
from canvaslab.generation import generate
from canvaslab.generation.sampler import RowKeyedSampler

STEPS = 4


def _plant_in_renoised_canvas(monkeypatch, model, after_pass):
    """Change one token of row 0's renoised canvas, handed from pass ``after_pass`` to the next."""
    original, calls = RowKeyedSampler.renoise_canvas, []

    def renoise(self, accepted_canvas, cur_step):
        canvas = original(self, accepted_canvas, cur_step)
        if len(calls) == after_pass:
            canvas = canvas.clone()
            canvas[0, 5] = (canvas[0, 5] + 1) % self.vocab_size
        calls.append(cur_step)
        return canvas

    monkeypatch.setattr(RowKeyedSampler, "renoise_canvas", renoise)
    return []


def _plant_in_self_conditioning(monkeypatch, model, after_pass):
    """Change one of row 0's self-conditioning logits as pass ``after_pass + 1`` receives them."""
    passes = []

    def bump(module, args, kwargs):
        passes.append(None)
        if len(passes) == after_pass + 2:  # the decoder's (after_pass + 1)-th call, 0-based
            logits = kwargs["self_conditioning_logits"].clone()
            logits[0, 5, 7] += 0.5
            return args, {**kwargs, "self_conditioning_logits": logits}
        return None

    return [model.model.decoder.register_forward_pre_hook(bump, with_kwargs=True)]


def _capture(tiny, ids):
    recorder = Recorder(tiny.model, 1)
    with recorder:
        generate(tiny, [ids], seed=2, observers=[recorder], generation={"max_denoising_steps": STEPS})
    return recorder.capture


@pytest.mark.parametrize("plant, value", [(_plant_in_renoised_canvas, "renoised canvas"),
                                          (_plant_in_self_conditioning, "self_conditioning_logits")])
@pytest.mark.parametrize("after_pass", [0, 2])
def test_difference_in_a_carried_value_is_named_as_that_value(tiny, prompt_ids, monkeypatch, plant, value, after_pass):
    reference = _capture(tiny, prompt_ids)
    with monkeypatch.context() as patch:
        handles = plant(patch, tiny.model, after_pass)
        try:
            planted = _capture(tiny, prompt_ids)
        finally:
            for handle in handles:
                handle.remove()
    comparison = compare_captures(reference, planted)
    first = comparison.first
    assert (first.pass_key.phase, first.pass_key.step) == ("decoder", after_pass + 1)
    assert first.kind == "carried"
    assert comparison.origin["name"] == f"carried: {value} from canvas 0 pass {after_pass}"
    assert comparison.origin["kind"] == "carried" and comparison.origin["inputs_identical"] is True
    # every pass counts: the prompt's encoder pass, then decoder passes 0..after_pass match
    before = [key for key in reference.by_pass() if key.phase != "decoder" or key.step <= after_pass]
    assert comparison.passes_matching == len(before) == after_pass + 2


def test_carried_values_are_not_counted_as_compared_bytes_twice(tiny, prompt_ids):
    capture = _capture(tiny, prompt_ids)
    carried = [r for r in capture.records if r.kind == "carried"]
    # every decoder pass receives a canvas; every pass but a canvas's first also receives logits
    assert sorted(r.name for r in carried) == sorted(["carried.canvas"] * STEPS + ["carried.self_conditioning_logits"] * (STEPS - 1))
    comparison = compare_captures(capture, capture)
    assert comparison.bytes_compared == sum(r.nbytes for r in capture.records if r.kind in ("module", "sampler"))
