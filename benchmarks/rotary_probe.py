"""Where the fused query/key norm + rotary launch (``norms.FUSE_ROTARY``) and transformers' ops part (issue 15).

1. The kernel alone, at the model's head shapes and its own rotary angles (positions 0..2,303): the fused launch
   against the norm kernel then transformers' ``apply_rotary_pos_emb``, called eagerly and inside a function
   compiled with canvaslab's backend; and the angles themselves, eager against compiled.
2. Module by module (the first call of each: the encoder's pass, the decoder's first), the dynamic cache against
   the static one run as Python, with the fusion on and off: where they first part.
3. With ``--first-pass``, the first pass's scaled logits, B=1, the three ways of ``compiled_closeness`` (dynamic cache, static cache
   run as Python, static cache compiled) each with the fusion on and off, compared pairwise.

    python benchmarks/rotary_probe.py --model real-shapes --layers 2 --device cuda --out rotary_probe.json
"""

from __future__ import annotations

import argparse
import collections
import itertools
from pathlib import Path

import torch

from canvaslab.invariant import norms
from canvaslab.io import write_json_atomic
from canvaslab.models import load_model
from canvaslab.prompts import BUILTIN_PROMPTS
from compiled_closeness import compare, first_pass  # benchmarks/ (the script's own folder is on sys.path)


def _gap(a: torch.Tensor, b: torch.Tensor) -> dict:
    gap = (a.float() - b.float()).abs()
    return {"equal": torch.equal(a, b), "max_abs": gap.max().item(), "differing": int((gap > 0).sum())}


def kernel_checks(loaded) -> dict:
    from transformers.models.diffusion_gemma.modeling_diffusion_gemma import apply_rotary_pos_emb

    from canvaslab.invariant import custom_ops
    from canvaslab.invariant.compiled import compile_invariant
    from canvaslab.invariant.triton_kernels import rms_norm

    text = loaded.model.config.text_config
    rotary = next(m for m in loaded.model.modules() if type(m).__name__.endswith("TextRotaryEmbedding"))
    device, dtype = loaded.device, loaded.model.dtype
    generator = torch.Generator(device=device).manual_seed(0)
    positions = torch.arange(2304, device=device)[None]
    results = {}
    for layer_type in sorted(set(text.layer_types)):
        config = text.per_layer_config[layer_type]
        probe = torch.zeros(1, 2304, text.hidden_size, device=device, dtype=dtype)
        cos, sin = rotary(probe, positions, layer_type)
        compiled_cos, compiled_sin = compile_invariant(lambda p: rotary(probe, p, layer_type))(positions)
        for heads in sorted({text.num_attention_heads, config.num_key_value_heads}):
            x = (torch.randn(1, 2304, heads, config.head_dim, device=device, generator=generator) * 3).to(dtype)
            weight = (1 + torch.randn(config.head_dim, device=device, generator=generator) / 4).to(dtype)
            fused = rms_norm(x, weight, text.rms_norm_eps, rope=(cos, sin))
            reference = apply_rotary_pos_emb(rms_norm(x, weight, text.rms_norm_eps), cos, sin, unsqueeze_dim=2)

            def inside(x, cos, sin):
                return custom_ops.rms_norm_rope(x, weight, text.rms_norm_eps, cos, sin)

            def unfused(x, cos, sin):
                return apply_rotary_pos_emb(custom_ops.rms_norm(x, weight, text.rms_norm_eps), cos, sin, unsqueeze_dim=2)

            results[f"{layer_type} heads={heads} d={config.head_dim}"] = {
                "fused_vs_eager_ops": _gap(fused, reference),
                "fused_compiled_vs_fused_eager": _gap(compile_invariant(inside)(x, cos, sin), fused),
                "unfused_compiled_vs_eager_ops": _gap(compile_invariant(unfused)(x, cos, sin), reference),
                "compiled_angles_vs_eager": {"cos": _gap(compiled_cos, cos), "sin": _gap(compiled_sin, sin)},
            }
            print(layer_type, heads, results[f"{layer_type} heads={heads} d={config.head_dim}"], flush=True)
    return results


