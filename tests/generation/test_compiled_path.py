"""Invariant mode on transformers' compiled static-cache path (``canvaslab.generation.compiled_path``).

Most tests compile with ``traced_backend`` (the same aten -> canvaslab mapping and graph check, the traced
graph run without Inductor's code generation: seconds on a CPU); one compiles with Inductor itself.
Checked: transformers' compiled path really runs (canvaslab's compiled functions called, every graph
checked), a row's every pass is the same alone, in batches, among other (longer) prompts, and the commit
tracer sees the same calls as on the eager path.
"""

import os

import pytest
import torch

import canvaslab.generation.compiled_path as compiled_path
from canvaslab.errors import CanvaslabError
from canvaslab.generation import generate
from canvaslab.invariant import compiled
from canvaslab.invariant.modes import Invariant
from canvaslab.models import load_model
from canvaslab.prompts import BUILTIN_PROMPTS
from canvaslab.studies.commit_order.tracer import CommitTracer

STEPS = {"max_denoising_steps": 3}


class _Passes:
    """Row ``row``'s logits, entropy and accepted mask at every pass."""

    def __init__(self, row=0):
        self.row, self.seen = row, []

    def on_accept(self, *, logits, accepted_mask, accepted_canvas, cur_step, entropy):
        self.seen.append((logits[self.row].clone(), entropy[self.row].clone(), accepted_mask[self.row].clone()))


@pytest.fixture(scope="module")
def static_tiny():
    """A fresh tiny model (compiled functions are cached on the model) asking for the static cache, and
    the graphs the backend checked. One per module: compiling is most of these tests' time."""
    loaded = load_model("tiny")
    loaded.model.generation_config.cache_implementation = "static"
    checked = []
    original = compiled.RefuseBatchVariantReductions.__call__

    def counting(self, graph):
        checked.append(graph)
        return original(self, graph)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compiled.RefuseBatchVariantReductions, "__call__", counting)
        patch.setattr(compiled_path, "BACKEND", compiled.traced_backend)
        torch._dynamo.reset()
        yield loaded, checked
    torch._dynamo.reset()


@pytest.fixture
def static_cache(static_tiny):
    static_tiny[0].model.generation_config.cache_implementation = "static"
    return static_tiny


def _prompts(loaded, count):
    return [loaded.tokenizer(text)["input_ids"] for text in BUILTIN_PROMPTS[:count]]


def _run(loaded, prompts, row=0, mode="invariant", **kwargs):
    passes = _Passes(row)
    out = generate(loaded, prompts, mode=mode, generation=STEPS, observers=[passes], seed=2, **kwargs)
    return out.rows[row].tokens, passes.seen


def _same(a, b):
    return a[0] == b[0] and len(a[1]) == len(b[1]) and all(
        all(torch.equal(x, y) for x, y in zip(pa, pb)) for pa, pb in zip(a[1], b[1]))


def test_invariant_mode_runs_the_compiled_path_with_every_graph_checked(static_cache):
    loaded, checked = static_cache
    _run(loaded, _prompts(loaded, 1))
    cache = vars(loaded.model)[compiled_path.CACHE_ATTRIBUTE]
    assert "decoder" in cache and checked, "transformers' compiled path did not call canvaslab's compiled decoder"
    ops = {str(node.target) for graph in checked for node in graph.nodes}
    assert {"canvaslab.matmul.default", "canvaslab.attention.default", "canvaslab.grouped_linear.default",
            "canvaslab.row_reduce.default"} <= ops
    assert not any(op.startswith(("aten.mm", "aten.addmm", "aten.bmm", "aten._softmax")) for op in ops)


def test_a_row_is_the_same_alone_and_in_batches_on_the_compiled_path(static_cache):
    loaded, _ = static_cache
    prompts = _prompts(loaded, 4)
    alone = _run(loaded, prompts[:1])
    assert _same(alone, _run(loaded, [prompts[0]] * 3))  # copies
    mixed = [prompts[0], prompts[1], prompts[3]]  # longer prompts: row 0 is left-padded
    assert max(map(len, mixed)) > len(prompts[0])
    assert _same(alone, _run(loaded, mixed))
    assert _same(_run(loaded, [prompts[2], prompts[0]], row=1), alone)  # another position


def test_the_compiled_path_is_close_to_the_eager_one(static_cache):
    loaded, _ = static_cache
    prompts = _prompts(loaded, 1)
    on_compiled = _run(loaded, prompts)
    loaded.model.generation_config.cache_implementation = None
    eager = _run(loaded, prompts)
    assert on_compiled[0] == eager[0]
    for (logits_c, entropy_c, accepted_c), (logits_e, entropy_e, accepted_e) in zip(on_compiled[1], eager[1]):
        torch.testing.assert_close(logits_c, logits_e, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(entropy_c, entropy_e, rtol=1e-4, atol=1e-4)


def test_the_commit_tracer_sees_the_same_calls_on_the_compiled_path(static_cache):
    loaded, _ = static_cache
    prompts = _prompts(loaded, 2)
    with pytest.raises(CanvaslabError, match="compiled copy"):
        CommitTracer(loaded.model)  # stock mode's compiled path: transformers compiles the sampler
    traced = {}
    for cache in ("static", None):
        loaded.model.generation_config.cache_implementation = cache
        tracer = CommitTracer(loaded.model, mode="invariant")
        generate(loaded, prompts, mode="invariant", generation=STEPS, observers=[tracer], seed=2)
        traced[cache] = tracer.calls
    assert len(traced["static"]) == len(traced[None]) == STEPS["max_denoising_steps"]
    for fast, eager in zip(traced["static"], traced[None]):
        assert (fast.step, fast.canvas) == (eager.step, eager.canvas)
        assert (fast.accepted == eager.accepted).all()
        assert abs(fast.entropy - eager.entropy).max() < 1e-4


def test_a_function_mode_that_cannot_see_compiled_code_is_refused(static_cache):
    from torch.overrides import TorchFunctionMode

    class Recorder(TorchFunctionMode):  # like the capture recorder: sees every torch call it is given
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    loaded, _ = static_cache
    with pytest.raises(CanvaslabError, match="cannot see inside compiled code"), Recorder():
        _run(loaded, _prompts(loaded, 1))


def test_the_copied_prompt_cache_is_refused_on_the_static_cache(static_cache):
    loaded, _ = static_cache
    with pytest.raises(CanvaslabError, match="dynamic cache"):
        _run(loaded, _prompts(loaded, 1), copy_prompt_cache=True)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="a CPU model's fused step needs TRITON_INTERPRET=1; tests/gpu covers CUDA")
def test_the_fused_steps_compiled_pass_is_the_same_alone_and_in_batches(static_cache, monkeypatch):
    loaded, checked = static_cache
    monkeypatch.setattr(Invariant, "streams_vocabulary", lambda self, model: True)
    prompts = _prompts(loaded, 3)
    alone = _run(loaded, prompts[:1])
    assert "pass" in vars(loaded.model)[compiled_path.CACHE_ATTRIBUTE]
    # the vocabulary pass is in the compiled graph as canvaslab's op (functional: it returns the scaled logits)
    assert any("canvaslab.vocab_sample.default" in " ".join(map(str, (node.target, *node.args[:1])))
               for graph in checked for node in graph.nodes)
    assert _same(alone, _run(loaded, [prompts[0], prompts[1], prompts[2]]))
