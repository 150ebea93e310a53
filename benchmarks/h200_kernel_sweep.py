"""The measurements that decide the invariant kernels' settings on a GPU (chosen on an H200), in one call.

1. ``shapes``: every matmul invariant mode runs at the real shapes (recorded from one 6-layer generate at B=1).
2. ``sweep``: for each (K, N) and M = B x (rows at B=1), B = 1, 8, 32, 64: the production kernel against tile
   configurations (block sizes, warps, pipeline stages, grouped tile order, TMA descriptors). Each config's
   first 256 rows at B=8 are compared bit for bit with its B=1 result (the invariance a config must keep).
3. ``cublas``: cuBLAS with a 1 KiB workspace (vLLM's Hopper recipe: no split-K) in a fresh process: every row
   block of sizes 1..16,384 at row offsets 0 and 5 against the full product, bit for bit, and its speed
   (and the same check with the default workspace, as the control). ``cublas_canvas``: the default workspace
   on the layers' shapes at whole canvases only (256 x B rows, B = 1..128, at canvas offsets 0 and 256).
4. ``vocab``: the sampler's vocabulary pass, the previous kernel against the current one and a bf16
   read+write copy (the memory floor), at B x 256 rows of 262,144.
5. ``grouped``: the experts' grouped kernel under tile configurations (balanced and skewed routing).
6. ``canvas_cublas``: lm_head and the self-conditioning product one canvas per cuBLAS call (a fixed shape, the
   canvas alone in it) against the batched Triton matmul, with each canvas's bits against the call on it alone.

    python benchmarks/h200_kernel_sweep.py --out OUT_DIR [--budget SECONDS] [--stages sweep,vocab,...] [--tiny]

``--tiny`` runs every stage at toy sizes (a dry run on the CPU under TRITON_INTERPRET=1; the cuBLAS stages
need CUDA and say so). Writes OUT_DIR/sweep.json (after every stage) and prints a short table per stage.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

from canvaslab.environment import environment_fingerprint, record_result
from canvaslab.invariant.triton_kernels import tile_position

START = time.time()
STAGES = ("sweep", "cublas_1k", "cublas_default", "cublas_canvas", "vocab", "grouped", "canvas_cublas")
CUDA = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
DEVICE = "cuda" if CUDA else "cpu"


def timed_ms(fn, reps: int = 5, warm: int = 1) -> float:
    """Median milliseconds of ``fn`` over ``reps`` runs after ``warm`` runs (device events on CUDA)."""
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        if CUDA:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            fn()
            times.append(1000 * (time.perf_counter() - t))
    return statistics.median(times)


# --- 1. shapes -----------------------------------------------------------------------------------------


def record_shapes(layers: int, model: str) -> list[dict]:
    """(m at B=1, k, n, b layout, z) of every invariant matmul in one generate call at B=1."""
    from canvaslab.generation import generate
    from canvaslab.invariant import triton_kernels
    from canvaslab.models import load_model

    loaded = load_model(model, device=DEVICE, layers=layers)
    seen: dict[tuple, dict] = {}
    original = triton_kernels.matmul

    def recording(a, b, bias=None):
        k, n = b.shape[-2], b.shape[-1]
        layout = "kn" if b.stride(-1) == 1 else "nk"
        z = a.shape[0] if a.dim() == 3 else 1
        key = (a.shape[-2], k, n, layout, z, bias is not None)
        entry = seen.setdefault(key, {"m": a.shape[-2], "k": k, "n": n, "layout": layout, "z": z,
                                      "bias": bias is not None, "calls": 0})
        entry["calls"] += 1
        return original(a, b, bias)

    triton_kernels.matmul = recording
    try:
        prompt = loaded.tokenizer("the man said that the water in the river was cold")["input_ids"]
        generate(loaded, [prompt], generation={"max_denoising_steps": 2}, mode="invariant")
    finally:
        triton_kernels.matmul = original
    del loaded
    if CUDA:
        torch.cuda.empty_cache()
    return sorted(seen.values(), key=lambda e: -e["calls"] * e["m"] * e["k"] * e["n"] * e["z"])


# --- 2. tile sweep -------------------------------------------------------------------------------------


@triton.jit(do_not_specialize=["M"])
def _swept_kernel(a_ptr, b_ptr, out_ptr, M, N, K, k_per_split, s_am, s_ak, s_bk, s_bn, s_os, s_om, s_on,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    """The production kernel's arithmetic (whole K slice in BK steps, fp32 accumulator) with a grouped
    tile order (GROUP_M row tiles share the L2 while every column tile passes)."""
    split = tl.program_id(1)
    pid_m, pid_n = tile_position(M, N, BM, BN, GROUP_M)  # the production tile order
    rm = (pid_m * BM + tl.arange(0, BM)).to(tl.int64)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    k_start = split * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(k_start, k_end, BK):
        ks = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * s_am + ks[None, :] * s_ak, mask=(rm[:, None] < M) & (ks[None, :] < k_end),
                    other=0.0)
        b = tl.load(b_ptr + ks[:, None] * s_bk + rn[None, :] * s_bn, mask=(ks[:, None] < k_end) & (rn[None, :] < N),
                    other=0.0)
        acc += tl.dot(a, b)
    out = out_ptr + split * s_os + rm[:, None] * s_om + rn[None, :] * s_on
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit(do_not_specialize=["M"])
def _tma_kernel(a_ptr, b_ptr, out_ptr, M, N, K, B_KN: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                BK: tl.constexpr, GROUP_M: tl.constexpr):
    """The same product with tiles moved by the Hopper tensor-memory accelerator (tensor descriptors)."""
    pid_m, pid_n = tile_position(M, N, BM, BN, GROUP_M)
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    if B_KN:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    o_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = a_desc.load([pid_m * BM, k0])
        if B_KN:
            b = b_desc.load([k0, pid_n * BN])
        else:
            b = b_desc.load([pid_n * BN, k0]).T
        acc += tl.dot(a, b)
    o_desc.store([pid_m * BM, pid_n * BN], acc.to(out_ptr.dtype.element_ty))


# (name, BM, BN, BK, warps, stages, GROUP_M, tma); GROUP_M 1024 = the production order (row tiles fastest)
CONFIGS = [
    ("p128x128x64w4s3", 128, 128, 64, 4, 3, 1024, False),
    ("128x128x64w8s4g8", 128, 128, 64, 8, 4, 8, False),
    ("128x256x64w8s3g8", 128, 256, 64, 8, 3, 8, False),
    ("128x256x64w8s4g8", 128, 256, 64, 8, 4, 8, False),
    ("128x256x64w8s3", 128, 256, 64, 8, 3, 1024, False),
    ("64x256x64w4s4g8", 64, 256, 64, 4, 4, 8, False),
    ("128x128x128w8s3g8", 128, 128, 128, 8, 3, 8, False),
    ("256x128x64w8s3g8", 256, 128, 64, 8, 3, 8, False),
    ("tma128x256x64w8s3g8", 128, 256, 64, 8, 3, 8, True),
    ("tma128x128x64w4s4g8", 128, 128, 64, 4, 4, 8, True),
    ("tma128x256x64w8s4g8", 128, 256, 64, 8, 4, 8, True),
]


def swept_matmul(a, b, config, split: int):
    name, bm, bn, bk, warps, stages, group_m, tma = config
    m, k = a.shape
    n = b.shape[1]
    if tma:
        if split != 1:
            raise ValueError("tma: no split-K variant")
        out = torch.empty((m, n), device=a.device, dtype=a.dtype)
        b_kn = b.stride(1) == 1
        base = b if b_kn else b.t()
        grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
        _tma_kernel[grid](a, base, out, m, n, k, B_KN=b_kn, BM=bm, BN=bn, BK=bk, GROUP_M=group_m,
                          num_warps=warps, num_stages=stages)
        return out
    k_per_split = triton.cdiv(triton.cdiv(k, split), bk) * bk
    target = torch.empty((split, m, n), device=a.device, dtype=torch.float32 if split > 1 else a.dtype)
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn), split)
    _swept_kernel[grid](a, b, target, m, n, k, k_per_split, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        target.stride(0), target.stride(1), target.stride(2), BM=bm, BN=bn, BK=bk, GROUP_M=group_m,
                        num_warps=warps, num_stages=stages)
    return target[0] if split == 1 else target.sum(0).to(a.dtype)  # sum: timing only (order fixed: 0..split)


def weight_like(entry, gen):
    k, n = entry["k"], entry["n"]
    if entry["layout"] == "kn":
        return (torch.randn(k, n, device=DEVICE, generator=gen) * k ** -0.5).to(torch.bfloat16)
    return (torch.randn(n, k, device=DEVICE, generator=gen) * k ** -0.5).to(torch.bfloat16).t()


def sweep(shapes: list[dict], batches: list[int], deadline: float, tiny: bool) -> list[dict]:
    from canvaslab.invariant import triton_kernels

    if CUDA:
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    results = []
    for entry in shapes:
        if entry["z"] != 1 or entry["m"] < 8:
            continue  # batched (attention) and prompt-length products: production kernel only, in the profiles
        b = weight_like(entry, gen)
        plan = triton_kernels.split_k_plan(entry["k"], entry["n"])
        a_full = torch.randn(max(batches) * entry["m"], entry["k"], device=DEVICE, generator=gen).to(torch.bfloat16)
        one_row_results = {}
        for batch in batches:
            if time.time() > deadline:
                print("sweep: out of time", flush=True)
                return results
            a = a_full[: batch * entry["m"]]
            flop = 2 * a.shape[0] * entry["k"] * entry["n"]
            reference = torch.mm(a, b)
            row = {**entry, "batch": batch, "M": a.shape[0], "split_plan": plan}
            row["cublas_default_ms"] = timed_ms(lambda: torch.mm(a, b))
            row["production_ms"] = timed_ms(lambda: triton_kernels.matmul(a, b))
            for config in CONFIGS[: 3 if tiny else None]:
                for split in sorted({plan, 1} if plan > 1 else {1}):
                    label = f"{config[0]}/split{split}"
                    try:
                        out = swept_matmul(a, b, config, split)
                        if batch == batches[0]:
                            one_row_results[label] = out[: entry["m"]].clone()
                        error = ((out.float() - reference.float()).norm() / reference.float().norm()).item()
                        same_rows = (torch.equal(out[: entry["m"]], one_row_results[label])
                                     if label in one_row_results else None)
                        ms = timed_ms(lambda: swept_matmul(a, b, config, split))
                        row[label] = {"ms": ms, "tflops": flop / ms / 1e9, "rel_err_vs_cublas": error,
                                      "first_rows_equal_B1": same_rows}
                    except Exception as error:  # a config that does not compile or launch: recorded, next
                        row[label] = {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}
            results.append(row)
            best = min(((k, v["ms"]) for k, v in row.items() if isinstance(v, dict) and "ms" in v), key=lambda t: t[1])
            print(f"K={entry['k']:>6} N={entry['n']:>6} {entry['layout']} M={a.shape[0]:>6}: cublas "
                  f"{row['cublas_default_ms']:.3f} prod {row['production_ms']:.3f} best {best[0]} {best[1]:.3f} ms",
                  flush=True)
    return results


# --- 3. cuBLAS with a 1 KiB workspace (run in a fresh process: the workspace is read at handle creation) --


CUBLAS_CHILD = r"""
import json, sys, statistics, torch
shapes, batches, sizes, offsets, tiny = json.loads(sys.argv[1])
dev = "cuda"
gen = torch.Generator(device=dev).manual_seed(1)
out = []
def ms(fn, reps=5):
    fn(); ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
    return statistics.median(ts)
