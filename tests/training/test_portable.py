"""The portable training state: small enough to travel between machines, and a run goes on from it."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch
from transformers import DiffusionGemmaForBlockDiffusion

from canvaslab.errors import CanvaslabError
from canvaslab.models.mini import mini_config
from canvaslab.training import portable
from canvaslab.training.loop import TrainingPaused, TrainSettings, _optimizer, train
from test_train_cpu import _toy_model, _toy_pool

SETTINGS = TrainSettings(steps=8, batch_size=4, learning_rate=3e-3, warmup_steps=2, log_every=1, seed=5,
                         checkpoint_every=100)


def _paused(tmp_path, pause_after=4, settings=SETTINGS):
    """A run paused after ``pause_after`` steps, its exact checkpoint and portable state written."""
    model = _toy_model()
    with pytest.raises(TrainingPaused):
        train(model, _toy_pool(), settings, "diffusion", canvas_length=32, checkpoint=tmp_path / "exact.pt",
              portable=tmp_path / "portable", stop=lambda step: step == pause_after)
    return model


def _one_step(model):
    """An optimizer that has taken one step (so it has moments to save), and random streams' states."""
    optimizer = _optimizer(model, SETTINGS)
    for parameter in model.parameters():
        parameter.grad = torch.randn_like(parameter)
    optimizer.step()
    rng = {"generator": torch.Generator().get_state(), "row": random.Random(0).getstate(),
           "self_conditioning": random.Random(1).getstate()}
    return optimizer, rng


def test_a_run_goes_on_from_the_portable_state_with_the_same_examples(tmp_path):
    expected = train(_toy_model(), _toy_pool(), SETTINGS, "diffusion", canvas_length=32)
    _paused(tmp_path)
    history = train(_toy_model(), _toy_pool(), SETTINGS, "diffusion", canvas_length=32, portable=tmp_path / "portable")
    assert [e["step"] for e in history] == list(range(8))
    assert [e["tokens"] for e in history] == [e["tokens"] for e in expected]  # the same batches
    assert history[-1]["portable_resumes"] == [4] and "portable_resumes" not in expected[-1]
    assert [e["loss"] for e in history[:4]] == [e["loss"] for e in expected[:4]]
    # the step after the resume sees the same noise draws with bf16-rounded weights, before any update
    assert history[4]["loss"] == pytest.approx(expected[4]["loss"], abs=0.02)


def test_the_exact_checkpoint_wins_over_the_portable_state(tmp_path):
    expected = train(_toy_model(), _toy_pool(), SETTINGS, "diffusion", canvas_length=32)
    _paused(tmp_path)
    history = train(_toy_model(), _toy_pool(), SETTINGS, "diffusion", canvas_length=32,
                    checkpoint=tmp_path / "exact.pt", portable=tmp_path / "portable")
    assert [e["loss"] for e in history] == [e["loss"] for e in expected]
    assert "portable_resumes" not in history[-1]


def test_the_portable_state_holds_bf16_weights_and_factored_second_moments(tmp_path):
    paused = _paused(tmp_path)
    saved = torch.load(tmp_path / "exact.pt", weights_only=False)
    exact = saved["optimizer"]["state"]
    model = _toy_model()
    optimizer = _optimizer(model, SETTINGS)
    for group in optimizer.param_groups:
        group["foreach"] = False  # this machine's choice of implementation, kept over the saved one's
    loop, rng = portable.restore_portable(tmp_path / "portable", model, optimizer, SETTINGS.as_dict())
    assert all(group["foreach"] is False for group in optimizer.param_groups)
    assert loop["step"] == saved["step"] == 4 and loop["tokens"] == saved["tokens"]
    assert torch.equal(rng["generator"], saved["rng"]["generator"])  # the noise draws go on where they were
    assert rng["row"] == saved["rng"]["row"] and rng["self_conditioning"] == saved["rng"]["self_conditioning"]
    for (name, before), after in zip(paused.named_parameters(), model.parameters()):
        assert torch.equal(after, before.detach().to(torch.bfloat16).float()), name
    state = optimizer.state_dict()["state"]
    assert state.keys() == exact.keys()
    for index, moments in state.items():
        assert float(moments["step"]) == float(exact[index]["step"]) == 4.0
        assert not moments["exp_avg"].any()  # the first moment restarts
        original, restored = exact[index]["exp_avg_sq"], moments["exp_avg_sq"]
        if original.ndim < 2:
            assert torch.equal(restored, original)
        else:  # the same row and column sums as the real second moment
            rows, cols = original.reshape(-1, original.shape[-1]), restored.reshape(-1, original.shape[-1])
            torch.testing.assert_close(cols.sum(1), rows.sum(1), rtol=1e-4, atol=1e-12)
            torch.testing.assert_close(cols.sum(0), rows.sum(0), rtol=1e-4, atol=1e-12)


