"""``models.anatomy`` matches transformers' DiffusionGemma: every path names a module of the class it
should, the name tests pick out exactly those modules, and nothing else in canvaslab spells the tree."""

from __future__ import annotations

import ast
import subprocess
import sys
import types
from pathlib import Path

import pytest

from canvaslab.models import anatomy

SRC = Path(__file__).resolve().parents[2] / "src" / "canvaslab"
# The tree's parts above a layer, and the recorded-name suffixes anatomy tests (``is_router_projection``...).
TREE_ATTRIBUTES = {"encoder", "decoder", "language_model", "lm_head", "self_conditioning", "rotary_emb"}
TREE_SUFFIXES = {"router.proj", "lm_head", "Experts"}


def test_every_part_is_the_class_transformers_gives_it(tiny):
    model = tiny.model
    layers = anatomy.encoder_layers(model) + anatomy.decoder_layers(model)
    assert len(anatomy.decoder_layers(model)) == model.config.text_config.num_hidden_layers
    assert all(isinstance(layer, anatomy.DECODER_LAYER_CLASS) for layer in anatomy.decoder_layers(model))
    assert all(isinstance(layer, anatomy.ENCODER_LAYER_CLASS) for layer in anatomy.encoder_layers(model))
    for layer in layers:
        assert isinstance(getattr(layer, anatomy.ATTENTION),
                          (anatomy.ENCODER_ATTENTION_CLASS, anatomy.DECODER_ATTENTION_CLASS))
        assert isinstance(getattr(layer, anatomy.ROUTER), anatomy.ROUTER_CLASS)
        assert isinstance(getattr(layer, anatomy.EXPERTS), anatomy.EXPERTS_CLASS)
        assert isinstance(getattr(layer, anatomy.DENSE_MLP), anatomy.DENSE_MLP_CLASS)
        for norm in (anatomy.INPUT_NORM, anatomy.POST_ATTENTION_NORM, anatomy.PRE_FEEDFORWARD_NORM,
                     anatomy.POST_FEEDFORWARD_NORM):
            assert isinstance(getattr(layer, norm), anatomy.RMS_NORM_CLASS)
    decoder = anatomy.decoder(model)
    assert isinstance(getattr(decoder, anatomy.SELF_CONDITIONING), anatomy.SELF_CONDITIONING_CLASS)
    assert all(isinstance(r, anatomy.ROTARY_CLASS) for r in anatomy.rotary_embeddings(model))
    assert anatomy.self_conditioning_embedding(model) is decoder.embed_tokens.weight
    assert anatomy.lm_head(model) is model.lm_head and anatomy.encoder(model) is model.model.encoder


def test_rms_norm_epsilon_reads_the_installed_transformers_norm_and_both_spellings(tiny):
    """transformers 5.25 renamed the RMSNorm's ``eps`` to ``variance_epsilon``; the fused kernels need it."""
    eps = tiny.model.config.text_config.rms_norm_eps
    norms = [m for m in tiny.model.modules() if isinstance(m, anatomy.RMS_NORM_CLASS)]
    assert norms and {anatomy.rms_norm_epsilon(norm) for norm in norms} == {eps}
    assert anatomy.rms_norm_epsilon(types.SimpleNamespace(eps=1e-5)) == 1e-5
    assert anatomy.rms_norm_epsilon(types.SimpleNamespace(variance_epsilon=1e-3)) == 1e-3
    with pytest.raises(AttributeError, match="transformers changed its RMSNorm"):
        anatomy.rms_norm_epsilon(types.SimpleNamespace())


def test_name_tests_pick_out_exactly_those_modules(tiny):
    model = tiny.model
    names = {module: name for name, module in model.named_modules()}
    decoder_layers = {names[layer]: index for index, layer in enumerate(anatomy.decoder_layers(model))}
    assert decoder_layers == {name: anatomy.decoder_layer_index(name) for name in names.values()
                              if anatomy.decoder_layer_index(name) is not None}
    assert set(decoder_layers) == {f"model.decoder.layers.{i}" for i in range(len(decoder_layers))}  # as recorded
    routers = {names[module] for name, module in model.named_modules()
               if isinstance(module, anatomy.ROUTER_CLASS) for module in [module.proj]}
    assert routers == {name for name in names.values() if anatomy.is_router_projection(name)}
    assert {name for name in names.values() if anatomy.is_lm_head(name)} == {"lm_head"}


def _is_model(node: ast.expr) -> bool:
    """``model`` or ``<anything>.model``: a DiffusionGemma model or its backbone."""
    return isinstance(node, ast.Name) and node.id == "model" or isinstance(node, ast.Attribute) and node.attr == "model"


def _tree_walks(path: Path) -> list[str]:
    """Attribute walks into the model's tree, and name-suffix tests, in ``path``'s code (docstrings aside)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in TREE_ATTRIBUTES and _is_model(node.value):
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "endswith"
              and any(isinstance(a, ast.Constant) and a.value in TREE_SUFFIXES for a in node.args)):
            found.append(f"{path.name}:{node.lineno} endswith")
    return found


def test_no_other_module_walks_the_model_tree():
    offenders = [walk for path in sorted(SRC.rglob("*.py")) if path.name != "anatomy.py" for walk in _tree_walks(path)]
    assert offenders == []


def test_the_report_tables_still_import_no_torch():
    code = "import sys, canvaslab.reports.batch_study; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
