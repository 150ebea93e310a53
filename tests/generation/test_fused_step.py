"""Invariant mode's fused denoising step (``canvaslab.generation.fused_step``), run on the CPU through
Triton's interpreter: it is forced on here (on CUDA it is the default in invariant mode).

Checked: a row's whole generation (tokens, stopping point, every pass's entropy and self-conditioning
logits) is the same alone and inside batches, at other positions, among other prompts; its first pass
agrees with transformers' step (same inputs) up to rounding; its acceptance and stopping rules given the
entropy are transformers' rules given the logits.
"""

import os

import pytest
import torch

import canvaslab.generation.runner as runner
from canvaslab.generation import generate
from canvaslab.generation.fused_step import FusedStep
from canvaslab.generation.row_randomness import RowRandomness
from canvaslab.generation.sampler import RowKeyedSampler
from canvaslab.invariant.modes import Invariant

pytest.importorskip("triton")
# The model here is on the CPU, where the fused step's Triton kernels run only in Triton's interpreter (set by
# conftest on a machine without a GPU); on CUDA, tests/gpu/test_fused_gpu.py runs them compiled.
pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="a CPU model's fused step needs TRITON_INTERPRET=1; tests/gpu covers CUDA")
from transformers.models.diffusion_gemma.generation_diffusion_gemma import (  # noqa: E402
    EntropyBoundSamplerConfig,
)

STEPS = {"max_denoising_steps": 3, "max_new_tokens": 32}


class _Passes:
    """Every pass's entropy, accepted mask and observed logits for one row."""

    def __init__(self, row):
        self.row, self.seen = row, []

    def on_accept(self, *, logits, accepted_mask, accepted_canvas, cur_step, entropy):
        self.seen.append((entropy[self.row].clone(), accepted_mask[self.row].clone(), logits[self.row].clone()))


@pytest.fixture
def fused(monkeypatch):
    calls = []
    original = FusedStep.__call__

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Invariant, "streams_vocabulary", lambda self, model: True)
    monkeypatch.setattr(FusedStep, "__call__", counted)
    return calls


def _run(loaded, prompts, row, mode="invariant"):
    passes = _Passes(row)
    out = generate(loaded, prompts, mode=mode, generation=STEPS, observers=[passes], seed=3)
    return out.rows[row], passes.seen


def test_fused_generation_is_the_same_alone_and_in_batches(tiny_short_canvas, fused):
    tokenizer = tiny_short_canvas.tokenizer
    prompt = tokenizer("the man said that the water in the river was cold")["input_ids"]
    other = tokenizer("why is the sky blue ?")["input_ids"]
    alone, alone_passes = _run(tiny_short_canvas, [prompt], 0)
    assert fused, "the fused step did not run"
    for prompts, row in (([other, prompt, other], 1), ([prompt] * 4, 3)):
        result, passes = _run(tiny_short_canvas, prompts, row)
        assert result.tokens == alone.tokens and result.stop_point == alone.stop_point
        assert len(passes) == len(alone_passes) > 0
        for (entropy, mask, logits), (entropy_1, mask_1, logits_1) in zip(passes, alone_passes):
            assert torch.equal(entropy, entropy_1) and torch.equal(mask, mask_1) and torch.equal(logits, logits_1)


def test_first_pass_agrees_with_transformers_step(tiny_short_canvas, fused, monkeypatch):
    prompt = tiny_short_canvas.tokenizer("a cold river")["input_ids"]
    generation = {"max_denoising_steps": 1, "max_new_tokens": 32}
    observed = {}
    for name, streams in (("fused", True), ("stock", False)):
        monkeypatch.setattr(Invariant, "streams_vocabulary", lambda self, model, streams=streams: streams)
        passes = _Passes(0)
        out = generate(tiny_short_canvas, [prompt], mode="invariant", generation=generation, observers=[passes], seed=1)
        observed[name] = (out.rows[0].tokens, *passes.seen[0])
    tokens, entropy, _, logits = observed["fused"]
    stock_tokens, stock_entropy, _, stock_logits = observed["stock"]
    assert tokens == stock_tokens  # the argmax canvas: same logits up to rounding
    torch.testing.assert_close(entropy, stock_entropy, rtol=1e-5, atol=1e-5)
    assert logits.dtype == tiny_short_canvas.model.dtype  # the self-conditioning logits, as handed on
    torch.testing.assert_close(logits.float(), stock_logits.float(), rtol=1e-5, atol=1e-5)