def test_a_portable_state_of_another_run_is_refused(tmp_path):
    _paused(tmp_path)
    other = TrainSettings(**{**SETTINGS.as_dict(), "learning_rate": 1e-3, "schedule": SETTINGS.schedule})
    with pytest.raises(CanvaslabError, match="another run's \\(learning_rate differ\\)"):
        train(_toy_model(), _toy_pool(), other, "diffusion", canvas_length=32, portable=tmp_path / "portable")
    wider = DiffusionGemmaForBlockDiffusion(mini_config(32, hidden_size=48, intermediate_size=64, num_hidden_layers=2,
                                                        num_attention_heads=2, head_dim=16, global_head_dim=16,
                                                        moe_intermediate_size=16, num_experts=4))
    with pytest.raises(CanvaslabError, match="do not fit this model") as refused:
        train(wider, _toy_pool(), SETTINGS, "diffusion", canvas_length=32, portable=tmp_path / "portable")
    assert "\n" not in str(refused.value)


def test_a_newer_state_replaces_the_older_and_a_failed_write_keeps_the_older(tmp_path, monkeypatch):
    folder, model = tmp_path / "portable", _toy_model()
    optimizer, rng = _one_step(model)
    portable.save_portable(folder, model, optimizer, {"step": 4}, rng, SETTINGS.as_dict())
    portable.save_portable(folder, model, optimizer, {"step": 6}, rng, SETTINGS.as_dict())
    shards = sorted(p.name for p in folder.glob("weights-*.pt"))
    assert shards and all("step000006" in name for name in shards)

    real_save = torch.save

    def dies_on_the_state(payload, handle, *args, **kwargs):
        if "loop" in payload:
            raise OSError("killed")
        real_save(payload, handle, *args, **kwargs)

    monkeypatch.setattr(torch, "save", dies_on_the_state)
    with pytest.raises(OSError):
        portable.save_portable(folder, model, optimizer, {"step": 8}, rng, SETTINGS.as_dict())
    monkeypatch.undo()
    # the killed save's shards stay beside the state, but only the state's own files travel
    assert len(list(folder.glob("weights-*.pt"))) == 2 * len(shards)
    assert portable.portable_files(folder) == [folder / "state.pt", *(folder / name for name in shards)]
    loop, _ = portable.restore_portable(folder, _toy_model(), _optimizer(_toy_model(), SETTINGS), SETTINGS.as_dict())
    assert loop == {"step": 6}


def test_minis_portable_state_fits_the_transfer_to_a_device_machine(tmp_path):
    """Files under 16 MiB, 64 MiB in all each way, shared with the code and wheels: `mini`'s state is its
    15M parameters in bf16 (~30 MB), not the exact checkpoint's ~180 MB."""
    torch.manual_seed(0)
    model = DiffusionGemmaForBlockDiffusion(mini_config(128))
    optimizer, rng = _one_step(model)
    portable.save_portable(tmp_path, model, optimizer, {"step": 1}, rng, SETTINGS.as_dict())
    sizes = [p.stat().st_size for p in tmp_path.iterdir()]
    assert max(sizes) < 16 * 2**20
    assert sum(sizes) < 2.1 * sum(p.numel() for p in model.parameters())  # bf16, each shared weight once


def test_the_model_card_says_where_a_run_went_on_from_the_portable_state(tmp_path):
    from canvaslab.training.card import write_card
    from canvaslab.training.run import RunSpec, train_models
    from test_train_cpu import TOY

    settings = TrainSettings(steps=6, batch_size=4, learning_rate=3e-3, warmup_steps=2, log_every=1, seed=3)
    spec = RunSpec(tmp_path / "run", None, settings, device="cpu", examples=24, text_overrides=TOY, canvas_length=32,
                   kinds=("diffusion",), checkpoint_dir=tmp_path / "ckpt", portable_dir=tmp_path / "portable")
    with pytest.raises(TrainingPaused):
        train_models(replace(spec, stop_at=0.0), log=lambda message: None)
    for exact in (tmp_path / "ckpt").glob("diffusion.pt"):
        exact.unlink()  # a new machine: only the portable state came along
    report = train_models(spec, log=lambda message: None)
    assert report["diffusion"]["portable_resumes"] == [1]
    assert "went on from the portable state" in write_card(spec.out).read_text()


def test_the_loop_takes_the_random_streams_from_the_portable_state(tmp_path):
    from canvaslab.training.loop import _restore

    _paused(tmp_path)
    saved = torch.load(tmp_path / "exact.pt", weights_only=False)["rng"]
    model = _toy_model()
    rngs = {"generator": torch.Generator().manual_seed(99), "row": random.Random(99),
            "self_conditioning": random.Random(99)}
    state = _restore(None, tmp_path / "portable", model, _optimizer(model, SETTINGS), rngs, SETTINGS)
    assert state["step"] == 4 and state["portable_resumes"] == [4]
    assert torch.equal(rngs["generator"].get_state(), saved["generator"])
    assert rngs["row"].getstate() == saved["row"]
    assert rngs["self_conditioning"].getstate() == saved["self_conditioning"]
