"""The noise schedule's options: suffix noise (``suffix_probability``: a share of rows noised from a random cut on,
the prefix kept, nested with self-conditioning's noisier copy) and the rate distribution (``max_rate``,
``rate_power``); their defaults leave the objective's random draws and rates as they were."""

import torch

from canvaslab.training.objective import NoiseSchedule, noise_canvas, suffix_keep

PAD = 0


def _canvas(rows=400, length=16, seed=0):
    generator = torch.Generator().manual_seed(seed)
    answer = torch.randint(3, 16, (rows,), generator=generator)
    canvas = torch.randint(5, 100, (rows, length), generator=generator)
    return torch.where(torch.arange(length)[None] < answer[:, None], canvas, PAD), answer


def test_chosen_rows_keep_a_prefix_and_noise_everything_after_the_cut():
    canvas, answer = _canvas()
    generator = torch.Generator().manual_seed(1)
    rate = 0.05 + 0.95 * torch.rand(canvas.shape[0], generator=generator)
    keep = suffix_keep(torch.rand(canvas.shape, generator=generator), canvas, rate, 0.5, generator)
    _, noised = noise_canvas(canvas, rate, 200, generator, keep)
    suffix_rows = 0
    for row in range(canvas.shape[0]):
        flags = noised[row].tolist()
        if flags[-1] and all(flags[flags.index(True):]) and not any(flags[:flags.index(True)]):
            suffix_rows += 1
            assert flags.index(True) <= int(answer[row])  # the cut falls within the answer (or just after it)
    assert 150 < suffix_rows < 260  # about half the rows (uniform rows rarely look like a suffix)
    earlier_rate = rate + (1 - rate) * torch.rand(canvas.shape[0], generator=generator)
    _, earlier = noise_canvas(canvas, earlier_rate, 200, generator, keep)
    assert bool((earlier | ~noised).all())  # the noisier copy noises every position the canvas has noised


def test_no_suffix_rows_at_probability_zero_and_the_tail_always_noised_at_one():
    canvas, _ = _canvas()
    generator = torch.Generator().manual_seed(2)
    rate = torch.full((canvas.shape[0],), 0.3)
    keep = torch.rand(canvas.shape, generator=generator)
    assert torch.equal(suffix_keep(keep, canvas, rate, 0.0, generator), keep)
    _, noised = noise_canvas(canvas, rate, 200, generator, suffix_keep(keep, canvas, rate, 1.0, generator))
    assert bool(noised[:, -1].all())


def test_default_rates_are_the_uniform_draw_and_the_options_reshape_it():
    draw = lambda: torch.Generator().manual_seed(5)  # noqa: E731
    default = NoiseSchedule().rates(10_000, draw(), "cpu")
    assert torch.equal(default, 0.05 + (1 - 0.05) * torch.rand(10_000, generator=draw()))
    low = NoiseSchedule(rate_power=2.0).rates(10_000, draw(), "cpu")
    capped = NoiseSchedule(max_rate=0.5).rates(10_000, draw(), "cpu")
    assert 0.05 <= float(low.min()) and float(low.max()) < 1 and float(low.mean()) < float(default.mean()) - 0.1
    assert 0.05 <= float(capped.min()) and float(capped.max()) < 0.5


def test_self_conditioning_reads_a_first_pass_on_the_same_canvas_when_asked(monkeypatch):
    """``self_conditioning_canvas="same"`` runs the first pass on the canvas the loss is taken on (Chen et al.'s
    self-conditioning); the default keeps the nested, noisier copy."""
    import pytest

    from canvaslab.training import objective

    seen = []
    monkeypatch.setattr(objective, "encode_prefix", lambda model, batch: None)

    def decoder(model, cache, batch, canvas, **kwargs):
        seen.append(canvas.clone())
        return torch.zeros((*canvas.shape, 200))
    monkeypatch.setattr(objective, "decoder_logits", decoder)
    monkeypatch.setattr(objective.anatomy, "self_conditioning_embedding", lambda model: torch.zeros(1))
    model = type("M", (), {"config": type("C", (), {"text_config": type("T", (), {"vocab_size": 200})})})()
    canvas, _ = _canvas(rows=64)
    batch = objective.DiffusionBatch(None, None, canvas)
    for choice, same in (("same", True), ("nested", False)):
        seen.clear()
        objective.diffusion_loss(model, batch, NoiseSchedule(self_conditioning_canvas=choice),
                                 torch.Generator().manual_seed(3), self_condition=True)
        first, second = seen
        assert torch.equal(first, second) is same
    with pytest.raises(ValueError, match="self_conditioning_canvas"):
        NoiseSchedule(self_conditioning_canvas="previous")
