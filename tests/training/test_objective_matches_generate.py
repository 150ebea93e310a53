"""The training objective feeds the model exactly what transformers' generate loop feeds it.

Every decoder call of a real ``generate`` (two left-padded prompts of different lengths, two canvases,
self-conditioning from the second pass on) is recorded; the training path (``encode_prefix`` over the
same prefix, then ``decoder_logits`` with the recorded canvas and self-conditioning logits) must give
the same logits. A difference in positions, masks, the prefix in the encoder's cache, the canvas layout
after the prompt or the self-conditioning input would show here.
"""

from __future__ import annotations

import torch
from transformers import DiffusionGemmaForBlockDiffusion

from canvaslab.models.mini import mini_config
from canvaslab.training.batches import _left_pad
from canvaslab.training.objective import DiffusionBatch, decoder_logits, encode_prefix
from canvaslab.training.run import diffusion_generation_config

TOY = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 2,
       "head_dim": 16, "global_head_dim": 16, "moe_intermediate_size": 16, "num_experts": 4}
CANVAS, PASSES = 16, 3


def _recorded_generate(model, ids, mask) -> tuple[torch.Tensor, list[dict]]:
    calls, forward = [], model.forward

    def recording(**kwargs):
        output = forward(**kwargs)
        sc = kwargs.get("self_conditioning_logits")
        calls.append({"canvas": kwargs["decoder_input_ids"].clone(), "positions": kwargs["decoder_position_ids"].clone(),
                      "self_conditioning": None if sc is None else sc.clone(), "logits": output.logits.clone()})
        return output

    model.forward = recording
    try:
        sequences = model.generate(input_ids=ids, attention_mask=mask).sequences
    finally:
        del model.forward
    return sequences, calls


def test_training_path_gives_generates_logits_at_every_pass():
    torch.manual_seed(0)
    model = DiffusionGemmaForBlockDiffusion(mini_config(CANVAS, **TOY)).eval()
    # confidence 1e-9: no early stop, so every canvas runs all its passes
    model.generation_config = diffusion_generation_config(max_new_tokens=2 * CANVAS, max_denoising_steps=PASSES,
                                                          confidence_threshold=1e-9)
    prompts = [[2, 105, 300, 301, 302, 106, 105, 400], [2, 105, 310, 311, 312, 313, 314, 315, 106, 105, 400]]
    ids, mask = _left_pad(prompts, 0)
    sequences, calls = _recorded_generate(model, ids, mask)
    assert len(calls) == 2 * PASSES
    assert calls[0]["self_conditioning"] is None and calls[1]["self_conditioning"] is not None
    width = ids.shape[1]
    for index, call in enumerate(calls):
        block = index // PASSES
        prefix = sequences[:, : width + block * CANVAS]  # prompt, then the earlier canvases as generated
        prefix_mask = torch.cat([mask, torch.ones((2, block * CANVAS), dtype=torch.bool)], dim=1)
        batch = DiffusionBatch(prefix, prefix_mask, call["canvas"])
        extra = {} if call["self_conditioning"] is None else {"self_conditioning_logits": call["self_conditioning"]}
        with torch.no_grad():
            logits = decoder_logits(model, encode_prefix(model, batch), batch, call["canvas"], **extra)
        start = width + block * CANVAS
        assert call["positions"][0].tolist() == list(range(start, start + CANVAS))
        torch.testing.assert_close(logits, call["logits"], rtol=1e-4, atol=1e-4)
