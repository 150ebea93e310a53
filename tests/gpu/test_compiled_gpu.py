"""Invariant mode on transformers' compiled static-cache path, on a real GPU (Inductor, canvaslab's ops
inside, the fused step's CUDA graphs around the compiled pass).

At real shapes (2 layers, bf16) a row's every pass (scaled logits, entropy, accepted set) and its tokens
are the same bytes alone, among copies and among longer prompts (left-padded), at another position;
passes after the second replay CUDA graphs; the compiled path's first pass is the eager invariant path's.
Run: ``python -m pytest -q -m gpu tests/gpu``.
"""

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

GENERATION = {"max_denoising_steps": 4, "confidence_threshold": 1e-30}  # never confident: 4 passes


class _Passes:
    def __init__(self, row):
        self.row, self.seen = row, []

    def on_accept(self, *, logits, accepted_mask, accepted_canvas, cur_step, entropy):
        self.seen.append((logits[self.row].clone(), entropy[self.row].clone(), accepted_mask[self.row].clone()))


@pytest.fixture(scope="module")
def compiled_model():
    from canvaslab.models import load_model

    loaded = load_model("real-shapes", device="cuda", layers=2)
    loaded.model.generation_config.cache_implementation = "static"
    return loaded


@pytest.fixture
def steps(monkeypatch):
    from canvaslab.generation.fused_step import FusedStep

    made = []
    original_init = FusedStep.__init__

    def remember(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(FusedStep, "__init__", remember)
    return made


def _run(loaded, prompts, row=0):
    from canvaslab.generation import generate

    passes = _Passes(row)
    out = generate(loaded, prompts, mode="invariant", generation=GENERATION, observers=[passes], seed=5)
    return out.rows[row].tokens, passes.seen


def _prompts(loaded):
    from canvaslab.prompts import BUILTIN_PROMPTS

    return [loaded.tokenizer(text)["input_ids"] for text in BUILTIN_PROMPTS[:4]]


def test_compiled_path_rows_are_the_same_bytes_alone_and_in_batches(compiled_model, steps):
    from canvaslab.generation.compiled_path import CACHE_ATTRIBUTE

    prompts = _prompts(compiled_model)
    alone = _run(compiled_model, prompts[:1])
    assert "pass" in vars(compiled_model.model)[CACHE_ATTRIBUTE]
    assert steps[-1].replays > 0 and steps[-1].graph_failures == []
    others = sorted(prompts[1:], key=len, reverse=True)
    for batch, row in (([prompts[0]] * 3, 0), ([prompts[0], *others], 0), ([others[0], prompts[0], others[1]], 1),
                       ([prompts[0]] * 8, 0)):
        tokens, seen = _run(compiled_model, batch, row)
        assert tokens == alone[0] and len(seen) == len(alone[1]) == 4
        for got, expected in zip(seen, alone[1]):
            assert all(torch.equal(a, b) for a, b in zip(got, expected)), (len(batch), row)


class _Backbone(torch.nn.Module):
    """A stand-in decoder: each canvas token's row of a table (an exact gather)."""

    def __init__(self, table):
        super().__init__()
        self.table = table

    def forward(self, *, decoder_input_ids, **ignored):
        from transformers.modeling_outputs import BaseModelOutput

        return BaseModelOutput(last_hidden_state=self.table[decoder_input_ids])


def test_the_compiled_pass_returns_the_scaled_logits_of_the_eager_pass():
    """The compiled decoder pass's vocabulary step gives the eager pass's bits: scaled logits, entropy,
    argmax, draw (passed on the H200 in session 7)."""
    from canvaslab.generation.compiled_path import decoder_pass
    from canvaslab.invariant import custom_ops
    from canvaslab.invariant.compiled import compile_invariant
    from canvaslab.invariant.triton_kernels import matmul

    generator = torch.Generator(device="cuda").manual_seed(0)
    table = torch.randn(64, 256, device="cuda", generator=generator).to(torch.bfloat16)
    weight = (torch.randn(256, 4096, device="cuda", generator=generator) / 4).to(torch.bfloat16)

    def lm_head(hidden):  # the same Triton matmul eagerly and compiled (canvaslab::matmul)
        b, length, k = hidden.shape
        return custom_ops.call("matmul", matmul, hidden.reshape(b * length, k), weight, None).view(b, length, -1)

    canvas = torch.randint(0, 64, (3, 16), device="cuda", generator=generator)
    seeds = torch.tensor([11, 12, 13], device="cuda")
    temperature = torch.tensor([0.7], device="cuda")
    args = (_Backbone(table), lm_head, 30.0, canvas, None, seeds, temperature, None, None)
    eager = decoder_pass(*args, decoder_position_ids=None, model_kwargs={})
    compiled = compile_invariant(decoder_pass)(*args, decoder_position_ids=None, model_kwargs={})
    raw = lm_head(table[canvas])
    assert not torch.equal(eager[0], raw)  # the scaled logits, not the lm_head output
    for name, got, expected in zip(("scaled", "entropy", "argmax", "draw"), compiled, eager):
        assert torch.equal(got, expected), name


def test_compiled_path_gives_the_eager_invariant_paths_first_pass(compiled_model):
    """The compiled static-cache path's first pass is the eager (dynamic cache) path's, bit for bit: the compiler
    changes nothing (session 12: the static cache run as Python gave the compiled bits) and the attention drops
    the static cache's empty slots, so it reduces over the dynamic cache's keys in the same kernel call."""
    prompts = _prompts(compiled_model)[:1]
    compiled_first = _run(compiled_model, prompts)[1][0]
    compiled_model.model.generation_config.cache_implementation = None
    try:
        eager_first = _run(compiled_model, prompts)[1][0]
    finally:
        compiled_model.model.generation_config.cache_implementation = "static"
    assert torch.equal(compiled_first[0], eager_first[0])
    assert torch.equal(compiled_first[1], eager_first[1])