def test_acceptance_from_entropy_is_transformers_rule():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 16, 50, generator=gen) * torch.rand(3, 16, 1, generator=gen) * 12
    current, denoiser = torch.randint(0, 50, (2, 3, 16), generator=gen)
    sampler = RowKeyedSampler(config=EntropyBoundSamplerConfig(entropy_bound=1.5), canvas_length=16, vocab_size=50,
                              max_denoising_steps=4, randomness=RowRandomness(seed=0, requests=["a", "b", "c"]))
    expected = sampler.accept_canvas(current, denoiser, logits, 4)
    expected_mask = sampler.accepted_token_mask
    entropy = torch.distributions.Categorical(logits=logits).entropy()
    assert torch.equal(sampler.accept_by_entropy(current, denoiser, entropy), expected)
    assert torch.equal(sampler.accepted_token_mask, expected_mask) and 0 < expected_mask.sum() < expected_mask.numel()


@pytest.mark.parametrize("stability", [0, 1, 2])
def test_stop_rule_from_entropy_is_transformers_rule(stability):
    gen = torch.Generator().manual_seed(stability)
    by_logits = runner._StopRecorder(stability_threshold=stability, confidence_threshold=0.5, batch_size=3)
    by_entropy = runner._StopRecorder(stability_threshold=stability, confidence_threshold=0.5, batch_size=3)
    by_logits.reset(), by_entropy.reset()
    argmax = torch.randint(0, 5, (3, 8), generator=gen)
    stops = []
    for sharpness in (1.0, 40.0, 40.0, 40.0):  # confident from the second pass; stable once argmax repeats
        logits = torch.randn(3, 8, 30, generator=gen) * sharpness
        logits[1] /= sharpness  # row 1 never confident
        entropy = torch.distributions.Categorical(logits=logits).entropy()
        expected = by_logits(argmax, logits)
        stop, history = by_entropy.rule(argmax, entropy, by_entropy.history(argmax))  # as the fused step calls it
        by_entropy.adopt(history, by_entropy.recorded(stop, by_entropy.record(stop.device)))
        assert torch.equal(stop, expected)
        stops.append(expected.tolist())
    assert by_entropy.canvases == by_logits.canvases
    assert any(any(s) for s in stops) and not any(s[1] for s in stops)


class _ReplayedOnCpu(__import__("canvaslab.generation.fused_step", fromlist=["CapturedStep"]).CapturedStep):
    """A stand-in for a CUDA graph on the CPU: "replay" reruns the captured function on the captured input
    tensors and writes into the captured outputs, which is what a graph does with its recorded kernels (the
    step is a pure function, so running it once at capture changes nothing else)."""

    def _capture(self, run):
        self.run = run
        return run(*self.inputs)

    def replay(self):
        for static, fresh in zip(self.outputs, self.run(*self.inputs)):
            if static is not None:
                static.copy_(fresh)


def test_replayed_passes_give_the_eager_generation(tiny_short_canvas, fused, monkeypatch):
    prompt = tiny_short_canvas.tokenizer("the man said that the water in the river was cold")["input_ids"]
    other = tiny_short_canvas.tokenizer("why is the sky blue ?")["input_ids"]
    generation = {"max_denoising_steps": 5, "max_new_tokens": 64}  # a capture for each canvas
    eager = _Passes(1)
    expected = generate(tiny_short_canvas, [other, prompt], mode="invariant", generation=generation, observers=[eager])
    monkeypatch.setattr(FusedStep, "captured_step", _ReplayedOnCpu)
    monkeypatch.setattr(FusedStep, "_graphable", staticmethod(lambda canvas, self_conditioning: self_conditioning is not None))
    replays = []
    original = _ReplayedOnCpu.replay
    monkeypatch.setattr(_ReplayedOnCpu, "replay", lambda self: (replays.append(1), original(self)))
    replayed = _Passes(1)
    vars(tiny_short_canvas.model).pop(FusedStep.CAPTURED_BATCHES, None)  # no capture of an earlier test counts
    result = generate(tiny_short_canvas, [other, prompt], mode="invariant", generation=generation, observers=[replayed])
    canvases = len(eager.seen) // 5
    assert len(eager.seen) % 5 == 0 and canvases >= 2
    # passes 3-5 of the first canvas; of later ones (a capture at this batch size succeeded) passes 2-5
    assert len(replays) == 3 + 4 * (canvases - 1)
    assert [row.tokens for row in result.rows] == [row.tokens for row in expected.rows]
    for got, want in zip(replayed.seen, eager.seen):
        assert all(torch.equal(a, b) for a, b in zip(got, want))


