"""A mode is one object that owns every behaviour switched on it (``canvaslab.invariant.modes``): named once at
the boundary, never compared by name elsewhere; it enters its own per-row positions, its caches live as long as
it is on, and whatever it shadows on the model is restored."""

import pickle
import re
from pathlib import Path

import pytest
import torch

from canvaslab.errors import CanvaslabError
from canvaslab.invariant import MODES, attention, generation_mode, mode_named, modes
from canvaslab.invariant.padding import PAD_ATTRIBUTE
from canvaslab.invariant.shadowing import shadowed
from canvaslab.models import anatomy

SRC = Path(__file__).resolve().parents[2] / "src" / "canvaslab"
NAME_COMPARISON = re.compile(r"""(==|!=)\s*["'](stock|rowwise|invariant)["']|["'](stock|rowwise|invariant)["']\s*(==|!=)""")


def test_no_code_outside_the_mode_module_compares_a_modes_name():
    found = [f"{path.relative_to(SRC)}:{number}: {line.strip()}"
             for path in sorted(SRC.rglob("*.py")) if path != SRC / "invariant" / "modes.py"
             for number, line in enumerate(path.read_text().splitlines(), 1) if NAME_COMPARISON.search(line)]
    assert found == []


def test_a_mode_is_named_once_and_is_one_object():
    assert MODES == ("stock", "rowwise", "invariant")
    for name in MODES:
        mode = mode_named(name)
        assert mode.name == name and mode_named(mode) is mode and pickle.loads(pickle.dumps(mode)) is mode
        assert mode != name  # an object, not its name
    with pytest.raises(CanvaslabError, match="--mode 'fast' is not one of: stock, rowwise, invariant"):
        mode_named("fast")
    assert [m.removes_padding_effect for m in map(mode_named, MODES)] == [False, False, True]
    assert [m.computes_rows_apart for m in map(mode_named, MODES)] == [False, True, False]


def test_invariant_mode_enters_each_padded_rows_positions_itself(tiny):
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    rotaries = anatomy.rotary_embeddings(tiny.model)
    for mode, shifted in ((modes.STOCK, False), (modes.ROWWISE, False), (modes.INVARIANT, True)):
        with mode.generating(tiny.model, mask):
            pads = [getattr(rotary, PAD_ATTRIBUTE, None) for rotary in rotaries]
        assert all((pad is not None) == shifted for pad in pads), mode
        if shifted:
            assert all(pad.tolist() == [2, 0] for pad in pads)
        assert all(PAD_ATTRIBUTE not in vars(rotary) for rotary in rotaries)


def test_the_attention_caches_live_as_long_as_the_mode(tiny):
    q, k = torch.randn(2, 2, 5, 8), torch.randn(2, 2, 7, 8)
    mask = torch.ones(2, 1, 5, 7, dtype=torch.bool)
    mask[0, ..., :2] = False
    assert attention._caches is None
    with generation_mode(tiny.model, "invariant"):
        caches = attention._caches
        first = attention.scaled_dot_product_attention(q, k, k, mask)
        causal = attention._explicit_mask(q, k, None, True)
        assert attention._explicit_mask(q, k, None, True) is causal  # one tensor per shape while the mode is on
        assert len(caches.groups) == 1 and len(caches.causal) == 1
    assert attention._caches is None  # nothing outlives the mode
    assert torch.equal(attention.scaled_dot_product_attention(q, k, k, mask), first)  # the same without a cache


def test_what_a_mode_shadows_is_restored(tiny):
    model = tiny.model
    own_forwards = {name for name, module in model.named_modules() if "forward" in vars(module)}
    with generation_mode(model, "rowwise"):
        routers = anatomy.decoder_router_projections(model)
        assert routers and all("forward" in vars(proj) for proj in routers)
    assert {name for name, module in model.named_modules() if "forward" in vars(module)} == own_forwards

    class Thing:
        def method(self):
            return "class"

    thing = Thing()
    with shadowed(thing, "method", lambda: "shadow"):
        assert thing.method() == "shadow"
    assert "method" not in vars(thing) and thing.method() == "class"
    thing.method = lambda: "own"
    with shadowed(thing, "method", lambda: "shadow"):
        assert thing.method() == "shadow"
    assert thing.method() == "own"
