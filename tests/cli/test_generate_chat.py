"""`canvaslab generate` gives a chat checkpoint (a trained `mini`) its prompt as a user turn, and a
template-less tokenizer (the presets) its plain ids."""

from __future__ import annotations

import torch
from transformers import DiffusionGemmaForBlockDiffusion

import canvaslab.generation
from canvaslab.cli.main import main
from canvaslab.models.mini import load_mini_tokenizer, mini_config
from canvaslab.training import chat


def _capture(monkeypatch) -> list:
    seen = []

    def fake_generate(loaded, ids, **kwargs):
        seen.append(ids)
        raise SystemExit(0)

    # the command imports generate when it runs: patched where it is looked up
    monkeypatch.setattr(canvaslab.generation, "generate", fake_generate)
    return seen


def test_chat_checkpoint_gets_the_user_turn(tmp_path, monkeypatch):
    torch.manual_seed(0)
    toy = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, head_dim=16,
               global_head_dim=16, moe_intermediate_size=16, num_experts=4)
    DiffusionGemmaForBlockDiffusion(mini_config(canvas_length=16, **toy)).save_pretrained(tmp_path)
    load_mini_tokenizer().save_pretrained(tmp_path)
    seen = _capture(monkeypatch)
    try:
        main(["generate", "--prompt", "What is 2 + 3?", "--model", str(tmp_path)])
    except SystemExit:
        pass
    expected = load_mini_tokenizer()(chat.prompt_text("What is 2 + 3?"), add_special_tokens=False)["input_ids"]
    assert seen == [[expected]]


def test_preset_without_template_gets_plain_ids(monkeypatch):
    seen = _capture(monkeypatch)
    try:
        main(["generate", "--prompt", "hello world", "--model", "tiny"])
    except SystemExit:
        pass
    from canvaslab.models.tokenizer import build_synthetic_tokenizer

    assert seen == [[build_synthetic_tokenizer(512)("hello world")["input_ids"]]]
