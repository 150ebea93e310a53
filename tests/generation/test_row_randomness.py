"""Per-row randomness: a request's draws do not depend on batch size or its position in the batch."""

import torch
from transformers.models.diffusion_gemma.generation_diffusion_gemma import EntropyBoundSamplerConfig

from canvaslab.generation.row_randomness import RowRandomness, request_key
from canvaslab.generation.sampler import RowKeyedMultinomial, RowKeyedSampler

VOCAB, CANVAS = 97, 16


def _streams(requests, canvas=0, step=3):
    streams = RowRandomness(seed=11, requests=requests)
    streams.canvas, streams.step = canvas, step
    return streams


def _batch(size, position, studied="studied"):
    requests = [f"other-{i}" for i in range(size)]
    requests[position] = studied
    return requests


def test_uniform_draws_same_at_any_batch_size_and_position():
    alone = _streams(["studied"]).uniform_tokens("renoise", CANVAS, VOCAB, torch.device("cpu"))[0]
    for size, position in ((1, 0), (3, 0), (3, 2), (7, 0), (7, 4), (7, 6)):
        batch = _streams(_batch(size, position)).uniform_tokens("renoise", CANVAS, VOCAB, torch.device("cpu"))
        assert torch.equal(batch[position], alone)
        if size > 1:  # other requests really get other draws
            assert not torch.equal(batch[(position + 1) % size], alone)


def test_categorical_same_at_any_batch_size_and_position():
    probs_row = torch.softmax(torch.randn(CANVAS, VOCAB, generator=torch.Generator().manual_seed(0)), -1)
    alone = _streams(["studied"]).categorical(probs_row)
    for size, position in ((3, 0), (3, 1), (7, 0), (7, 5)):
        probs = torch.softmax(torch.randn(size, CANVAS, VOCAB), -1)
        probs[position] = probs_row
        draws = _streams(_batch(size, position)).categorical(probs.view(-1, VOCAB)).view(size, CANVAS)
        assert torch.equal(draws[position], alone.view(CANVAS))


def test_keys_separate_canvas_step_and_purpose():
    device = torch.device("cpu")
    base = _streams(["r"]).uniform_tokens("renoise", CANVAS, VOCAB, device)
    assert not torch.equal(base, _streams(["r"], step=4).uniform_tokens("renoise", CANVAS, VOCAB, device))
    assert not torch.equal(base, _streams(["r"], canvas=1).uniform_tokens("renoise", CANVAS, VOCAB, device))
    assert not torch.equal(base, _streams(["r"]).uniform_tokens("init", CANVAS, VOCAB, device))


def test_exponential_race_samples_the_distribution():
    probs = torch.tensor([[0.7, 0.2, 0.1, 0.0]]).repeat(4000, 1)
    streams = RowRandomness(seed=0, requests=["r"])
    counts = torch.bincount(streams.categorical(probs).flatten(), minlength=4).double() / 4000
    assert torch.allclose(counts, torch.tensor([0.7, 0.2, 0.1, 0.0], dtype=torch.double), atol=0.03)
    assert counts[3] == 0


def test_sampler_and_multinomial_route_through_row_streams():
    streams = RowRandomness(seed=5, requests=[request_key([1, 2]), request_key([3])])
    sampler = RowKeyedSampler(config=EntropyBoundSamplerConfig(entropy_bound=0.1), canvas_length=CANVAS,
                              vocab_size=VOCAB, max_denoising_steps=4, randomness=streams)
    canvas = sampler.initialize_canvas(2, torch.device("cpu"))
    alone = RowRandomness(seed=5, requests=[request_key([3])])
    alone.start_canvas()
    assert torch.equal(canvas[1], alone.uniform_tokens("init", CANVAS, VOCAB, torch.device("cpu"))[0])
    probs = torch.softmax(torch.randn(2 * CANVAS, VOCAB), -1)
    with RowKeyedMultinomial(streams):
        sampled = torch.multinomial(probs, num_samples=1)
    assert torch.equal(sampled, streams.categorical(probs))


def test_decoder_pass_runs_without_the_sampling_mode(tiny, prompt_ids):
    """The per-row multinomial mode is off the stack inside the decoder's forward (every op there would
    otherwise pay a Python call)."""
    from torch.overrides import _get_current_function_mode_stack

    from canvaslab.generation import generate

    seen = []
    hook = tiny.model.model.decoder.register_forward_pre_hook(
        lambda module, args: seen.append([type(m).__name__ for m in _get_current_function_mode_stack()]))
    try:
        output = generate(tiny, [prompt_ids], seed=3, generation={"max_denoising_steps": 2})
    finally:
        hook.remove()
    assert len(seen) == output.rows[0].passes[0] and all("RowKeyedMultinomial" not in stack for stack in seen)


def test_suspended_keeps_a_mode_that_is_not_on_top():
    """Under another function mode entered later the sampling mode stays: slower, never wrong."""
    from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack

    multinomial = RowKeyedMultinomial(_streams(["a"]))
    with multinomial:
        with multinomial.suspended():
            assert multinomial not in _get_current_function_mode_stack()
        assert _get_current_function_mode_stack()[-1] is multinomial
        with TorchFunctionMode(), multinomial.suspended():
            assert multinomial in _get_current_function_mode_stack()
