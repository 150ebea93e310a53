"""The three kinds of --model: preset, local checkpoint directory, config.json (random weights)."""

import pytest
import torch

from canvaslab.generation import generate
from canvaslab.models import PRESETS, load_model


def test_tiny_preset_has_tiny_vision_tower_and_float32(tiny):
    vision = sum(p.numel() for n, p in tiny.model.named_parameters() if "vision" in n)
    assert vision < 1_000_000  # not the default ~167M-parameter tower
    assert tiny.model.dtype == torch.float32
    assert len(tiny.tokenizer) == tiny.vocab_size == 512


def test_real_shapes_config_matches_the_checkpoint():
    text = PRESETS["real-shapes"].build_config(layers=6).text_config
    assert (text.hidden_size, text.num_experts, text.top_k_experts, text.vocab_size) == (2816, 128, 8, 262144)
    assert text.layer_types == ["sliding_attention"] * 5 + ["full_attention"]
    assert PRESETS["real-shapes"].build_config().text_config.layer_types.count("full_attention") == 5


def test_checkpoint_directory_round_trip(tmp_path, tiny, prompt_ids):
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    loaded = load_model(str(tmp_path), dtype="float32")
    assert loaded.source["kind"] == "checkpoint"
    for name, parameter in tiny.model.state_dict().items():
        assert torch.equal(parameter, loaded.model.state_dict()[name].to(parameter.dtype)), name
    loaded.generation_defaults = tiny.generation_defaults
    assert generate(loaded, [prompt_ids], seed=1, generation={"max_denoising_steps": 2}).rows[0].tokens


def test_config_file_builds_seeded_random_weights(tmp_path, tiny):
    tiny.model.config.save_pretrained(tmp_path)
    a = load_model(str(tmp_path / "config.json"), dtype="float32", seed=1)
    b = load_model(str(tmp_path / "config.json"), dtype="float32", seed=1)
    c = load_model(str(tmp_path / "config.json"), dtype="float32", seed=2)
    weight = "model.decoder.layers.0.mlp.down_proj.weight"
    assert torch.equal(a.model.state_dict()[weight], b.model.state_dict()[weight])
    assert not torch.equal(a.model.state_dict()[weight], c.model.state_dict()[weight])
    assert a.source["kind"] == "config" and len(a.tokenizer) == 512


def test_a_config_whose_fields_transformers_refuses_is_one_line(tmp_path):
    import json

    from canvaslab.errors import CanvaslabError
    from canvaslab.models.presets import PRESETS

    raw = json.loads(PRESETS["tiny"].build_config().to_json_string())
    raw["text_config"]["max_position_embeddings"] = None
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(CanvaslabError, match="not a valid DiffusionGemma config: .*max_position_embeddings"):
        load_model(str(path))
