"""A planted one-element difference is found at the right module, pass and origin."""

import pytest

from canvaslab.capture import Recorder, compare_captures, detail
from canvaslab.generation import generate

SETTINGS = {"max_denoising_steps": 4}
MODULE = "model.decoder.layers.1.mlp.down_proj"


def _plant(model, name, step, where):
    """Perturb one element of row 0 of ``name``'s output (or input) on decoder pass ``step``."""
    module = dict(model.named_modules())[name]
    state = {"pass": -1}

    def count(*_):
        state["pass"] += 1

    def bump(tensor):
        tensor = tensor.clone()
        flat = tensor.view(-1)
        flat[5] += 0.5
        return tensor

    handles = [model.model.decoder.register_forward_pre_hook(count)]
    if where == "output":
        handles.append(module.register_forward_hook(lambda m, a, out: bump(out) if state["pass"] == step else out))
    else:
        handles.append(module.register_forward_pre_hook(lambda m, a: (bump(a[0]),) if state["pass"] == step else a))
    return handles


def _capture(tiny, ids, plant=None, keep=None):
    handles = _plant(tiny.model, *plant) if plant else []
    try:
        recorder = Recorder(tiny.model, 1, keep=keep)
        with recorder:
            generate(tiny, [ids], seed=2, observers=[recorder], generation=SETTINGS)
        return recorder.capture
    finally:
        for handle in handles:
            handle.remove()


def test_repeat_runs_are_identical(tiny, prompt_ids):
    comparison = compare_captures(_capture(tiny, prompt_ids), _capture(tiny, prompt_ids))
    assert not comparison.diverged
    # every pass counts: the encoder over the prompt and each decoder pass
    assert comparison.passes_matching == comparison.passes_total == 1 + SETTINGS["max_denoising_steps"]
    assert comparison.bytes_compared > 0


@pytest.mark.parametrize("step", [0, 2])
def test_planted_output_difference_found_at_module_pass_and_origin(tiny, prompt_ids, step):
    reference = _capture(tiny, prompt_ids)
    planted = _capture(tiny, prompt_ids, plant=(MODULE, step, "output"))
    comparison = compare_captures(reference, planted)
    assert comparison.first.name == MODULE
    assert (comparison.first.pass_key.phase, comparison.first.pass_key.step) == ("decoder", step)
    assert comparison.origin["name"] == MODULE and comparison.origin["inputs_identical"]
    assert comparison.passes_matching == 1 + step  # every pass before the planted one matches, the encoder's too
    targets = comparison.detail_targets(reference)
    numbers = detail(comparison, _capture(tiny, prompt_ids, keep=targets),
                     _capture(tiny, prompt_ids, plant=(MODULE, step, "output"), keep=targets))
    hidden = tiny.model.config.text_config.hidden_size
    assert numbers["first"]["fraction_changed"] == pytest.approx(1 / (256 * hidden))
    assert numbers["first"]["max_abs_diff"] == pytest.approx(0.5, rel=1e-3)
    assert numbers["router_scores_changed_pct"] is not None and numbers["final_logits_changed_pct"] > 0


def test_difference_made_between_recorded_calls_is_reported_as_such(tiny, prompt_ids):
    planted = _capture(tiny, prompt_ids, plant=(MODULE, 1, "input"))
    comparison = compare_captures(_capture(tiny, prompt_ids), planted)
    assert comparison.first.name.startswith(MODULE)
    assert comparison.origin["inputs_identical"] is False
    assert "unrecorded code" in comparison.origin["explanation"]


def test_spread_counts_positions_per_decoder_layer(tiny, prompt_ids):
    comparison = compare_captures(_capture(tiny, prompt_ids),
                                  _capture(tiny, prompt_ids, plant=("model.decoder.layers.0.mlp.down_proj", 1, "output")))
    assert comparison.canvas_positions == 256
    assert comparison.positions_per_layer["layer 0"] == 1  # one element of one position was bumped
    assert comparison.positions_per_layer["layer 1"] > 1  # attention spreads it across the canvas