def model_checks(loaded, ways: list[str]) -> dict:
    prompt = loaded.tokenizer(BUILTIN_PROMPTS[0])["input_ids"]
    seen = {}
    for fuse, way in itertools.product((False, True), ways):
        norms.FUSE_ROTARY = fuse
        try:
            seen[f"{way} fused={fuse}"] = first_pass(loaded, prompt, way)
        finally:
            norms.FUSE_ROTARY = True
    pairs = {f"{a} vs {b}": compare(seen[a], seen[b]) for a, b in itertools.combinations(seen, 2)}
    for name, result in pairs.items():
        print(name, result, flush=True)
    return pairs


class ModuleOutputs:
    """Every module's first output (the encoder's pass and the decoder's first pass) and the attention function's
    query/key/value, in call order, for one generate call."""

    def __init__(self, model):
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        self.seen: dict[str, torch.Tensor] = {}
        self.handles = [module.register_forward_hook(self._keep(name)) for name, module in model.named_modules()
                        if name and "layers." in name]
        self.functions, self.calls = ALL_ATTENTION_FUNCTIONS, collections.Counter()
        self.saved = dict(self.functions)
        for name, function in self.saved.items():
            self.functions[name] = self._attention(function)

    def _keep(self, name):
        def hook(module, args, output):
            output = output[0] if isinstance(output, tuple) else output
            if torch.is_tensor(output) and name not in self.seen:
                self.seen[name] = output.detach().clone()
        return hook

    def _attention(self, function):
        def attention(module, query, key, value, *args, **kwargs):
            call = f"layer {module.layer_idx} {type(module).__name__} call {self.calls[id(module)]}"
            self.calls[id(module)] += 1
            if call.endswith("call 0"):
                for label, tensor in (("query", query), ("key", key), ("value", value)):
                    self.seen[f"{call} {label}"] = tensor.detach().clone()
            return function(module, query, key, value, *args, **kwargs)
        return attention

    def close(self):
        for handle in self.handles:
            handle.remove()
        self.functions.update(self.saved)


def module_checks(loaded) -> dict:
    """Where the dynamic and the static cache first part, module by module, with the fusion on and off (static
    keys and values hold [prompt | canvas | empty slots]: compared on the dynamic cache's length)."""
    prompt = loaded.tokenizer(BUILTIN_PROMPTS[0])["input_ids"]
    result = {}
    for fuse in (False, True):
        seen = {}
        for way in ("dynamic", "static-eager"):
            norms.FUSE_ROTARY = fuse
            outputs = ModuleOutputs(loaded.model)
            try:
                first_pass(loaded, prompt, way)
            finally:
                outputs.close()
                norms.FUSE_ROTARY = True
            seen[way] = outputs.seen
        rows = []
        for name, a in seen["dynamic"].items():
            b = seen["static-eager"].get(name)
            if b is None:
                continue
            if a.shape != b.shape and a.dim() == 4 and b.shape[:2] == a.shape[:2]:
                b = b[:, :, : a.shape[2]]
            rows.append({"module": name, **(_gap(a, b) if a.shape == b.shape else {"shapes": [list(a.shape), list(b.shape)]})})
        result[f"fused={fuse}"] = rows
        print(f"fused={fuse}: first differing:", [r for r in rows if not r.get("equal", False)][:6], flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="real-shapes")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--ways", default="dynamic,static-eager,static-inductor")
    parser.add_argument("--first-pass", action="store_true", help="also the first pass's logits, six ways (compiles)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    loaded = load_model(args.model, device=args.device, layers=args.layers)
    result = {"config": {**vars(args), "out": str(args.out)}, "kernel": kernel_checks(loaded)}
    write_json_atomic(args.out, result)
    result["modules"] = module_checks(loaded)
    write_json_atomic(args.out, result)
    if args.first_pass:
        result["first_pass"] = model_checks(loaded, args.ways.split(","))
        write_json_atomic(args.out, result)


if __name__ == "__main__":
    main()
