"""The fused sampler's Triton kernel compiled for the H200 (sm_90) on the CPU, with Triton's own compiler and
bundled ptxas: no GPU needed.

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
rows, block, warps = tk.vocab_plan(vocab)
signature = {
    "logits_ptr": "*bf16", "out_ptr": "*bf16", "seeds_ptr": "*i64", "entropy_ptr": "*fp32", "argmax_ptr": "*i64",
    "sample_ptr": "*i64", "R": "i32", "V": "i32", "L": "i32", "s_in": "i32", "s_out": "i32", "softcap": "fp32",
    "temperature_ptr": "*fp32", "HAS_SOFTCAP": "constexpr", "ROWS": "constexpr", "BLOCK": "constexpr",
    "N_BLOCKS": "constexpr"}
source = ASTSource(fn=tk._vocab_sample_kernel, signature=signature,
                   constexprs={"HAS_SOFTCAP": True, "ROWS": rows, "BLOCK": block, "N_BLOCKS": -(-vocab // block)})
kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
assert ".target sm_90" in kernel.asm["ptx"] and kernel.asm["cubin"]
print("compiled")
"""


@pytest.mark.parametrize("vocab", [262_144, 512])
def test_vocab_sample_kernel_compiles_for_hopper(vocab):
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # the compiler's default; set to keep newer Triton versions quiet
    done = subprocess.run([sys.executable, "-c", COMPILE, str(vocab)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "compiled" in done.stdout, done.stderr[-3000:]
