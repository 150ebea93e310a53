"""Where the compiled path's first pass departs from the eager invariant path's: the same prompt, seed and
B=1 run four ways, their first pass's scaled logits and entropy compared pairwise.

- ``dynamic``: the eager invariant path (dynamic cache, fused step);
- ``static-eager``: the static cache with nothing compiled (the compiled path's code, run as Python);
- ``static-traced``: compiled with ``compiled.traced_backend`` (the aten -> canvaslab mapping and graph
  check, the traced graph run as it is: no Inductor code);
- ``static-inductor``: compiled with ``invariant_backend`` (what invariant mode runs).

A difference between ``dynamic`` and ``static-eager`` is the static cache's; between ``static-eager`` and
``static-traced`` the decompositions' (canvaslab's ops on the compiled path); between ``static-traced`` and
``static-inductor`` Inductor's generated code.

    python benchmarks/compiled_closeness.py --model real-shapes --layers 2 --device cuda --out closeness.json
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

import torch

import canvaslab.generation.compiled_path as compiled_path
import canvaslab.invariant.compiled as compiled
from canvaslab.generation import generate
from canvaslab.io import write_json_atomic
from canvaslab.models import load_model
from canvaslab.prompts import BUILTIN_PROMPTS

WAYS = ("dynamic", "static-eager", "static-traced", "static-inductor")


class FirstPass:
    def __init__(self):
        self.seen = None

    def on_accept(self, *, logits, accepted_mask, accepted_canvas, cur_step, entropy):
        if self.seen is None:
            self.seen = (logits[0].float().clone(), entropy[0].float().clone())


def first_pass(loaded, prompt, way: str):
    model = loaded.model
    model.generation_config.cache_implementation = None if way == "dynamic" else "static"
    vars(model).pop(compiled_path.CACHE_ATTRIBUTE, None)  # each way compiles its own functions
    torch._dynamo.reset()
    original = compiled.compile_invariant
    if way == "static-eager":
        compiled.compile_invariant = lambda fn, backend=None: fn
    compiled_path.BACKEND = compiled.traced_backend if way == "static-traced" else None
    observer = FirstPass()
    try:
        generate(loaded, [prompt], mode="invariant", seed=5, observers=[observer],
                 generation={"max_denoising_steps": 1, "confidence_threshold": 1e-30})
    finally:
        compiled.compile_invariant, compiled_path.BACKEND = original, None
    return observer.seen


def compare(a, b) -> dict:
    logits = (a[0] - b[0]).abs()
    return {"logits_max_abs": logits.max().item(), "logits_frac_over_0.1": (logits > 0.1).float().mean().item(),
            "entropy_max_abs": (a[1] - b[1]).abs().max().item(), "same_bits": torch.equal(a[0], b[0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto", help="auto (the preset's), bfloat16 or float32")
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    loaded = load_model(args.model, device=args.device, layers=args.layers, dtype=args.dtype)
    prompt = loaded.tokenizer(BUILTIN_PROMPTS[0])["input_ids"]
    seen, seconds = {}, {}
    for way in args.ways.split(","):
        start = time.time()
        seen[way] = first_pass(loaded, prompt, way)
        seconds[way] = time.time() - start
        print(way, f"{seconds[way]:.1f} s", "logits max", seen[way][0].abs().max().item(), flush=True)
    pairs = {f"{a} vs {b}": compare(seen[a], seen[b]) for a, b in itertools.combinations(seen, 2)}
    for name, result in pairs.items():
        print(name, result, flush=True)
    write_json_atomic(args.out, {"config": {**vars(args), "out": str(args.out)}, "seconds": seconds, "pairs": pairs})


if __name__ == "__main__":
    main()
