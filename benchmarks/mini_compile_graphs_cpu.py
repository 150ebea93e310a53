#!/usr/bin/env python
"""How many graphs `--compile layers|leaves` makes Dynamo build for `mini`, and why it recompiles (CPU).

Compile time grows with the number of distinct graphs. This runs a few real training steps
(``canvaslab.training.loop.train``, full-size `mini` config, batch 4) with the parts that
``compile_parts`` selects compiled by Dynamo's ``eager`` backend (graph capture and guards are Dynamo's
own; no Inductor code is generated, so it runs in seconds on a CPU) and reports Dynamo's counters and the
guard failures that caused each recompile, grouped by the guarded expression.

    python benchmarks/mini_compile_graphs_cpu.py --parts layers --out FILE [--steps 4] [--unspec-int-attributes]
"""

from __future__ import annotations

import argparse
import json
import logging
import re
from collections import Counter
from pathlib import Path

import torch
import torch._dynamo
from torch._dynamo.utils import counters
from transformers import DiffusionGemmaForBlockDiffusion

from canvaslab.environment import environment_fingerprint
from canvaslab.models.mini import load_mini_tokenizer, mini_config
from canvaslab.training.batches import Pool, generate_texts
from canvaslab.training.loop import TrainSettings, compile_parts, train


class _GuardFailures(logging.Handler):
    """Collects the first guard failure of each recompile (the line after 'triggered by')."""

    def __init__(self) -> None:
        super().__init__()
        self.reasons: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        lines = record.getMessage().splitlines()
        failures = [line.strip() for line in lines if line.strip().startswith("- ") and "User stack" not in line]
        if failures:
            # "- 0/3: args[0]._modules['self_attn'].layer_idx == 3  # ..." -> the expression, values dropped
            reason = re.sub(r"^- [0-9/]+: ", "", failures[0]).split("  #")[0]
            self.reasons[re.sub(r"(==|size mismatch.*expected) .*", r"\1 ...", reason)] += 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", choices=("layers", "leaves"), default="layers")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--unspec-int-attributes", action="store_true",
                        help="Dynamo's allow_unspec_int_on_nn_module: modules' int attributes (a layer's index) "
                             "as symbols, not constants (does it share one graph among a type's layers?)")
    args = parser.parse_args()
    torch._dynamo.config.allow_unspec_int_on_nn_module = args.unspec_int_attributes
    original_compile = torch.nn.Module.compile
    torch.nn.Module.compile = lambda self, **kw: original_compile(self, backend="eager", **kw)
    handler = _GuardFailures()
    torch._logging.set_logs(recompiles=True)
    logging.getLogger("torch._dynamo").addHandler(handler)
    pool = Pool.build(load_mini_tokenizer(), generate_texts(None, 200, 0, workers=1), 256)
    torch.manual_seed(0)
    model = DiffusionGemmaForBlockDiffusion(mini_config())
    modules = compile_parts(model, args.parts)
    train(model, pool, TrainSettings(steps=args.steps, batch_size=4, log_every=1, learning_rate=1e-4),
          "diffusion", canvas_length=128)
    result = {"parts": args.parts, "unspec_int_attributes": args.unspec_int_attributes,
              "modules_compiled": modules, "steps": args.steps,
              "unique_graphs": counters["stats"]["unique_graphs"], "frames": dict(counters["frames"]),
              "recompile_reasons": dict(handler.reasons.most_common()),
              "environment": environment_fingerprint(device=torch.device("cpu"))}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "environment"}, indent=1))


if __name__ == "__main__":
    main()
