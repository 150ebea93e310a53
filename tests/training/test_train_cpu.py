"""Training on the CPU, end to end at toy size: the diffusion objective's loss falls, the checkpoint
round-trips through transformers' own from_pretrained, and canvaslab's generate runs on it."""

from __future__ import annotations

import copy
import filecmp
import json
import math
import random
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner
from transformers import DiffusionGemmaForBlockDiffusion, Gemma4ForCausalLM

from canvaslab.cli.main import app
from canvaslab.generation import generate
from canvaslab.models import load_model
from canvaslab.models.mini import MINI_EOS_IDS, ar_sibling_config, load_mini_tokenizer, mini_config
from canvaslab.studies.commit_order.baseline import load_causal_lm
from canvaslab.scoring.prompting import encode_prompt
from canvaslab.training.card import write_card
from canvaslab.training.batches import Pool
from canvaslab.training.loop import TrainSettings, train
from canvaslab.training.objective import (DiffusionBatch, NoiseSchedule, decoder_logits, diffusion_loss,
                                         encode_prefix, noise_canvas, use_autocast_experts,
                                         position_weights, weight_logit_offsets, weighted_canvas_loss)
from canvaslab.training import chat
from canvaslab.training import run as run_module
from canvaslab.training.run import RunSpec, load_tokenizer, train_models
from canvaslab.training.tasks import AnswerStyle
from canvaslab.training.tokenizer import train_tokenizer

TOY = (("hidden_size", 32), ("intermediate_size", 64), ("num_hidden_layers", 2), ("num_attention_heads", 2),
       ("head_dim", 16), ("global_head_dim", 16), ("moe_intermediate_size", 16), ("num_experts", 4))


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("mini-run")
    settings = TrainSettings(steps=12, batch_size=6, learning_rate=3e-3, warmup_steps=2, log_every=1, seed=3)
    report = train_models(RunSpec(out, None, settings, device="cpu", examples=72, text_overrides=TOY,
                                  canvas_length=32, shares=(("add3", 0.5),)), log=lambda message: None)
    return out, report


@pytest.mark.slow
def test_loss_falls_for_both_models(trained):
    _, report = trained
    for name in ("diffusion", "autoregressive"):
        losses = [entry["loss"] for entry in report[name]["history"]]
        assert len(losses) == 12
        assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.2, (name, losses)
        # the gradient norm before clipping is logged (is every step clipped to norm 1?)
        norms = [entry["grad_norm"] for entry in report[name]["history"]]
        assert all(math.isfinite(n) and n > 0 for n in norms), (name, norms)
    assert report["autoregressive"]["steps"] == report["diffusion"]["steps"] == 12


@pytest.mark.slow
def test_checkpoint_round_trips_and_generates(trained):
    out, _ = trained
    saved = DiffusionGemmaForBlockDiffusion.from_pretrained(out / "diffusion", local_files_only=True)
    assert saved.config.canvas_length == 32 and saved.dtype == torch.bfloat16
    assert all(torch.isfinite(p).all() for p in saved.parameters())
    generation = json.loads((out / "diffusion" / "generation_config.json").read_text())
    assert generation["max_denoising_steps"] == 48 and generation["eos_token_id"] == MINI_EOS_IDS
    loaded = load_model(str(out / "diffusion"), dtype="float32")
    prompts = [encode_prompt(loaded.tokenizer, "What is 12 + 30?")]
    output = generate(loaded, prompts, seed=0, generation={"max_denoising_steps": 3, "max_new_tokens": 32})
    row = output.rows[0]
    assert len(row.tokens) == 32 and 1 <= row.passes[0] <= 3
    sibling = Gemma4ForCausalLM.from_pretrained(out / "autoregressive", local_files_only=True)
    assert sibling.config.vocab_size == saved.config.text_config.vocab_size
    baseline, tokenizer = load_causal_lm(out / "autoregressive")  # what `order-study --baseline` loads
    assert type(baseline).__name__ == "Gemma4ForCausalLM" and encode_prompt(tokenizer, "hi")[:2] == [2, 105]


