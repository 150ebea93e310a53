"""Host time per call of the ops invariant mode replaces, at B=1 real shapes (one canvas, 256 rows).

At B=1 generate is bound by the host: what each op costs to *launch* sets the pace, not the GPU. This
times, per call, the enqueue (host) time of a loop of calls with no sync inside, and the total after a
final sync, for: the stock op, the op under ``library_overrides`` (dispatcher -> Python -> Triton), the
Triton wrapper called directly, and the bare Triton launch; and for RMSNorm the stock module, the module
under the overrides, and the fused kernel.

    python benchmarks/launch_cost.py --device cuda --out benchmarks/results/h200_launch_cost_b1.json
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import triton

from canvaslab.environment import environment_fingerprint
from canvaslab.invariant import ops, triton_kernels
from canvaslab.invariant.norms import fused_rms_norms
from canvaslab.io import write_json_atomic
from canvaslab.models import anatomy, load_model


def per_call_us(fn, calls: int = 200) -> dict:
    try:
        for _ in range(5):
            fn()
    except Exception as error:  # one case failing (e.g. a Triton internals change) must not lose the others
        return {"error": f"{type(error).__name__}: {error}"}
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    enqueued = time.perf_counter()
    torch.cuda.synchronize()
    done = time.perf_counter()
    return {"host_us": 1e6 * (enqueued - start) / calls, "total_us": 1e6 * (done - start) / calls}


def matmul_cases(x: torch.Tensor, weight: torch.Tensor) -> dict:
    a, b = x.reshape(-1, x.shape[-1]), weight.t()
    out = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
    m, k = a.shape
    n = b.shape[1]
    grid = (triton.cdiv(m, triton_kernels.BLOCK_M), triton.cdiv(n, triton_kernels.BLOCK_N), 1)

    def bare_launch():
        return triton_kernels._matmul_kernel[grid](
            a, b, out, out, m, n, k, k, 0, *a.stride(), 0, *b.stride(), 0, 0, *out.stride(),
            SPLIT=1, HAS_BIAS=False, FP32_INPUTS=False, K_STEPS=triton.cdiv(k, triton_kernels.BLOCK_K),
            BM=triton_kernels.BLOCK_M, BN=triton_kernels.BLOCK_N, BK=triton_kernels.BLOCK_K, GROUP_M=0)

    compiled = bare_launch()
    args = (a, b, out, out, m, n, k, k, 0, *a.stride(), 0, *b.stride(), 0, 0, *out.stride())
    constexprs = (1, False, False, triton.cdiv(k, triton_kernels.BLOCK_K), triton_kernels.BLOCK_M,
                  triton_kernels.BLOCK_N, triton_kernels.BLOCK_K, 0)
    stream = torch.cuda.current_stream().cuda_stream

    def compiled_run():  # what Triton's launcher does once the kernel is found: the floor for a Python launch
        compiled.run(grid[0], grid[1], grid[2], stream, compiled.function, compiled.packed_metadata, None, None, None,
                     *args, *constexprs)

    cases = {"stock_linear": lambda: torch.nn.functional.linear(x, weight),
             "direct_triton_matmul": lambda: triton_kernels.matmul(a, b),
             "bare_triton_launch": bare_launch,
             "compiled_kernel_run": compiled_run,
             "torch_empty": lambda: torch.empty(m, n, device=a.device, dtype=a.dtype)}
    results = {name: per_call_us(fn) for name, fn in cases.items()}
    with ops.library_overrides("CUDA"):
        results["override_linear"] = per_call_us(lambda: torch.nn.functional.linear(x, weight))
    return results


def norm_cases(norm: torch.nn.Module, x: torch.Tensor) -> dict:
    results = {"stock_module": per_call_us(lambda: norm(x))}
    with ops.library_overrides("CUDA"):
        results["override_module"] = per_call_us(lambda: norm(x))
    eps = anatomy.rms_norm_epsilon(norm)
    results["fused_direct"] = per_call_us(lambda: triton_kernels.rms_norm(x, norm.weight, eps))
    holder = torch.nn.ModuleList([norm])
    with fused_rms_norms(holder):
        results["fused_module"] = per_call_us(lambda: norm(x))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    loaded = load_model("real-shapes", device=args.device, layers=1)
    layer = anatomy.decoder_layers(loaded.model)[0]
    hidden = torch.randn(1, 256, loaded.model.config.text_config.hidden_size, device=args.device,
                         dtype=loaded.model.dtype)
    with torch.no_grad():
        results = {"q_proj (256 x 2816 @ 2816 x N)": matmul_cases(hidden, layer.self_attn.q_proj.weight),
                   "router.proj": matmul_cases(hidden, layer.router.proj.weight),
                   "input_layernorm (256 x 2816)": norm_cases(layer.input_layernorm, hidden)}
    for name, cases in results.items():
        print(name)
        for case, numbers in cases.items():
            if "error" in numbers:
                print(f"  {case:24s} {numbers['error']}")
            else:
                print(f"  {case:24s} host {numbers['host_us']:8.1f} us   total {numbers['total_us']:8.1f} us")
    environment = environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source, replaced_ops={})
    write_json_atomic(args.out, {"environment": environment, "per_call": results})


if __name__ == "__main__":
    main()