class _MeanEntropies:
    def __init__(self):
        self.seen = []

    def on_accept(self, *, logits, accepted_mask, accepted_canvas, cur_step, entropy):
        self.seen.append(entropy.mean(dim=-1).tolist())


def _first_stops(means: list[list[float]], threshold: float) -> list[int | None]:
    """Each row's first pass whose mean entropy is below ``threshold`` (the stopping rule without stability)."""
    return [next((p + 1 for p, pass_means in enumerate(means) if pass_means[row] < threshold), None)
            for row in range(len(means[0]))]


def test_rows_that_finish_inside_replays_give_the_eager_generation(tiny_short_canvas, fused, monkeypatch):
    """Rows stopping at different replayed passes: their canvas, argmax and self-conditioning logits held, the
    stopping record kept on the device, all inside the replayed step, give the eager generation."""
    prompts = [tiny_short_canvas.tokenizer(text)["input_ids"] for text in ("the man said that the water was cold",
                                                                          "why is the sky blue ?", "a river")]
    steps = {"max_denoising_steps": 6, "max_new_tokens": 32, "stability_threshold": 0}
    probe = _MeanEntropies()
    generate(tiny_short_canvas, prompts, mode="invariant", observers=[probe],
             generation={**steps, "confidence_threshold": 1e-30})
    candidates = sorted({m + 1e-6 for pass_means in probe.seen[2:] for m in pass_means})
    # rows stopping at different passes, the first of them inside the replays (pass 3 on) with passes after it
    threshold = next(t for t in candidates if len(set(_first_stops(probe.seen, t))) >= 2
                     and 3 <= min(stop for stop in _first_stops(probe.seen, t) if stop) <= 4)
    generation = {**steps, "confidence_threshold": threshold}
    eager = [_Passes(row) for row in range(3)]
    expected = generate(tiny_short_canvas, prompts, mode="invariant", generation=generation, observers=eager)
    assert [row.stop_passes[0] for row in expected.rows] == _first_stops(probe.seen, threshold)
    monkeypatch.setattr(FusedStep, "captured_step", _ReplayedOnCpu)
    monkeypatch.setattr(FusedStep, "_graphable", staticmethod(lambda canvas, self_conditioning: self_conditioning is not None))
    replayed = [_Passes(row) for row in range(3)]
    result = generate(tiny_short_canvas, prompts, mode="invariant", generation=generation, observers=replayed)
    assert [(row.tokens, row.stop_point, row.passes) for row in result.rows] == \
        [(row.tokens, row.stop_point, row.passes) for row in expected.rows]
    for got, want in zip(replayed, eager):
        assert len(got.seen) == len(want.seen)
        assert all(torch.equal(a, b) for pa, pb in zip(got.seen, want.seen) for a, b in zip(pa, pb))
    for prompt, row in zip(prompts, result.rows):  # a finished row keeps what it had: its generation alone
        alone = generate(tiny_short_canvas, [prompt], mode="invariant", generation=generation).rows[0]
        assert (alone.tokens, alone.stop_point) == (row.tokens, row.stop_point)