@pytest.mark.slow
def test_model_card_and_loss_curve(trained):
    out, report = trained
    card = write_card(out).read_text()
    assert (out / "loss.png").stat().st_size > 1000
    assert f"{report['diffusion']['history'][-1]['loss']:.4f}" in card
    assert report["answers"] == asdict(AnswerStyle())  # how the answers were written, on the card too
    assert report["settings"]["schedule"]["logit_adjustment"] is False  # an option, off unless asked for
    assert f"'sum_format': '{AnswerStyle().sum_format}'" in card
    # the fixture draws 3-digit sums at 0.5 / 1.32 of the examples: the shares drawn, and their effect, recorded
    assert abs(report["mixture_shares"]["add3"] - 0.5 / 1.32) < 1e-9 and "add3 0.38" in card
    assert max(report["mixture_counts"], key=report["mixture_counts"].get) == "add3"


def test_noise_is_nested_and_uniform_over_the_vocabulary():
    generator = torch.Generator().manual_seed(0)
    canvas = torch.zeros((4, 4096), dtype=torch.long)
    keep = torch.rand(canvas.shape, generator=generator)
    low, low_mask = noise_canvas(canvas, torch.full((4,), 0.3), 4096, generator, keep)
    high, high_mask = noise_canvas(canvas, torch.full((4,), 0.8), 4096, generator, keep)
    assert bool((low_mask <= high_mask).all())
    assert abs(float(high_mask.float().mean()) - 0.8) < 0.02
    drawn = high[high_mask]
    assert drawn.max() > 4000 and drawn.min() < 100  # the whole vocabulary, unused ids included
    assert bool((low[~low_mask] == 0).all())


def test_self_conditioning_changes_the_loss():
    torch.manual_seed(0)
    model = DiffusionGemmaForBlockDiffusion(mini_config(canvas_length=8, **dict(TOY))).eval()
    batch = DiffusionBatch(torch.randint(5, 4000, (3, 5)), torch.ones((3, 5), dtype=torch.bool),
                           torch.randint(5, 4000, (3, 8)))
    always = NoiseSchedule(self_conditioning_probability=1.0)
    never = NoiseSchedule(self_conditioning_probability=0.0)
    with torch.no_grad():
        with_sc = diffusion_loss(model, batch, always, torch.Generator().manual_seed(1))
        without = diffusion_loss(model, batch, never, torch.Generator().manual_seed(1))
        forced = diffusion_loss(model, batch, never, torch.Generator().manual_seed(1), self_condition=True)
    assert torch.isfinite(with_sc) and torch.isfinite(without)
    assert float(with_sc) != float(without)
    assert float(forced) != float(without)  # the caller's per-step draw overrides the schedule's


def test_a_diffusion_step_reaches_every_text_parameter_and_the_prompt():
    """Guards against a cut gradient (a pass left under no_grad, a detached cache, an expert-weight
    cast): with self-conditioning on, every parameter outside the unused vision tower gets a non-zero
    gradient, and the logits depend differentiably on the prompt's keys in the encoder's cache."""
    torch.manual_seed(0)
    model = DiffusionGemmaForBlockDiffusion(mini_config(canvas_length=8, **dict(TOY))).train()
    batch = DiffusionBatch(torch.randint(5, 4000, (3, 5)), torch.ones((3, 5), dtype=torch.bool),
                           torch.randint(5, 4000, (3, 8)))
    diffusion_loss(model, batch, NoiseSchedule(), torch.Generator().manual_seed(1), self_condition=True).backward()
    text = {name: p for name, p in model.named_parameters() if "vision" not in name}
    without = [name for name, p in text.items() if p.grad is None or not bool(p.grad.abs().sum() > 0)]
    assert not without, without
    cache = encode_prefix(model, batch)
    keys = [layer.keys for layer in cache.layers]
    grads = torch.autograd.grad(decoder_logits(model, cache, batch, batch.canvas).square().sum(), keys)
    assert all(bool(g.abs().sum() > 0) for g in grads)


