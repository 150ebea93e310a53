"""The fused sampler's, the long-K matmul plan's, the expert combine's and the routing Triton kernels compiled for the
H200 (sm_90) on the CPU, with Triton's own compiler and bundled ptxas: no GPU needed.

Triton's CPU interpreter runs a kernel's Python, so it accepts things the compiler rejects (a module-level
constant not declared ``tl.constexpr`` did exactly that and cost a device call). Compiling ahead of time
for Hopper catches such errors here; what the compiled code computes is checked on the GPU (``tests/gpu``).
The compile runs in a fresh process without ``TRITON_INTERPRET`` (under it, kernels are interpreted objects).
"""

import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

COMPILE = """
import sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from canvaslab.invariant import triton_kernels as tk

vocab = int(sys.argv[1])
rows, quarter, warps = tk.vocab_plan(vocab)
signature = {
    "logits_ptr": "*bf16", "out_ptr": "*bf16", "seeds_ptr": "*i64", "entropy_ptr": "*fp32", "argmax_ptr": "*i64",
    "sample_ptr": "*i64", "R": "i32", "V": "i32", "L": "i32", "s_in": "i32", "s_out": "i32", "softcap": "fp32",
    "temperature_ptr": "*fp32", "HAS_SOFTCAP": "constexpr", "ROWS": "constexpr", "QUARTER": "constexpr",
    "N_BLOCKS": "constexpr", "EVEN": "constexpr"}
source = ASTSource(fn=tk._vocab_sample_kernel, signature=signature,
                   constexprs={"HAS_SOFTCAP": True, "ROWS": rows, "QUARTER": quarter,
                               "N_BLOCKS": -(-vocab // (4 * quarter)), "EVEN": vocab % (4 * quarter) == 0})
kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
assert ".target sm_90" in kernel.asm["ptx"] and kernel.asm["cubin"]
print("compiled")
"""


COMPILE_MATMUL_AND_COMBINE = """
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from canvaslab.invariant import triton_kernels as tk

plan = tk.matmul_plan(262_144, 2816)
pointers = {"a_ptr": "*bf16", "b_ptr": "*bf16", "out_ptr": "*fp32", "bias_ptr": "*bf16"}
ints = dict.fromkeys(["M", "N", "K", "k_per_split", "s_ab", "s_am", "s_ak", "s_bb", "s_bk", "s_bn", "s_ob", "s_os",
                      "s_om", "s_on"], "i32")
constexprs = {"SPLIT": plan["split"], "HAS_BIAS": False, "FP32_INPUTS": False, "K_STEPS": 262_144 // plan["split"] // 64,
              "BM": plan["BM"], "BN": plan["BN"], "BK": plan["BK"], "GROUP_M": plan["GROUP_M"]}
signature = {**pointers, **ints, **dict.fromkeys(constexprs, "constexpr")}
kernel = triton.compile(ASTSource(fn=tk._matmul_kernel, signature=signature, constexprs=constexprs),
                        target=GPUTarget("cuda", 90, 32),
                        options={"num_warps": plan["num_warps"], "num_stages": plan["num_stages"]})
assert kernel.asm["cubin"]
signature = {"routed_ptr": "*bf16", "slots_ptr": "*i64", "weights_ptr": "*fp32", "out_ptr": "*bf16", "T": "i32",
             "H": "i32", "s_r": "i32", "s_o": "i32", "TOP_K": "constexpr", "ROWS": "constexpr", "BLOCK": "constexpr"}
kernel = triton.compile(ASTSource(fn=tk._combine_kernel, signature=signature,
                                  constexprs={"TOP_K": 8, "ROWS": 4, "BLOCK": 1024}),
                        target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
assert kernel.asm["cubin"]
signature = {"x_ptr": "*bf16", "w_ptr": "*bf16", "out_ptr": "*bf16", "group_ends_ptr": "*i32", "tile_ends_ptr": "*i32",
             "rows_ptr": "*i64", **dict.fromkeys(["S", "N", "K", "E", "s_xm", "s_xk", "s_we", "s_wk", "s_wn", "s_om",
                                                   "s_on"], "i32")}
for dtype, pointer in ((torch.bfloat16, "*bf16"), (torch.float32, "*fp32")):
    grouped = tk.grouped_plan(dtype)
    constexprs = {"E_BLOCK": 128, "K_STEPS": 2816 // grouped["BK"], "FP32_INPUTS": dtype == torch.float32, "GATHER": True,
                  "BM": grouped["BM"], "BN": grouped["BN"], "BK": grouped["BK"]}
    typed = {**signature, "x_ptr": pointer, "w_ptr": pointer, "out_ptr": pointer}
    kernel = triton.compile(ASTSource(fn=tk._grouped_kernel, signature={**typed, **dict.fromkeys(constexprs, "constexpr")},
                                      constexprs=constexprs), target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": grouped["num_warps"], "num_stages": grouped["num_stages"]})
    assert kernel.asm["cubin"] and kernel.metadata.shared <= 227 * 1024, kernel.metadata.shared
print("compiled")
"""


COMPILE_ROUTING = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from canvaslab.invariant import triton_kernels as tk


def compile(fn, signature, constexprs, warps):
    signature = {**signature, **dict.fromkeys(constexprs, "constexpr")}
    kernel = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs),
                            target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    assert kernel.asm["cubin"]


block = tk.grouping_block(262_144)
counting = {"BLOCK": block, "CHUNK": tk.ROUTING_CHUNK, "E_BLOCK": 128}
compile(tk._expert_histogram_kernel, {"ids_ptr": "*i64", "hist_ptr": "*i32", "N": "i32", "E": "i32"}, counting, 8)
compile(tk._expert_slots_kernel, {"ids_ptr": "*i64", "hist_ptr": "*i32", "order_ptr": "*i64", "rows_ptr": "*i64",
                                  "slots_ptr": "*i64", "counts_ptr": "*i64", "group_ends_ptr": "*i32",
                                  "tile_ends_ptr": "*i32", "N": "i32", "E": "i32", "NB": "i32", "TOP_K": "i32"},
        {**counting, "TILE_M": tk.GROUPED_BLOCK_M, "NB_CHUNK": 32}, 8)
rows, width, warps = tk.row_shape(128)
compile(tk._router_kernel, {"scores_ptr": "*bf16", "expert_scale_ptr": "*bf16", "probs_ptr": "*fp32",
                            "weights_ptr": "*fp32", "indices_ptr": "*i64", "R": "i32", "E": "i32", "s_x": "i32"},
        {"K": 8, "ROWS": rows, "BLOCK": width, "K_BLOCK": 8}, warps)
print("compiled")
"""


def _compile_in_a_fresh_process(script: str, *args: str) -> None:
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # the compiler's default; set to keep newer Triton versions quiet
    done = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "compiled" in done.stdout, done.stderr[-3000:]


@pytest.mark.parametrize("vocab", [262_144, 512])
def test_vocab_sample_kernel_compiles_for_hopper(vocab):
    _compile_in_a_fresh_process(COMPILE, str(vocab))


def test_long_k_matmul_plan_expert_combine_and_gathering_grouped_kernel_compile_for_hopper():
    # The wide self-conditioning plan (128 x 256 tiles, 8 warps, grouped order), the combine kernel and the
    # grouped experts' kernel gathering its rows.
    _compile_in_a_fresh_process(COMPILE_MATMUL_AND_COMBINE)


@pytest.mark.slow
def test_routing_kernels_compile_for_hopper():
    # The experts' grouping at B=128's 262,144 entries over 128 experts, and the router at 128 experts, top-8.
    _compile_in_a_fresh_process(COMPILE_ROUTING)