for entry in shapes:
    k, n = entry["k"], entry["n"]
    if entry["layout"] == "kn":
        b = (torch.randn(k, n, device=dev, generator=gen) * k ** -0.5).to(torch.bfloat16)
    else:
        b = (torch.randn(n, k, device=dev, generator=gen) * k ** -0.5).to(torch.bfloat16).t()
    top = max(sizes) + max(offsets)
    a = torch.randn(top, k, device=dev, generator=gen).to(torch.bfloat16)
    full = torch.mm(a, b)
    differing = []
    for m in sizes:
        for offset in offsets:
            if not torch.equal(torch.mm(a[offset:offset + m], b), full[offset:offset + m]):
                differing.append([m, offset])
    times = {str(bt): ms(lambda: torch.mm(a[: bt * entry["m"]], b)) for bt in batches if bt * entry["m"] <= top}
    out.append({"k": k, "n": n, "layout": entry["layout"], "blocks_differing": differing, "ms": times})
    print(k, n, entry["layout"], "differing:", differing[:6], "ms:", times, flush=True)
print("RESULT " + json.dumps(out))
"""


def cublas_check(shapes: list[dict], batches: list[int], tiny: bool, workspace_1k: bool, canvases: bool = False) -> dict:
    """Each row block's product alone against the same rows of one product over all blocks, bit for bit; with
    ``canvases``, blocks of whole canvases (256 x B rows, B = 1..128) at canvas-aligned offsets (0, 256)."""
    env = dict(os.environ)
    if workspace_1k:
        env["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"
        env["CUBLASLT_WORKSPACE_SIZE"] = "1"  # KiB: too small for split-K's partials
    else:
        env.pop("CUBLAS_WORKSPACE_CONFIG", None)
        env.pop("CUBLASLT_WORKSPACE_SIZE", None)
    picked = [e for e in shapes if e["z"] == 1 and e["m"] >= 8]
    sizes = [1, 2, 3, 8, 16, 64, 100, 256, 2048] if tiny else [1, 2, 3, 7, 16, 64, 100, 256, 1000, 2048, 8192, 16384]
    offsets = [0, 5]
    if canvases:
        sizes, offsets = [256 * b for b in (*range(1, 9), 16, 32, 48, 64, 96, 128)], [0, 256]
        picked = [e for e in picked if e["k"] < 100_000 and e["n"] < 100_000]  # the layers: lm_head is per canvas
    done = subprocess.run([sys.executable, "-c", CUBLAS_CHILD, json.dumps([picked, batches, sizes, offsets, tiny])], env=env,
                          capture_output=True, text=True, timeout=240)
    print(done.stdout[-3000:], done.stderr[-2000:], flush=True)
    result = next((json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("RESULT ")), None)
    return {"workspace": "1 KiB (CUBLASLT_WORKSPACE_SIZE=1, CUBLAS_WORKSPACE_CONFIG=:16:8)" if workspace_1k
            else "default", "sizes": sizes, "offsets": offsets, "shapes": result, "returncode": done.returncode}


# --- 4. the vocabulary pass: the previous kernel, the current one, a copy -------------------------------


@triton.jit
def _old_rescale(m_old, m_new, s, t):
    filled = s > 0
    gap = tl.where(filled, m_old, 0.0) - tl.where(filled, m_new, 0.0)
    scale = tl.exp(gap)
    return s * scale, (t + gap * s) * scale


OLD_KEY = tl.constexpr(0x5EED)


@triton.jit
def _old_uniform(seeds, counter):
    seeds = seeds.to(tl.uint64, bitcast=True)
    zeros = counter.to(tl.uint32) * 0
    seed_lo = (seeds & 0xFFFFFFFF).to(tl.uint32) + zeros
    seed_hi = (seeds >> 32).to(tl.uint32) + zeros
    bits, _, _, _ = tl.philox(OLD_KEY, counter.to(tl.uint32), seed_lo, seed_hi, zeros)
    return tl.uint_to_uniform_float(bits)


@triton.jit(do_not_specialize=["R"])
def _old_vocab_kernel(logits_ptr, out_ptr, seeds_ptr, entropy_ptr, argmax_ptr, sample_ptr, R, V, L, s_in, s_out,
                      softcap, temperature_ptr, HAS_SOFTCAP: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr,
                      N_BLOCKS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_mask = rows < R
    temperature = tl.load(temperature_ptr)
    seeds = tl.load(seeds_ptr + rows // L, mask=row_mask, other=0)[:, None]
    counter_base = ((rows % L) * V)[:, None]
    rows_in = logits_ptr + rows[:, None].to(tl.int64) * s_in
    rows_out = out_ptr + rows[:, None].to(tl.int64) * s_out
    offs = tl.arange(0, BLOCK)
    peak = tl.full((ROWS, BLOCK), float("-inf"), dtype=tl.float32)
    total = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
    moment = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
    best = tl.full((ROWS, BLOCK), float("-inf"), dtype=tl.float32)
    best_at = tl.zeros((ROWS, BLOCK), dtype=tl.int32)
    race = tl.full((ROWS, BLOCK), float("-inf"), dtype=tl.float32)
    race_at = tl.zeros((ROWS, BLOCK), dtype=tl.int32)
    for i in range(0, N_BLOCKS):
        cols = (i * BLOCK + offs)[None, :]
        mask = row_mask[:, None] & (cols < V)
        x = tl.load(rows_in + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_SOFTCAP:
            x = softcap * (1.0 - 2.0 / (tl.exp(2.0 * (x / softcap)) + 1.0))
        x = x / temperature
        tl.store(rows_out + cols, x.to(out_ptr.dtype.element_ty), mask=mask)
        x = tl.where(mask, x, float("-inf"))
        better = x > best
        best_at = tl.where(better, cols, best_at)
        best = tl.where(better, x, best)
        clock = -tl.log(tl.maximum(_old_uniform(seeds, counter_base + cols), 2.0 ** -33))
        key = x - tl.log(clock)
        better = key > race
        race_at = tl.where(better, cols, race_at)
        race = tl.where(better, key, race)
        new_peak = tl.maximum(peak, x)
        total, moment = _old_rescale(peak, new_peak, total, moment)
        shifted = tl.where(mask, x - tl.where(mask, new_peak, 0.0), 0.0)
        e = tl.where(mask, tl.exp(shifted), 0.0)
        total += e
        moment += e * shifted
        peak = new_peak
    top = tl.max(peak, axis=1)
    total, moment = _old_rescale(peak, top[:, None], total, moment)
    s = tl.where(row_mask, tl.sum(total, axis=1), 1.0)
    tl.store(entropy_ptr + rows, tl.log(s) - tl.sum(moment, axis=1) / s, mask=row_mask)
    top_value = tl.max(best, axis=1)
    first = tl.min(tl.where(best == top_value[:, None], best_at, V), axis=1)
    tl.store(argmax_ptr + rows, first.to(tl.int64), mask=row_mask)
    top_key = tl.max(race, axis=1)
    drawn = tl.min(tl.where(race == top_key[:, None], race_at, V), axis=1)
    tl.store(sample_ptr + rows, drawn.to(tl.int64), mask=row_mask)


def old_vocab_sample(logits, seeds, temperature, softcap):
    b, length, v = logits.shape
    out = torch.empty_like(logits)
    entropy = torch.empty((b, length), device=logits.device, dtype=torch.float32)
    argmax = torch.empty((b, length), device=logits.device, dtype=torch.int64)
    sample = torch.empty_like(argmax)
    block = min(2048, triton.next_power_of_2(v))
    per_program, warps = (1, 8) if v > 4096 else (max(1, 8192 // block), 4)
    _old_vocab_kernel[(triton.cdiv(b * length, per_program),)](
        logits, out, seeds, entropy, argmax, sample, b * length, v, length, v, v, float(softcap), temperature,
        HAS_SOFTCAP=True, ROWS=per_program, BLOCK=block, N_BLOCKS=triton.cdiv(v, block), num_warps=warps)
    return out, entropy, argmax, sample


def vocab(batches: list[int], vocab_size: int, length: int, deadline: float) -> list[dict]:
    from canvaslab.invariant import triton_kernels

    gen = torch.Generator(device=DEVICE).manual_seed(2)
    rows = []
    for batch in batches:
        if time.time() > deadline:
            break
        logits = (torch.randn(batch, length, vocab_size, device=DEVICE, generator=gen) * 8).to(torch.bfloat16)
        seeds = torch.arange(batch, device=DEVICE, dtype=torch.int64) * 7919 + 3
        temperature = torch.tensor([0.8], device=DEVICE)
        gigabytes = 2 * 2 * logits.numel() / 1e9
        old = old_vocab_sample(logits, seeds, temperature, 30.0)
        new = triton_kernels.vocab_sample(logits, seeds, temperature, 30.0)
        row = {"batch": batch, "rows": batch * length, "vocab": vocab_size,
               "old_ms": timed_ms(lambda: old_vocab_sample(logits, seeds, temperature, 30.0)),
               "new_ms": timed_ms(lambda: triton_kernels.vocab_sample(logits, seeds, temperature, 30.0)),
               "copy_ms": timed_ms(lambda: logits.clone()),
               "argmax_equal": torch.equal(old[2], new[2]),
               "entropy_max_abs_diff": (old[1] - new[1]).abs().max().item(),
               "scaled_max_abs_diff": (old[0].float() - new[0].float()).abs().max().item()}
        row["new_gbps"] = gigabytes / row["new_ms"] * 1e3
        row["copy_gbps"] = gigabytes / row["copy_ms"] * 1e3
        rows.append(row)
        print({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
        del logits, old, new
    return rows


# --- 5. the experts' grouped kernel: tile configurations, at B x 256 tokens routed to 8 of 128 experts ----

# (BM, BN, BK, warps, stages); the first is the earlier production setting, the sweep chose 128x256x64x8x3
GROUPED_CONFIGS = [(64, 128, 64, 4, 3), (64, 128, 64, 4, 4), (128, 128, 64, 4, 3), (128, 128, 64, 8, 3),
                   (128, 128, 64, 8, 4), (128, 256, 64, 8, 3), (64, 256, 64, 4, 3), (64, 256, 64, 8, 3),
                   (128, 64, 64, 4, 3), (64, 64, 64, 4, 4), (128, 128, 32, 4, 4), (64, 128, 128, 4, 3)]


def _grouped(x, weight, counts, rows, config):
    from canvaslab.invariant.triton_kernels import expert_schedule, grouped_linear

    bm, bn, bk, warps, stages = config
    plan = {"BM": bm, "BN": bn, "BK": bk, "num_warps": warps, "num_stages": stages}
    return grouped_linear(x, weight, expert_schedule(counts, bm), rows=rows, plan=plan)


def _routing(tokens: int, experts: int, top_k: int, skewed: bool, gen):
    """(order // top_k, counts): tokens' rows grouped by expert, as the invariant experts build them."""
    pool = min(16, experts // 2) if skewed else experts  # skewed: every token among 16 experts (random weights, a canvas of masks)
    scores = torch.rand(tokens, pool, device=DEVICE, generator=gen)
    chosen = scores.topk(top_k, dim=-1).indices.reshape(-1)
    order = torch.sort(chosen, stable=True).indices
    counts = torch.zeros(experts, dtype=torch.int64, device=DEVICE).index_add_(0, chosen, torch.ones_like(chosen))
    return order // top_k, counts


def grouped(batches: list[int], deadline: float, tiny: bool) -> list[dict]:
    experts, top_k, hidden, inner = (8, 2, 64, 32) if tiny else (128, 8, 2816, 704)
    gen = torch.Generator(device=DEVICE).manual_seed(3)
    gate_up = (torch.randn(experts, 2 * inner, hidden, device=DEVICE, generator=gen) * hidden ** -0.5).to(torch.bfloat16)
    down = (torch.randn(experts, hidden, inner, device=DEVICE, generator=gen) * inner ** -0.5).to(torch.bfloat16)
    rows_out = []
    for skewed in (False, True):
        for batch in batches:
            if time.time() > deadline:
                return rows_out
            tokens = batch * (8 if tiny else 256)
            x = torch.randn(tokens, hidden, device=DEVICE, generator=gen).to(torch.bfloat16)
            rows, counts = _routing(tokens, experts, top_k, skewed, gen)
            gated = torch.randn(rows.numel(), inner, device=DEVICE, generator=gen).to(torch.bfloat16)
            flop = 2 * rows.numel() * hidden * inner * 3
            row = {"batch": batch, "tokens": tokens, "skewed": skewed, "gflop": flop / 1e9}
            reference = None
            for config in GROUPED_CONFIGS[: 3 if tiny else None]:
                label = "x".join(map(str, config))
                try:
                    first = _grouped(x, gate_up, counts, rows, config)
                    second = _grouped(gated, down, counts, None, config)
                    if reference is None:
                        reference = (first.float(), second.float())
                    gate_ms = timed_ms(lambda: _grouped(x, gate_up, counts, rows, config))
                    down_ms = timed_ms(lambda: _grouped(gated, down, counts, None, config))
                    row[label] = {"gate_up_ms": gate_ms, "down_ms": down_ms,
                                  "tflops": flop / (gate_ms + down_ms) / 1e9,
                                  "max_diff_vs_first_config": max((first.float() - reference[0]).abs().max().item(),
                                                                (second.float() - reference[1]).abs().max().item())}
                except Exception as error:
                    row[label] = {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}
            rows_out.append(row)
            timed = {k: v["gate_up_ms"] + v["down_ms"] for k, v in row.items() if isinstance(v, dict) and "down_ms" in v}
            best = min(timed, key=timed.get)
            print(f"grouped B={batch} skewed={skewed}: 64x128x64x4x3 {timed.get('64x128x64x4x3', 0):.3f} ms, "
                  f"best {best} {timed[best]:.3f} ms", flush=True)
    return rows_out


# --- 6. the vocabulary-sized products one canvas at a time through cuBLAS, against the batched Triton kernel --


def canvas_cublas(batches: list[int], deadline: float, tiny: bool) -> list[dict]:
    """lm_head (K = hidden, N = vocabulary) and the self-conditioning product (K = vocabulary, N = hidden) computed
    per canvas (one fixed-shape cuBLAS call each, the canvas alone in it) against the batched Triton matmul; each
    canvas's result is also compared bit for bit with the same call on a copy of that canvas alone."""
    from canvaslab.invariant import triton_kernels

    length, hidden, vocab_size = (8, 64, 5000) if tiny else (256, 2816, 262_144)
    gen = torch.Generator(device=DEVICE).manual_seed(4)
    head = (torch.randn(vocab_size, hidden, device=DEVICE, generator=gen) * hidden ** -0.5).to(torch.bfloat16)
    results = []
    for batch in batches:
        if time.time() > deadline:
            break
        h = torch.randn(batch, length, hidden, device=DEVICE, generator=gen).to(torch.bfloat16)
        logits = torch.empty(batch, length, vocab_size, device=DEVICE, dtype=torch.bfloat16)

        def per_canvas_head():
            for b in range(batch):
                torch.mm(h[b], head.t(), out=logits[b])

        per_canvas_head()
        alone = torch.empty(length, vocab_size, device=DEVICE, dtype=torch.bfloat16)
        torch.mm(h[-1].clone(), head.t(), out=alone)
        row = {"batch": batch, "lm_head_triton_ms": timed_ms(lambda: triton_kernels.matmul(h.view(-1, hidden), head.t())),
               "lm_head_per_canvas_cublas_ms": timed_ms(per_canvas_head),
               "lm_head_batched_cublas_ms": timed_ms(lambda: torch.mm(h.view(-1, hidden), head.t())),
               "lm_head_last_canvas_equals_alone": torch.equal(logits[-1], alone),
               "lm_head_first_equals_last_on_same_input": None}
        same = h[0].clone()
        h[-1].copy_(same)
        per_canvas_head()
        row["lm_head_first_equals_last_on_same_input"] = torch.equal(logits[0], logits[-1])
        probs = torch.softmax(logits.float(), -1).to(torch.bfloat16) if tiny else logits  # values only matter for bits
        signal = torch.empty(batch, length, hidden, device=DEVICE, dtype=torch.bfloat16)

        def per_canvas_signal():
            for b in range(batch):
                torch.mm(probs[b], head, out=signal[b])

        per_canvas_signal()
        row.update({"signal_triton_ms": timed_ms(lambda: triton_kernels.matmul(probs.view(-1, vocab_size), head)),
                    "signal_per_canvas_cublas_ms": timed_ms(per_canvas_signal),
                    "signal_last_canvas_equals_alone": torch.equal(signal[-1], torch.mm(probs[-1].clone(), head))})
        results.append(row)
        print(row, flush=True)
        del h, logits, probs, signal
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for sweep.json")
    parser.add_argument("--budget", type=float, default=200, help="seconds for all stages")
    parser.add_argument("--tiny", action="store_true", help="toy sizes: a dry run on the CPU")
    parser.add_argument("--stages", default="sweep,cublas_1k,cublas_default,vocab",
                        help="comma-separated, of: " + ",".join(STAGES))
    parser.add_argument("--shapes", type=Path, help="a sweep.json whose recorded shapes to use (no recording run)")
    args = parser.parse_args()
    unknown = [name for name in args.stages.split(",") if name not in STAGES]
    if unknown:
        parser.error(f"--stages: unknown stage {unknown[0]!r} (stages: {', '.join(STAGES)})")
    args.out.mkdir(parents=True, exist_ok=True)
    deadline = START + args.budget
    environment = environment_fingerprint(device=torch.device(DEVICE), triton=triton.__version__,
                                          triton_interpret=os.environ.get("TRITON_INTERPRET") == "1")
    result: dict = {"device": torch.cuda.get_device_name() if CUDA else "cpu", "torch": torch.__version__,
                    "triton": triton.__version__, "environment": environment}

    def save():
        (args.out / "sweep.json").write_text(json.dumps(result, indent=1))

    model, layers = ("tiny", 2) if args.tiny else ("real-shapes", 6)
    batches = [1, 2] if args.tiny else [1, 8, 32, 64]
    result["shapes"] = (json.loads(args.shapes.read_text())["shapes"] if args.shapes
                        else record_shapes(layers, model))
    print("shapes:", json.dumps(result["shapes"]), flush=True)
    save()
    if args.tiny:  # tiny's products are too small to tile: give the sweep a few toy shapes of both layouts
        result["shapes"] = [{"m": 32, "k": 128, "n": 256, "layout": "nk", "z": 1, "bias": False, "calls": 1},
                            {"m": 32, "k": 256, "n": 128, "layout": "kn", "z": 1, "bias": False, "calls": 1}]
    stages = [
        ("sweep", lambda: sweep(result["shapes"], batches, START + 0.5 * args.budget, args.tiny)),
        ("cublas_1k", lambda: cublas_check(result["shapes"], batches, args.tiny, True) if CUDA else "no CUDA"),
        ("cublas_default", lambda: cublas_check(result["shapes"], batches, args.tiny, False) if CUDA else "no CUDA"),
        ("cublas_canvas", lambda: cublas_check(result["shapes"], batches, args.tiny, False, True) if CUDA else "no CUDA"),
        ("vocab", lambda: vocab(batches, 5000 if args.tiny else 262_144, 8 if args.tiny else 256, deadline)),
        ("grouped", lambda: grouped(batches, deadline, args.tiny)),
        ("canvas_cublas", lambda: canvas_cublas(batches, deadline, args.tiny)),
    ]
    for name, run in [(name, run) for name, run in stages if name in args.stages.split(",")]:
        if time.time() > deadline:
            result[name] = "skipped: out of time"
            continue
        started = time.time()
        try:
            result[name] = run()
        except Exception as error:  # one stage's failure must not cost the others
            result[name] = f"failed: {type(error).__name__}: {error}"
            print(name, "failed:", error, flush=True)
        print(f"== {name} done in {time.time() - started:.0f} s", flush=True)
        save()
    record_result(args.out / "sweep.json", shows="the invariant matmul's tile configurations, cuBLAS's row "
                  "invariance, the vocabulary pass and the grouped experts kernel timed and checked bit for bit at the "
                  f"recorded shapes (stages: {args.stages})", environment=environment)


if __name__ == "__main__":
    main()