def test_the_self_conditioning_pass_runs_on_about_half_the_steps_only():
    """The extra decoder pass without gradient costs a forward; it ran on nearly every step while the
    draw was per row (a batch of 4 has a self-conditioned row with probability 15/16)."""
    torch.manual_seed(0)
    model = DiffusionGemmaForBlockDiffusion(mini_config(canvas_length=16, **dict(TOY)))
    pool = Pool([], [[2, 105, 40 + i, 106] for i in range(16)], [[50 + i, 51, 106] for i in range(16)])
    pool.tasks = ["add2"] * 16
    passes = []
    handle = model.model.decoder.register_forward_hook(lambda *args: passes.append(1))
    try:
        train(model, pool, TrainSettings(steps=16, batch_size=4, warmup_steps=1, log_every=100), "diffusion",
              canvas_length=16)
    finally:
        handle.remove()
    assert 16 + 4 <= len(passes) <= 32 - 4, len(passes)


def test_answer_tokens_dominate_the_loss_not_the_pad_tail():
    """A 4-token answer in a 32-token canvas: a model that predicts the pad tail perfectly and the answer
    not at all must still have a large loss (with a plain mean over positions it was 4/32 of log V)."""
    vocab, canvas = 4096, torch.zeros((2, 32), dtype=torch.long)
    canvas[:, :4] = torch.tensor([40, 41, 42, 106])
    logits = torch.zeros((2, 32, vocab))
    logits[:, 4:, 0] = 50.0  # certain of <pad> where the target is pad; uniform over the answer
    noised = torch.ones_like(canvas, dtype=torch.bool)
    metrics: dict = {}
    loss = weighted_canvas_loss(logits, canvas, noised, NoiseSchedule(), metrics)
    assert float(loss) > 0.5 * math.log(vocab)
    assert abs(float(metrics["content_loss"]) - math.log(vocab)) < 1e-3 and float(metrics["content_accuracy"]) == 0.0


def test_position_weights_favour_noised_answer_tokens():
    schedule = NoiseSchedule(pad_weight=0.1, kept_weight=0.25)
    canvas = torch.tensor([[7, 8, 0, 0]])
    noised = torch.tensor([[True, False, True, False]])
    weights = position_weights(canvas, noised, schedule)
    torch.testing.assert_close(weights, torch.tensor([[1.0, 0.25, 0.1, 0.025]]))


def _fitted_probabilities(schedule: NoiseSchedule, shown: int, targets: list[int], noised: list[bool]) -> torch.Tensor:
    """Free logits for one input (every row shows the same token at its one position) fitted to the rows'
    targets by minimising the weighted canvas loss: what a model converges to on an ambiguous input."""
    logits = torch.zeros(5, requires_grad=True)
    optimizer = torch.optim.Adam([logits], lr=0.05)
    canvas, flags = torch.tensor(targets)[:, None], torch.tensor(noised)[:, None]
    for _ in range(2000):
        loss = weighted_canvas_loss(logits.expand(len(targets), 1, 5), canvas, flags, schedule,
                                    shown=torch.full_like(canvas, shown))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return logits.detach().softmax(-1)


@pytest.mark.parametrize("adjusted", [False, True])
def test_the_loss_weights_bias_predictions_unless_the_logits_are_adjusted(adjusted):
    """Half the rows want <pad>, half a word, on the same input: the weighted loss alone is minimised by
    P(pad) = 0.1 / 1.1 (pad_weight 0.1), with logit adjustment by the rows' own 1/2. Likewise a position that
    shows the token it keeps half the time: 0.25 / 1.25 without, 1/2 with."""
    schedule = NoiseSchedule(pad_weight=0.1, kept_weight=0.25, logit_adjustment=adjusted)
    pad_or_word = _fitted_probabilities(schedule, shown=4, targets=[0, 3], noised=[True, True])
    assert abs(float(pad_or_word[0]) - (0.5 if adjusted else 0.1 / 1.1)) < 0.01
    kept_or_not = _fitted_probabilities(schedule, shown=3, targets=[3, 2], noised=[False, True])
    assert abs(float(kept_or_not[3]) - (0.5 if adjusted else 0.25 / 1.25)) < 0.01


def test_logit_offsets_undo_what_they_add():
    schedule, logits = NoiseSchedule(), torch.randn(2, 6, 50)
    shown = torch.randint(0, 50, (2, 6))
    torch.testing.assert_close(weight_logit_offsets(weight_logit_offsets(logits, shown, schedule), shown, schedule, -1),
                               logits)
    offsets = weight_logit_offsets(torch.zeros(1, 2, 50), torch.tensor([[0, 7]]), schedule)
    assert math.isclose(float(offsets[0, 0, 0]), math.log(0.1 * 0.25), rel_tol=1e-5)  # shows <pad>: both weights
    assert math.isclose(float(offsets[0, 1, 7]), math.log(0.25), rel_tol=1e-5)
    assert math.isclose(float(offsets[0, 1, 0]), math.log(0.1), rel_tol=1e-5) and float(offsets[0, 1, 3]) == 0.0