def test_self_conditioning_taken_a_few_canvases_at_a_time_gives_the_same_generation(tiny_short_canvas, fused,
                                                                                   monkeypatch):
    """The next pass's soft embeddings computed ``SIGNAL_CANVASES`` canvases at a time (a bounded softmax in
    memory) give every row's passes and tokens of the whole batch at once."""
    import canvaslab.generation.fused_step as fused_step

    prompts = [tiny_short_canvas.tokenizer(text)["input_ids"] for text in ("the water", "cold river", "a man said")]
    parts = []
    original = fused_step.soft_embeddings
    monkeypatch.setattr(fused_step, "soft_embeddings", lambda logits, e: parts.append(len(logits)) or original(logits, e))
    whole = [_run(tiny_short_canvas, prompts, row) for row in range(3)]
    assert parts and set(parts) == {3}
    parts.clear()
    monkeypatch.setattr(fused_step, "SIGNAL_CANVASES", 2)
    for row in range(3):
        chunked = _run(tiny_short_canvas, prompts, row)
        assert chunked[0].tokens == whole[row][0].tokens
        assert all(all(torch.equal(a, b) for a, b in zip(pa, pb)) for pa, pb in zip(chunked[1], whole[row][1]))
    assert set(parts) == {2, 1}


READ_BACKS = {"__bool__", "item", "tolist", "__int__", "__float__", "nonzero", "__index__"}


class _ReadBacks(torch.overrides.TorchFunctionMode):
    """Every torch call that brings a tensor's value to the host (on a GPU: a wait for the device)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in READ_BACKS:
            self.seen.append(name)
        return func(*args, **(kwargs or {}))


def test_a_step_reads_nothing_back_to_the_host_after_a_canvas_first_pass(tiny_short_canvas, fused, monkeypatch):
    """The host's only wait per pass is the loop's own test of whether every row finished: the step (pass,
    acceptance, renoising, the finished rows' hold, the stopping rule and its record) reads no value back, so
    nothing stands between one CUDA graph replay and the next. A canvas's first pass sends its seeds and
    temperatures to the device once."""
    prompts = [tiny_short_canvas.tokenizer(text)["input_ids"] for text in ("the water", "a cold river in the hills")]
    original, reads = FusedStep.__call__, []

    def watched(self, *args, **kwargs):
        if kwargs["cur_step"] == 4:  # a canvas's first pass
            return original(self, *args, **kwargs)
        decoder_pass = self._decoder_pass

        def unwatched(*pass_args):  # the model itself (the CPU's experts count their rows on the host; CUDA's do not)
            with torch._C.DisableTorchFunction():
                return decoder_pass(*pass_args)

        self._decoder_pass = unwatched
        with _ReadBacks() as mode:
            out = original(self, *args, **kwargs)
        self._decoder_pass = decoder_pass
        reads.append(mode.seen)
        return out

    monkeypatch.setattr(FusedStep, "__call__", watched)
    out = generate(tiny_short_canvas, prompts, mode="invariant", generation={"max_denoising_steps": 4,
                                                                            "max_new_tokens": 64}, seed=1)
    assert len(reads) >= 2 and all(seen == [] for seen in reads), reads
    assert all(len(row.stop_passes) == 2 for row in out.rows)


def test_pass_by_pass_rows_take_the_fused_step_and_are_the_rows_alone(tiny_short_canvas, fused):
    """Continuous batching's stepper, where the mode takes the fused step: each row, joining at another pass among
    other rows, is the bytes ``generate`` gives it alone with the fused step (its drafts' canvases included)."""
    from canvaslab.generation.stepper import PassStepper, generate_stepwise

    texts = ("the man said that the water in the river was cold", "hello", "why is the sky blue ?")
    prompts = [tiny_short_canvas.tokenizer(text)["input_ids"] for text in texts]
    keys = [f"request {i}" for i in range(len(prompts))]
    generation = {"max_denoising_steps": 3, "max_new_tokens": 64}
    alone = [generate(tiny_short_canvas, [p], rng="row", requests=[k], mode="invariant", generation=generation).rows[0]
             for p, k in zip(prompts, keys)]
    calls_alone = len(fused)
    assert calls_alone > 0 and PassStepper(tiny_short_canvas).fused
    rows = generate_stepwise(tiny_short_canvas, prompts, keys, joins=[0, 1, 2], generation=generation)
    assert len(fused) > calls_alone  # the stepper's rows took the fused step
    for row, expected in zip(rows, alone):
        assert (row.tokens, row.text, row.stop_point, row.passes) == \
               (expected.tokens, expected.text, expected.stop_point, expected.passes)
