#!/usr/bin/env python
"""Plumbing checks of the diffusion objective at toy size (CPU), for the run-3 diagnosis in docs/mini-model.md.

- ``attention``: which canvas logits change when one canvas token or one prompt token changes (row 0 has
  two left-pad tokens, which must change nothing);
- ``left_pad_shift``: the largest logit change when the prompt gets 16 or 100 more left-pad tokens
  (positions continue after the padded prefix, so only relative positions may matter);
- ``autocast``: per parameter, the cosine between the fp32 gradient of one diffusion step and its
  gradient under bf16 autocast with the experts function the GPU path registers (parameters without one
  are listed), with and without self-conditioning.

    python benchmarks/mini_objective_checks.py --out FILE.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import DiffusionGemmaForBlockDiffusion

from canvaslab.environment import environment_fingerprint
from canvaslab.io import write_json_atomic
from canvaslab.models.mini import mini_config
from canvaslab.training.objective import (DiffusionBatch, NoiseSchedule, decoder_logits, diffusion_loss, encode_prefix,
                                         restore_experts, use_autocast_experts)

SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 2,
         "head_dim": 32, "global_head_dim": 32, "moe_intermediate_size": 64, "num_experts": 4}


def _logits(model, ids, mask, canvas):
    batch = DiffusionBatch(ids, mask, canvas)
    with torch.no_grad():
        return decoder_logits(model, encode_prefix(model, batch), batch, canvas)


def attention(model) -> dict:
    ids = torch.randint(10, 4000, (2, 6))
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[0, :2] = False
    canvas = torch.randint(10, 4000, (2, 8))
    base, result = _logits(model, ids, mask, canvas), {"canvas": [], "prompt": []}
    for j in range(canvas.shape[1]):
        changed = canvas.clone()
        changed[:, j] = (changed[:, j] + 7) % 4000
        result["canvas"].append(((_logits(model, ids, mask, changed) - base).abs().amax(-1) > 1e-5).int().tolist())
    for j in range(ids.shape[1]):
        changed = ids.clone()
        changed[:, j] = (changed[:, j] + 7) % 4000
        result["prompt"].append(((_logits(model, changed, mask, canvas) - base).abs().amax(-1) > 1e-5).int().tolist())
    return result


def left_pad_shift(model) -> dict:
    ids, canvas = torch.randint(10, 4000, (1, 6)), torch.randint(10, 4000, (1, 8))
    padded = lambda pad: (F.pad(ids, (pad, 0)), F.pad(torch.ones_like(ids, dtype=torch.bool), (pad, 0)))
    base = _logits(model, *padded(0), canvas)
    return {str(pad): float((_logits(model, *padded(pad), canvas) - base).abs().max()) for pad in (16, 100)}


def _gradients(model, batch, self_condition: bool, autocast: bool) -> dict:
    model.zero_grad()
    context = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else torch.enable_grad()
    with context:
        loss = diffusion_loss(model, batch, NoiseSchedule(), torch.Generator().manual_seed(0), None, self_condition)
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def autocast(model) -> dict:
    batch = DiffusionBatch(torch.randint(10, 4000, (16, 12)), torch.ones((16, 12), dtype=torch.bool),
                           torch.randint(10, 4000, (16, 8)))
    result = {}
    for self_condition in (False, True):
        exact = _gradients(model, batch, self_condition, False)
        use_autocast_experts(model)
        cast = _gradients(model, batch, self_condition, True)
        restore_experts(model)
        cosines = {name: round(float(F.cosine_similarity(g.flatten(), cast[name].flatten(), 0)), 4)
                   for name, g in exact.items() if name in cast and g.norm() > 0}
        result[f"self_condition={self_condition}"] = {
            "without_gradient_under_autocast": sorted(set(exact) - set(cast)),
            "lowest_cosines": dict(sorted(cosines.items(), key=lambda item: item[1])[:8])}
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = DiffusionGemmaForBlockDiffusion(mini_config(8, **SMALL))
    report = {"model": SMALL, "attention": attention(model.eval()), "left_pad_shift": left_pad_shift(model),
              "autocast": autocast(model.train()), "environment": environment_fingerprint(device=torch.device("cpu"))}
    print({k: v for k, v in report.items() if k != "environment"})
    write_json_atomic(args.out, report)


if __name__ == "__main__":
    main()