@pytest.mark.slow
def test_order_study_on_a_trained_checkpoint_with_its_sibling_as_baseline(trained, tmp_path):
    """The checkpoint's own sampler settings give the study its budget (it used to stop with KeyError
    'max_denoising_steps' on the first batch when no --steps was given)."""
    out, _ = trained
    result = CliRunner().invoke(app, [
        "order-study", "--model", str(out / "diffusion"), "--suite", "mini", "--regimes", "factual",
        "--seeds", "1", "--prompts-per-regime", "1", "--bootstrap", "0", "--baseline", str(out / "autoregressive"),
        "--out", str(tmp_path / "study")])
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "study" / "order_metrics.json").read_text())
    assert metrics["study"]["generation"]["max_denoising_steps"] == 48
    assert "factual" in metrics["baseline"]["regimes"]


def test_compile_parts_picks_the_layers_or_the_shared_leaves():
    from canvaslab.models import anatomy
    from canvaslab.training.loop import compile_parts

    model = DiffusionGemmaForBlockDiffusion(mini_config(32, **dict(TOY)))
    compile_parts(model, "layers")
    layers = anatomy.encoder_layers(model) + anatomy.decoder_layers(model)
    assert len(layers) == 4 and all(layer._compiled_call_impl is not None for layer in layers)
    model = DiffusionGemmaForBlockDiffusion(mini_config(32, **dict(TOY)))
    compile_parts(model, "leaves")
    layers = anatomy.encoder_layers(model) + anatomy.decoder_layers(model)
    assert not any(layer._compiled_call_impl is not None for layer in layers)
    assert all(layer.mlp._compiled_call_impl is not None and layer.input_layernorm._compiled_call_impl is not None
               for layer in layers)


def test_compile_parts_finds_the_autoregressive_siblings_leaves_too():
    from canvaslab.training.loop import compile_parts

    sibling = Gemma4ForCausalLM(ar_sibling_config(**dict(TOY)))
    compile_parts(sibling, "leaves")
    layers = sibling.model.layers
    assert all(layer.mlp._compiled_call_impl is not None and layer.router._compiled_call_impl is not None
               and layer.input_layernorm._compiled_call_impl is not None for layer in layers)


@pytest.mark.slow
def test_compiled_leaves_train_like_eager_ones():
    """compile_parts changes the speed, not the math: the same step's loss and gradients, compiled or not."""
    from torch._dynamo.utils import counters

    from canvaslab.training.loop import compile_parts

    def step(compiled: bool):
        torch.manual_seed(0)
        model = DiffusionGemmaForBlockDiffusion(mini_config(32, **dict(TOY))).train()
        if compiled:
            compile_parts(model, "leaves")
        batch = DiffusionBatch(torch.randint(1, 500, (3, 16)), torch.ones(3, 16, dtype=torch.bool),
                               torch.randint(1, 500, (3, 32)))
        loss = diffusion_loss(model, batch, NoiseSchedule(), torch.Generator().manual_seed(1), None, True)
        loss.backward()
        return loss.detach(), model.get_input_embeddings().weight.grad

    (eager_loss, eager_grad) = step(False)
    graphs_before = counters["stats"]["unique_graphs"]
    (compiled_loss, compiled_grad) = step(True)
    assert counters["stats"]["unique_graphs"] > graphs_before  # compiled, not silently run eagerly
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(compiled_grad, eager_grad, rtol=1e-3, atol=1e-5)


def _toy_pool():
    from canvaslab.models.mini import load_mini_tokenizer
    from canvaslab.training.batches import generate_texts

    return Pool.build(load_mini_tokenizer(), generate_texts(None, 48, 0), max_answer_tokens=64)


def _toy_model():
    torch.manual_seed(0)
    return DiffusionGemmaForBlockDiffusion(mini_config(32, **dict(TOY)))


@pytest.mark.parametrize("pause_after", [3, 5])
def test_a_paused_run_resumes_to_the_uninterrupted_result(tmp_path, pause_after):
    """Paused (checkpoint saved, TrainingPaused raised) and run again with the same checkpoint, training ends
    with the weights and history an uninterrupted run has: same examples, same random draws."""
    from canvaslab.training.loop import TrainingPaused

    pool = _toy_pool()
    settings = TrainSettings(steps=8, batch_size=4, learning_rate=3e-3, warmup_steps=2, log_every=1, seed=5,
                             checkpoint_every=2)
    straight = _toy_model()
    expected = train(straight, pool, settings, "diffusion", canvas_length=32)

    resumed, checkpoint = _toy_model(), tmp_path / "state.pt"
    with pytest.raises(TrainingPaused) as paused:
        train(resumed, pool, settings, "diffusion", canvas_length=32, checkpoint=checkpoint,
              stop=lambda step: step == pause_after)
    assert paused.value.step == pause_after and checkpoint.exists()
    resumed = _toy_model()  # a fresh process: nothing but the checkpoint carries over
    history = train(resumed, pool, settings, "diffusion", canvas_length=32, checkpoint=checkpoint)

    def without_time(entries):
        return [{k: v for k, v in e.items() if k != "seconds"} for e in entries]

    assert without_time(history) == without_time(expected)
    for (name, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name


def test_mini_train_refuses_an_unknown_compile_choice_before_any_work(tmp_path):
    result = CliRunner().invoke(app, ["mini", "train", "--out", str(tmp_path / "run"), "--device", "cpu",
                                      "--compile", "everything"])
    assert result.exit_code == 2 and "--compile 'everything'" in result.output
    assert not (tmp_path / "run").exists()


def test_training_experts_under_bf16_autocast_are_transformers_experts_on_bf16_weights():
    """``grouped_mm`` is no autocast op: the training experts cast fp32 master weights to bf16 for it, and
    gradients still reach the fp32 weights."""
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS, grouped_mm_experts_forward

    from canvaslab.training.objective import AUTOCAST_EXPERTS

    torch.manual_seed(0)
    model = DiffusionGemmaForBlockDiffusion(mini_config(32, **dict(TOY)))
    use_autocast_experts(model)
    experts = next(m for m in model.modules() if type(m).__name__.endswith("TextExperts"))
    hidden, weights = torch.randn(29, 32), torch.rand(29, 2)
    chosen = torch.stack([torch.randperm(4)[:2] for _ in range(29)])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = ALL_EXPERTS_FUNCTIONS[AUTOCAST_EXPERTS](experts, hidden, chosen, weights)
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    assert experts.gate_up_proj.grad.dtype == torch.float32 and experts.gate_up_proj.grad.abs().sum() > 0
    bf16 = copy.deepcopy(experts).to(torch.bfloat16)
    expected = grouped_mm_experts_forward(bf16, hidden.to(torch.bfloat16), chosen, weights.to(torch.bfloat16))
    assert torch.equal(out, expected)


def test_a_pool_saved_and_loaded_is_the_same_pool(tmp_path):
    pool = _toy_pool()
    pool.save(tmp_path / "pool.pt")
    assert Pool.load(tmp_path / "pool.pt") == pool
    assert [p.name for p in tmp_path.iterdir()] == ["pool.pt"]  # no partial file left behind


def test_a_resumable_run_keeps_its_pool_beside_the_checkpoints_and_reloads_it(tmp_path, monkeypatch):
    from canvaslab.training import run

    settings = TrainSettings(steps=2, batch_size=4, learning_rate=1e-3, warmup_steps=1)
    spec = RunSpec(tmp_path / "out", None, settings, device="cpu", examples=40, text_overrides=TOY,
                   canvas_length=32, kinds=("causal",), checkpoint_dir=tmp_path / "checkpoints")
    first = run._example_pool(spec, load_mini_tokenizer())
    (cached,) = (tmp_path / "checkpoints").glob("pool-*.pt")
    monkeypatch.setattr(run, "generate_texts", lambda *args, **kwargs: pytest.fail("generated again"))
    assert run._example_pool(spec, load_mini_tokenizer()) == first
    other = replace(spec, examples=41)  # other examples: another file, never the cached one
    monkeypatch.undo()
    assert len(run._example_pool(other, load_mini_tokenizer())) == 41
    assert len(list((tmp_path / "checkpoints").glob("pool-*.pt"))) == 2
    other_style = replace(spec, answers=replace(spec.answers, sum_format="columns"))
    assert run._example_pool(other_style, load_mini_tokenizer()) != first  # sums written otherwise: a new pool
    assert len(list((tmp_path / "checkpoints").glob("pool-*.pt"))) == 3


def test_the_card_of_a_sibling_only_run_shows_its_quality(tmp_path):
    """A run that trains only the sibling (session 16 matched mini-ar to mini's steps) still gets its
    held-out quality table on the card."""
    history = [{"step": 0, "loss": 8.3, "tokens": 100}, {"step": 1, "loss": 7.1, "tokens": 200}]
    training = {"settings": {"batch_size": 4, "learning_rate": 7e-4, "warmup_steps": 1, "seed": 0},
                "pool_examples": 8, "pool_tokens": 300, "mixture_counts": {"add2": 8}, "environment": {"device": "cpu"},
                "autoregressive": {"parameters": 10, "history": history, "steps": 2, "train_seconds": 1.0}}
    quality = {"per_task": 5, "environment": {"device": "cpu"},
               "autoregressive": {"add2": {"n": 5, "accuracy": 0.8}, "prose": {"n": 5, "english_word_share": 0.9}}}
    (tmp_path / "training.json").write_text(json.dumps(training))
    (tmp_path / "quality_autoregressive.json").write_text(json.dumps(quality))
    card = write_card(tmp_path).read_text()
    assert "| add2 (accuracy) | 5 | - | 0.800 | - |" in card
    assert "| prose (english_word_share) | 5 | - | 0.900 | - |" in card


def test_a_card_joins_a_sibling_trained_apart_only_on_the_same_examples_and_steps(tmp_path):
    """Session 16 trained run 6's sibling in a run of its own: one card shows both, but only if the examples
    and steps match."""
    from canvaslab.errors import CanvaslabError

    history = [{"step": 0, "loss": 8.3, "tokens": 100}, {"step": 1, "loss": 7.1, "tokens": 200}]
    common = {"settings": {"batch_size": 4, "learning_rate": 7e-4, "warmup_steps": 1, "seed": 0},
              "pool_examples": 8, "pool_tokens": 300, "mixture_counts": {"add2": 8}, "answers": {"sum_format": "plain"},
              "environment": {"device": "cpu"}}
    model, sibling = tmp_path / "model", tmp_path / "sibling"
    model.mkdir(), sibling.mkdir()
    (model / "training.json").write_text(json.dumps(
        {**common, "diffusion": {"parameters": 12, "history": history, "steps": 2, "train_seconds": 2.0}}))
    (model / "quality_diffusion.json").write_text(json.dumps(
        {"per_task": 5, "environment": {"device": "cpu"}, "diffusion": {"add2": {"n": 5, "accuracy": 0.4}}}))
    (sibling / "quality_autoregressive.json").write_text(json.dumps(
        {"per_task": 5, "environment": {"device": "cpu"}, "autoregressive": {"add2": {"n": 5, "accuracy": 0.8}}}))
    trained = {"parameters": 10, "history": history, "steps": 2, "train_seconds": 1.0}
    (sibling / "training.json").write_text(json.dumps({**common, "autoregressive": trained}))
    card = write_card(model, sibling=sibling).read_text()
    assert "| add2 (accuracy) | 5 | 0.400 | 0.800 | - |" in card and "autoregressive: 2 steps" in card
    (sibling / "training.json").write_text(json.dumps({**common, "pool_tokens": 301, "autoregressive": trained}))
    with pytest.raises(CanvaslabError, match="pool_tokens"):
        write_card(model, sibling=sibling)
    (sibling / "training.json").write_text(json.dumps({**common, "autoregressive": {**trained, "steps": 3}}))
    with pytest.raises(CanvaslabError, match="step count"):
        write_card(model, sibling=sibling)


def test_a_run_on_its_own_tokenizer_has_that_vocabulary_and_ships_it(tmp_path):
    texts = [chat.prompt_text(f"What is {a} + {a + 1}?") + chat.answer_text(f"{a} + {a + 1} = {2 * a + 1}.")
             for a in range(300)]
    train_tokenizer(texts, vocab_size=1024, tail_unused=300).save_pretrained(str(tmp_path / "tok"))
    settings = TrainSettings(steps=2, batch_size=4, learning_rate=1e-3, warmup_steps=1)
    spec = RunSpec(tmp_path / "out", None, settings, device="cpu", examples=8, text_overrides=TOY,
                   canvas_length=32, tokenizer=tmp_path / "tok")
    report = train_models(spec, log=lambda message: None)
    assert report["vocabulary"] == 1024
    for name in ("diffusion", "autoregressive"):
        saved = json.loads((tmp_path / "out" / name / "config.json").read_text())
        assert saved.get("text_config", saved)["vocab_size"] == 1024, name
        assert filecmp.cmp(tmp_path / "out" / name / "tokenizer.json", tmp_path / "tok" / "tokenizer.json")
    # its pool is not the shipped tokenizer's, even with the same examples
    shipped = replace(spec, tokenizer=None, checkpoint_dir=tmp_path / "c")
    own = replace(spec, checkpoint_dir=tmp_path / "c")
    run_module._example_pool(shipped, load_mini_tokenizer())
    run_module._example_pool(own, load_tokenizer(own.tokenizer))
    assert len(list((tmp_path / "c").glob("pool-*.pt"))) == 2


def test_mini_train_refuses_a_folder_without_a_tokenizer_before_any_work(tmp_path):
    result = CliRunner().invoke(app, ["mini", "train", "--out", str(tmp_path / "run"), "--device", "cpu",
                                      "--tokenizer", str(tmp_path)])
    assert result.exit_code == 2 and "no tokenizer.json" in result.output
    assert not (tmp_path / "run").exists()


def test_the_card_shows_every_prose_measure_and_the_references_frequent_word_share(tmp_path):
    history = [{"step": 0, "loss": 8.3, "tokens": 100}, {"step": 1, "loss": 7.1, "tokens": 200}]
    training = {"settings": {"batch_size": 4, "learning_rate": 7e-4, "warmup_steps": 1, "seed": 0},
                "pool_examples": 8, "pool_tokens": 300, "mixture_counts": {"prose": 8}, "environment": {"device": "cpu"},
                "diffusion": {"parameters": 10, "history": history, "steps": 2, "train_seconds": 1.0}}
    prose = {"n": 5, "english_word_share": 0.98, "english_bigram_share": 0.84, "frequent_word_share": 0.56,
             "reference_frequent_word_share": 0.32, "median_accept_calls": 48}
    (tmp_path / "training.json").write_text(json.dumps(training))
    (tmp_path / "quality_diffusion.json").write_text(json.dumps({"per_task": 5, "diffusion": {"prose": prose}}))
    card = write_card(tmp_path).read_text()
    assert "| prose (english_bigram_share) | 5 | 0.840 | - | 48 |" in card
    assert "| prose (frequent_word_share) | 5 | 0.560 | - | 48 |" in card
    assert "the held-out references' is 0.320" in card


def test_the_card_says_when_the_prose_answers_were_a_teachers(tmp_path):
    history = [{"step": 0, "loss": 8.3, "tokens": 100}, {"step": 1, "loss": 7.1, "tokens": 200}]
    training = {"settings": {"batch_size": 4, "learning_rate": 7e-4, "warmup_steps": 1, "seed": 0},
                "pool_examples": 8, "pool_tokens": 300, "mixture_counts": {"prose": 8}, "environment": {"device": "cpu"},
                "diffusion": {"parameters": 10, "history": history, "steps": 2, "train_seconds": 1.0},
                "prose_answers": {"sha256": "ab" * 32, "teacher": "mini-ar", "decoding": "greedy", "passages": 32000,
                                  "kept_own": 0}}
    (tmp_path / "training.json").write_text(json.dumps(training))
    card = write_card(tmp_path).read_text()
    assert "- prose answers: mini-ar's greedy continuations of 32,000 training passages" in card
    del training["prose_answers"]
    (tmp_path / "training.json").write_text(json.dumps(training))
    assert "prose answers" not in write_card(tmp_path).read_text()
