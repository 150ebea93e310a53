"""Triton kernels whose reduction order depends only on the reduced size, never on the number of rows.

- ``matmul``: fixed tiles (BLOCK_M x BLOCK_N x BLOCK_K), each tile reduces the whole K range in order;
  when K is very large a split-K plan chosen from (K, N) alone cuts K into a fixed number of slices
  whose fp32 partials are summed in slice order by a second kernel. A row's result is therefore the
  same whether M is 1 or 16,384 (vLLM and batch_invariant_ops use the same idea).
- ``grouped_linear``: the mixture-of-experts projections in one launch. Rows arrive grouped by expert;
  each program finds its (expert, row tile) from per-expert tile counts kept on the device (no host
  sync), and reduces the whole K range in order with the same fixed tiles, so a routed row's result
  does not depend on how many other rows the batch sends to its expert, nor where in a tile it lands.
- ``row_reduce``: a fixed number of rows per program over the last dimension, fixed block width, both
  chosen from the row length alone, fp32 accumulation: logsumexp, softmax, log_softmax, sum and mean
  (the softmax family finds a row's max and sum of exponentials in one online pass).
- ``rms_norm``: the model's RMSNorm in one launch with the same row plan (stock is ~8 launches, one of
  them the mean; at B=1 the host's launch cost, not the GPU, sets the pace).
- ``expert_grouping``: the routed entries in a stable sort's order, its inverse and the grouped schedule, in two
  integer launches (per-block counts; then a scan over the blocks and each block's ranks).
- ``route``: a router after its projection (softmax, top-k, renormalisation, scales) in one launch, with the
  operations and tile plan of ``row_reduce`` and ``topk_rows``.

Row counts are marked ``do_not_specialize``: Triton would otherwise compile a separate kernel for
M == 1 or M divisible by 16, and a row's arithmetic must come from one compiled kernel at every batch.

All run under ``TRITON_INTERPRET=1`` on the CPU, which is how the tests check their logic without a GPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 64
SPLIT_K_MIN_K = 16_384  # above this K a fixed split-K plan keeps the GPU busy at small M


def split_k_plan(k: int, n: int) -> int:
    """Number of K slices: a function of (K, N) only, so it cannot change with the batch."""
    if k < SPLIT_K_MIN_K:
        return 1
    tiles_n = triton.cdiv(n, BLOCK_N)
    return max(1, min(k // 8192, triton.cdiv(256, tiles_n)))


def matmul_plan(k: int, n: int, fp32: bool = False) -> dict:
    """Tiles, warps, pipeline depth and tile order for a (K, N) product: a function of (K, N) and the dtype
    alone.

    Chosen on an H200 (``benchmarks/h200_kernel_sweep.py``; ``benchmarks/results/h200_kernels_s6/`` at commit
    cfcbda3): the default
    128x128x64 tiles with 4 warps were the fastest or within noise for every dense layer and the lm_head
    at M = 256..16,384; for the long-K self-conditioning product (K = 262,144, N = 2,816, split-K), tiles
    128 wide in M and 256 in N with 8 warps, visited in groups of 8 row tiles (the row tiles' slices of the
    input stay in L2 while the column tiles pass), took 19.7 ms instead of 25.4 at M = 8,192 and 0.59 ms
    instead of 0.69 at M = 256. Any plan keeps a row's arithmetic independent of M: the K range is reduced
    in BLOCK_K steps in order whatever the tile's position. float32 inputs keep the default tiles (the wide
    ones would not fit three pipeline stages in shared memory).
    """
    if k >= SPLIT_K_MIN_K and not fp32:
        return {"split": split_k_plan(k, n), "BM": 128, "BN": 256, "BK": BLOCK_K, "GROUP_M": 8, "num_warps": 8,
                "num_stages": 3}
    return {"split": 1, "BM": BLOCK_M, "BN": BLOCK_N, "BK": BLOCK_K, "GROUP_M": 0, "num_warps": 4, "num_stages": 3}


@triton.jit
def tile_position(M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """(row tile, column tile) of this program. GROUP_M == 0: the grid's axes 0 and 1; otherwise axis 0
    counts tiles in groups of GROUP_M row tiles, column tiles within a group (L2 reuse of the rows)."""
    if GROUP_M == 0:
        return tl.program_id(0), tl.program_id(1)
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    width = GROUP_M * tl.cdiv(N, BN)
    first_m = (pid // width) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    return first_m + (pid % width) % size_m, (pid % width) // size_m


@triton.jit(do_not_specialize=["M"])
def _matmul_kernel(a_ptr, b_ptr, out_ptr, bias_ptr, M, N, K, k_per_split,
                   s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_ob, s_os, s_om, s_on,
                   SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr, FP32_INPUTS: tl.constexpr, K_STEPS: tl.constexpr,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    pid_m, pid_n = tile_position(M, N, BM, BN, GROUP_M)
    pid_z = tl.program_id(2)
    batch = (pid_z // SPLIT).to(tl.int64)
    split = pid_z % SPLIT
    rm = (pid_m * BM + tl.arange(0, BM)).to(tl.int64)  # int64: M x N passes 2**31 for lm_head at B=64
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    k_start = split * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    a_base = a_ptr + batch * s_ab
    b_base = b_ptr + batch * s_bb
    for step in range(0, K_STEPS):  # K blocks in order
        ks = k_start + step * BK + rk
        a = tl.load(a_base + rm[:, None] * s_am + ks[None, :] * s_ak,
                    mask=(rm[:, None] < M) & (ks[None, :] < k_end), other=0.0)
        b = tl.load(b_base + ks[:, None] * s_bk + rn[None, :] * s_bn,
                    mask=(ks[:, None] < k_end) & (rn[None, :] < N), other=0.0)
        if FP32_INPUTS:
            acc += tl.dot(a, b, input_precision="ieee")
        else:
            acc += tl.dot(a, b)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    out = out_ptr + batch * s_ob + split * s_os + rm[:, None] * s_om + rn[None, :] * s_on
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _sum_splits_kernel(part_ptr, bias_ptr, out_ptr, MN, N, s_pb, s_ps, s_ob,
                       SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    batch = tl.program_id(1).to(tl.int64)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT):  # fixed slice order
        acc += tl.load(part_ptr + batch * s_pb + s * s_ps + offs, mask=mask, other=0.0)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs % N, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + batch * s_ob + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``a @ b (+ bias)`` for 2-D ``(M, K) @ (K, N)`` or batched 3-D ``(Z, M, K) @ (Z, K, N)``."""
    if a.dim() == 3:
        z, m, k = a.shape
        n = b.shape[2]
        out = torch.empty((z, m, n), device=a.device, dtype=a.dtype)
        a_strides, b_strides, o_batch = a.stride(), b.stride(), out.stride(0)
    else:  # batch stride 0: no views to make, which matters at B=1, where launches set the pace
        (m, k), n, z = a.shape, b.shape[1], 1
        out = torch.empty((m, n), device=a.device, dtype=a.dtype)
        a_strides, b_strides, o_batch = (0, *a.stride()), (0, *b.stride()), 0
    fp32 = a.dtype == torch.float32
    plan = matmul_plan(k, n, fp32)
    split, bm, bn, bk, group_m = plan["split"], plan["BM"], plan["BN"], plan["BK"], plan["GROUP_M"]
    k_per_split = triton.cdiv(triton.cdiv(k, split), bk) * bk
    k_steps = k_per_split // bk  # a compile-time loop count: one specialisation per (K, N) plan
    tiles = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    grid = (tiles[0], tiles[1], z * split) if group_m == 0 else (tiles[0] * tiles[1], 1, z * split)
    o_m, o_n = out.stride(-2), out.stride(-1)
    launch = {"FP32_INPUTS": fp32, "K_STEPS": k_steps, "BM": bm, "BN": bn, "BK": bk, "GROUP_M": group_m,
              "num_warps": plan["num_warps"], "num_stages": plan["num_stages"]}
    if split == 1:
        _matmul_kernel[grid](a, b, out, bias if bias is not None else out, m, n, k, k_per_split,
                             *a_strides, *b_strides, o_batch, 0, o_m, o_n,
                             SPLIT=1, HAS_BIAS=bias is not None, **launch)
        return out
    partial = torch.empty((z, split, m, n), device=a.device, dtype=torch.float32)
    _matmul_kernel[grid](a, b, partial, out, m, n, k, k_per_split,
                         *a_strides, *b_strides, *partial.stride(), SPLIT=split, HAS_BIAS=False, **launch)
    block = 1024
    _sum_splits_kernel[(triton.cdiv(m * n, block), z)](
        partial, bias if bias is not None else out, out, m * n, n, partial.stride(0), partial.stride(1),
        o_batch, SPLIT=split, HAS_BIAS=bias is not None, BLOCK=block)
    return out


GROUPED_BLOCK_M = 128  # rows per tile: the expert schedule (shared by both projections) counts tiles of this


def grouped_plan(dtype: torch.dtype) -> dict:
    """Column tile, K step, warps and pipeline depth of the grouped kernel: a function of the dtype alone.

    Chosen on an H200 (``benchmarks/h200_kernel_sweep.py --stages grouped``; ``benchmarks/results/h200_s11/`` at
    commit cfcbda3): 128 x 256 x 64 tiles,
    8 warps, 3 stages took 1.82 ms for both projections at B=32 (65,536 routed rows) against 2.46 with the
    earlier 64 x 128 x 64, 4 warps (3.50 against 3.91 at B=64; 0.67 against 0.61 at B=1). Every configuration
    swept gave the same bits (the K range is reduced in order whatever the tile). float32 inputs take narrower
    tiles and a shallower pipeline, so both operands' stages fit in shared memory."""
    if dtype == torch.float32:
        return {"BM": GROUPED_BLOCK_M, "BN": 128, "BK": 32, "num_warps": 8, "num_stages": 2}
    return {"BM": GROUPED_BLOCK_M, "BN": 256, "BK": 64, "num_warps": 8, "num_stages": 3}


@triton.jit(do_not_specialize=["S"])
def _grouped_kernel(x_ptr, w_ptr, out_ptr, group_ends_ptr, tile_ends_ptr, rows_ptr, S, N, K, E,
                    s_xm, s_xk, s_we, s_wk, s_wn, s_om, s_on,
                    E_BLOCK: tl.constexpr, K_STEPS: tl.constexpr, FP32_INPUTS: tl.constexpr, GATHER: tl.constexpr,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    tile = tl.program_id(0)
    pid_n = tl.program_id(1)
    experts = tl.arange(0, E_BLOCK)
    tile_ends = tl.load(tile_ends_ptr + experts, mask=experts < E, other=2147483647)
    expert = tl.sum((tile_ends <= tile).to(tl.int32), axis=0)  # the expert whose tiles contain this one
    if expert < E:
        first_tile = tl.load(tile_ends_ptr + expert - 1, mask=expert > 0, other=0)
        group_start = tl.load(group_ends_ptr + expert - 1, mask=expert > 0, other=0)
        group_end = tl.load(group_ends_ptr + expert)
        rm = (group_start + (tile - first_tile) * BM + tl.arange(0, BM)).to(tl.int64)
        if GATHER:  # routed row r reads x's row rows[r]: the routed copy of x is never written
            xm = tl.load(rows_ptr + rm, mask=rm < group_end, other=0).to(tl.int64)
        else:
            xm = rm
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        w_base = w_ptr + expert.to(tl.int64) * s_we
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for step in range(0, K_STEPS):  # K blocks in order
            ks = step * BK + rk
            a = tl.load(x_ptr + xm[:, None] * s_xm + ks[None, :] * s_xk,
                        mask=(rm[:, None] < group_end) & (ks[None, :] < K), other=0.0)
            b = tl.load(w_base + ks[:, None] * s_wk + rn[None, :] * s_wn,
                        mask=(ks[:, None] < K) & (rn[None, :] < N), other=0.0)
            if FP32_INPUTS:
                acc += tl.dot(a, b, input_precision="ieee")
            else:
                acc += tl.dot(a, b)
        tl.store(out_ptr + rm[:, None] * s_om + rn[None, :] * s_on, acc.to(out_ptr.dtype.element_ty),
                 mask=(rm[:, None] < group_end) & (rn[None, :] < N))


def expert_schedule(counts: torch.Tensor, block_m: int = GROUPED_BLOCK_M) -> tuple[torch.Tensor, torch.Tensor]:
    """(row-group ends, row-tile ends) per expert, on the device: what ``grouped_linear`` needs to find
    each program's expert and rows. Computed once per layer for both projections."""
    tiles = torch.div(counts + block_m - 1, block_m, rounding_mode="floor")
    return torch.cumsum(counts, 0, dtype=torch.int32), torch.cumsum(tiles, 0, dtype=torch.int32)


ROUTING_CHUNK = 64  # entries per one-hot step of a grouping program


def grouping_block(entries: int) -> int:
    """Entries per grouping program: about 128 programs at the largest sizes (each re-reads the (programs, experts)
    count table), at least 256 entries each. The grouping is exact integer work, so any plan gives the same
    answer; this one only trades parallelism against the table's re-reads."""
    return min(2048, max(256, triton.next_power_of_2(triton.cdiv(entries, 128))))


@triton.jit
def _one_hot(ids_ptr, entries, N, E, E_BLOCK: tl.constexpr):
    """(CHUNK, E_BLOCK) int32: entry i's row is 1 at its expert; entries past N are all zeros."""
    ids = tl.load(ids_ptr + entries, mask=entries < N, other=-1).to(tl.int32)
    return (ids[:, None] == tl.arange(0, E_BLOCK)[None, :]).to(tl.int32)


@triton.jit(do_not_specialize=["N"])
def _expert_histogram_kernel(ids_ptr, hist_ptr, N, E, BLOCK: tl.constexpr, CHUNK: tl.constexpr,
                             E_BLOCK: tl.constexpr):
    block = tl.program_id(0)
    counts = tl.zeros((E_BLOCK,), dtype=tl.int32)
    for i in range(0, BLOCK // CHUNK):
        entries = block * BLOCK + i * CHUNK + tl.arange(0, CHUNK)
        counts += tl.sum(_one_hot(ids_ptr, entries, N, E, E_BLOCK), axis=0)
    experts = tl.arange(0, E_BLOCK)
    tl.store(hist_ptr + block * E + experts, counts, mask=experts < E)


@triton.jit(do_not_specialize=["N", "NB"])
def _expert_slots_kernel(ids_ptr, hist_ptr, order_ptr, rows_ptr, slots_ptr, counts_ptr, group_ends_ptr,
                         tile_ends_ptr, N, E, NB, TOP_K, TILE_M: tl.constexpr, BLOCK: tl.constexpr,
                         CHUNK: tl.constexpr, E_BLOCK: tl.constexpr, NB_CHUNK: tl.constexpr):
    block = tl.program_id(0)
    experts = tl.arange(0, E_BLOCK)
    totals = tl.zeros((E_BLOCK,), dtype=tl.int32)  # each expert's entries in the whole input
    before = tl.zeros((E_BLOCK,), dtype=tl.int32)  # ... in the blocks before this one
    for first in range(0, NB, NB_CHUNK):  # every program re-reads the small (blocks, experts) table
        blocks = first + tl.arange(0, NB_CHUNK)
        hist = tl.load(hist_ptr + blocks[:, None] * E + experts[None, :],
                       mask=(blocks[:, None] < NB) & (experts[None, :] < E), other=0)
        totals += tl.sum(hist, axis=0)
        before += tl.sum(tl.where(blocks[:, None] < block, hist, 0), axis=0)
    group_ends = tl.cumsum(totals, axis=0)
    if block == 0:
        tl.store(counts_ptr + experts, totals.to(tl.int64), mask=experts < E)
        tl.store(group_ends_ptr + experts, group_ends, mask=experts < E)
        tl.store(tile_ends_ptr + experts, tl.cumsum((totals + TILE_M - 1) // TILE_M, axis=0), mask=experts < E)
    next_slot = group_ends - totals + before  # per expert: where this block's first entry of it goes
    for i in range(0, BLOCK // CHUNK):  # entries in order: a stable sort's ranks
        entries = block * BLOCK + i * CHUNK + tl.arange(0, CHUNK)
        hot = _one_hot(ids_ptr, entries, N, E, E_BLOCK)
        slot = tl.sum(hot * (next_slot[None, :] + tl.cumsum(hot, axis=0) - 1), axis=1)
        next_slot += tl.sum(hot, axis=0)
        valid = entries < N
        tl.store(slots_ptr + entries, slot.to(tl.int64), mask=valid)
        tl.store(order_ptr + slot, entries.to(tl.int64), mask=valid)
        tl.store(rows_ptr + slot, (entries // TOP_K).to(tl.int64), mask=valid)


def expert_grouping(flat_experts: torch.Tensor, num_experts: int, top_k: int = 1,
                    block_m: int = GROUPED_BLOCK_M) -> dict[str, torch.Tensor]:
    """The routed entries grouped by expert, in two integer launches and no host sync.

    ``flat_experts`` ``(S,)``: entry i's expert, in ``[0, num_experts)``. Returns ``order`` (int64: the entries
    grouped by expert, ties by position, exactly ``torch.sort(flat_experts, stable=True).indices``), ``slots``
    (int64: entry i's place in ``order``, its inverse), ``rows`` (``order // top_k``, the token of each routed
    row), ``counts`` (int64, per expert) and ``schedule`` (``expert_schedule(counts, block_m)``). A first launch
    counts each block's entries per expert; a second finds, per block, how many entries of each expert come
    before it (a scan over the blocks' counts) and ranks its own entries in order. Integer arithmetic: one answer
    whatever the sizes, block or tile plan."""
    s, e = flat_experts.numel(), num_experts
    device = flat_experts.device
    fill = torch.zeros if s == 0 else torch.empty  # no entries: no launch writes the counts
    order, rows, slots = (torch.empty(s, dtype=torch.int64, device=device) for _ in range(3))
    counts = fill(e, dtype=torch.int64, device=device)
    group_ends, tile_ends = (fill(e, dtype=torch.int32, device=device) for _ in range(2))
    result = {"order": order, "slots": slots, "rows": rows, "counts": counts, "schedule": (group_ends, tile_ends)}
    if s == 0:
        return result
    ids = flat_experts.reshape(-1).contiguous()
    block, e_block = grouping_block(s), triton.next_power_of_2(e)
    blocks = triton.cdiv(s, block)
    hist = torch.empty((blocks, e), dtype=torch.int32, device=device)
    _expert_histogram_kernel[(blocks,)](ids, hist, s, e, BLOCK=block, CHUNK=ROUTING_CHUNK, E_BLOCK=e_block,
                                        num_warps=8)
    _expert_slots_kernel[(blocks,)](ids, hist, order, rows, slots, counts, group_ends, tile_ends, s, e, blocks, top_k,
                                    TILE_M=block_m, BLOCK=block, CHUNK=ROUTING_CHUNK, E_BLOCK=e_block,
                                    NB_CHUNK=max(1, 4096 // e_block), num_warps=8)
    return result


def grouped_linear(x: torch.Tensor, weight: torch.Tensor, schedule: tuple[torch.Tensor, torch.Tensor],
                   transposed: bool = False, rows: torch.Tensor | None = None, plan: dict | None = None) -> torch.Tensor:
    """Each row of ``x`` times its expert's matrix, for rows grouped by expert (``expert_schedule``).

    ``weight`` is ``(E, N, K)`` as ``F.linear`` takes it, or ``(E, K, N)`` when ``transposed``. With ``rows``
    (int64), routed row r is ``x[rows[r]]`` (the gather done by the kernel's loads, the same values as
    ``x[rows]``). The schedule stays on the device, so nothing waits for the GPU. ``plan`` (the tile sweep's)
    replaces ``grouped_plan(x.dtype)``; the schedule must count tiles of its ``BM`` rows.
    """
    k = x.shape[1]
    s = rows.numel() if rows is not None else x.shape[0]
    e = weight.shape[0]
    n = weight.shape[2] if transposed else weight.shape[1]
    s_wk, s_wn = (weight.stride(1), weight.stride(2)) if transposed else (weight.stride(2), weight.stride(1))
    group_ends, tile_ends = schedule
    out = torch.empty((s, n), device=x.device, dtype=x.dtype)
    plan = plan or grouped_plan(x.dtype)
    grid = (triton.cdiv(s, plan["BM"]) + e, triton.cdiv(n, plan["BN"]))  # an upper bound on the tiles
    _grouped_kernel[grid](x, weight, out, group_ends, tile_ends, rows if rows is not None else group_ends, s, n, k, e,
                          x.stride(0), x.stride(1), weight.stride(0), s_wk, s_wn, out.stride(0), out.stride(1),
                          E_BLOCK=triton.next_power_of_2(e), K_STEPS=triton.cdiv(k, plan["BK"]),
                          FP32_INPUTS=x.dtype == torch.float32, GATHER=rows is not None,
                          BM=plan["BM"], BN=plan["BN"], BK=plan["BK"], num_warps=plan["num_warps"],
                          num_stages=plan["num_stages"])
    return out


@triton.jit(do_not_specialize=["T"])
def _combine_kernel(routed_ptr, slots_ptr, weights_ptr, out_ptr, T, H, s_r, s_o, TOP_K: tl.constexpr,
                    ROWS: tl.constexpr, BLOCK: tl.constexpr):
    tokens = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    token_mask = tokens < T
    mask = token_mask[:, None] & (cols[None, :] < H)
    dtype = out_ptr.dtype.element_ty
    acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
    for k in tl.static_range(TOP_K):  # the token's experts in their top-k order, as the stock sum
        slot = tl.load(slots_ptr + tokens * TOP_K + k, mask=token_mask, other=0).to(tl.int64)
        weight = tl.load(weights_ptr + tokens * TOP_K + k, mask=token_mask, other=0.0).to(dtype).to(tl.float32)
        value = tl.load(routed_ptr + slot[:, None] * s_r + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        weighted = (value * weight[:, None]).to(dtype).to(tl.float32)  # the product rounded as torch's mul
        if k == 0:
            acc = weighted  # not 0 + weighted: a -0.0 product stays -0.0, as in the stock sum
        else:
            acc += weighted
    tl.store(out_ptr + tokens[:, None].to(tl.int64) * s_o + cols[None, :], acc.to(dtype), mask=mask)


def combine_experts(routed: torch.Tensor, slots: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Each token's top-k expert outputs, weighted and summed, in one pass.

    ``routed`` ``(T * top_k, H)``: the experts' outputs in routed (expert-sorted) order; ``slots`` ``(T, top_k)``:
    where token t's k-th output sits in ``routed``; ``weights`` ``(T, top_k)``. Computes, bit for bit,
    ``sum_k (routed[slots[t, k]] * weights[t, k].to(dtype))`` with each product rounded to ``routed``'s dtype
    and the sum in float32 in k order, i.e. what the un-permute (an index_put), the weighting (a mul) and
    top_k - 1 float32 adds computed in as many passes over memory. A token reads only its own rows.
    """
    tokens, top_k = slots.shape
    h = routed.shape[1]
    out = torch.empty((tokens, h), device=routed.device, dtype=routed.dtype)
    if tokens == 0:
        return out
    rows, block = 4, min(1024, triton.next_power_of_2(h))
    _combine_kernel[(triton.cdiv(tokens, rows), triton.cdiv(h, block))](
        routed, slots.contiguous(), weights.contiguous(), out, tokens, h, routed.stride(0), out.stride(0),
        TOP_K=top_k, ROWS=rows, BLOCK=block, num_warps=4)
    return out


REDUCTIONS = {"logsumexp": 0, "softmax": 1, "log_softmax": 2, "sum": 3, "mean": 4}


@triton.jit(do_not_specialize=["R"])
def _row_kernel(x_ptr, out_ptr, R, D, s_x, s_o, KIND: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr,
                N_BLOCKS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_mask = rows < R
    x_rows = x_ptr + rows[:, None].to(tl.int64) * s_x
    offs = tl.arange(0, BLOCK)
    if KIND >= 3:  # sum, mean
        acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
        for i in range(0, N_BLOCKS):
            cols = i * BLOCK + offs
            acc += tl.load(x_rows + cols[None, :], mask=row_mask[:, None] & (cols[None, :] < D), other=0.0).to(tl.float32)
        total = tl.sum(acc, axis=1)
        if KIND == 4:
            total = total / D
        tl.store(out_ptr + rows, total.to(out_ptr.dtype.element_ty), mask=row_mask)
    else:  # one online pass for the row's max and sum of exponentials, lane by lane, then across lanes
        peak = tl.full((ROWS, BLOCK), float("-inf"), dtype=tl.float32)
        acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
        for i in range(0, N_BLOCKS):
            cols = i * BLOCK + offs
            x = tl.load(x_rows + cols[None, :], mask=row_mask[:, None] & (cols[None, :] < D),
                        other=float("-inf")).to(tl.float32)
            new_peak = tl.maximum(peak, x)
            shift = tl.where(new_peak == float("-inf"), 0.0, new_peak)  # a lane with nothing finite yet
            acc = acc * tl.exp(peak - shift) + tl.exp(x - shift)
            peak = new_peak
        top = tl.max(peak, axis=1)
        top_shift = tl.where(top == float("-inf"), 0.0, top)
        acc = acc * tl.exp(peak - top_shift[:, None])
        total = tl.sum(acc, axis=1)
        if KIND == 0:
            tl.store(out_ptr + rows, (top + tl.log(total)).to(out_ptr.dtype.element_ty), mask=row_mask)
        else:
            log_total = tl.log(total)
            out_rows = out_ptr + rows[:, None].to(tl.int64) * s_o
            for i in range(0, N_BLOCKS):
                cols = i * BLOCK + offs
                mask = row_mask[:, None] & (cols[None, :] < D)
                x = tl.load(x_rows + cols[None, :], mask=mask, other=0.0).to(tl.float32)
                if KIND == 1:
                    y = tl.exp(x - top[:, None]) / total[:, None]
                else:
                    y = x - top[:, None] - log_total[:, None]
                tl.store(out_rows + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


LONG_ROW = 8192


def row_shape(d: int) -> tuple[int, int, int]:
    """(rows per program, block width, warps) for rows of length ``d``: a function of ``d`` alone.

    Short rows (hidden states, heads, experts) share a program; a long row (the vocabulary: 262,144 at
    real shapes) gets a program of its own with more warps, so one canvas (256 rows) still fills the GPU.
    """
    if d > LONG_ROW:
        return 1, LONG_ROW, 16
    block = min(4096, triton.next_power_of_2(d))
    return max(1, min(64, 8192 // block)), block, 4


def row_reduce(x: torch.Tensor, kind: str, out_dtype: torch.dtype, keepdim: bool = False) -> torch.Tensor:
    """Reduce (or normalise) the last dimension of ``x`` row by row; returns ``x.shape[:-1]`` (with a
    trailing 1 when ``keepdim``) or, for softmax and log_softmax, ``x``'s shape."""
    d = x.shape[-1]
    if not x.is_contiguous():
        x = x.contiguous()
    rows = x.numel() // d
    elementwise = kind in ("softmax", "log_softmax")
    shape = x.shape if elementwise else (*x.shape[:-1], 1) if keepdim else x.shape[:-1]
    out = torch.empty(shape, device=x.device, dtype=out_dtype)
    per_program, block, warps = row_shape(d)
    _row_kernel[(triton.cdiv(rows, per_program),)](
        x, out, rows, d, d, d if elementwise else 1,
        KIND=REDUCTIONS[kind], ROWS=per_program, BLOCK=block, N_BLOCKS=triton.cdiv(d, block), num_warps=warps)
    return out


@triton.jit(do_not_specialize=["R"])
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, cos_ptr, sin_ptr, R, D, s_x, s_o, eps, HEADS,
                     HAS_WEIGHT: tl.constexpr, ROPE: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr,
                     N_BLOCKS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_mask = rows < R
    x_rows = x_ptr + rows[:, None].to(tl.int64) * s_x
    out_rows = out_ptr + rows[:, None].to(tl.int64) * s_o
    offs = tl.arange(0, BLOCK)
    squares = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
    for i in range(0, N_BLOCKS):
        cols = i * BLOCK + offs
        x = tl.load(x_rows + cols[None, :], mask=row_mask[:, None] & (cols[None, :] < D), other=0.0).to(tl.float32)
        squares += x * x
    scale = 1.0 / tl.sqrt_rn(tl.sum(squares, axis=1) / D + eps)  # torch.pow(mean + eps, -0.5), as stock
    for i in range(0, N_BLOCKS):
        cols = i * BLOCK + offs
        mask = row_mask[:, None] & (cols[None, :] < D)
        y = tl.load(x_rows + cols[None, :], mask=mask, other=0.0).to(tl.float32) * scale[:, None]
        if HAS_WEIGHT:
            y = y * tl.load(w_ptr + cols, mask=cols < D, other=0.0).to(tl.float32)[None, :]
        y = y.to(out_ptr.dtype.element_ty)
        if ROPE:  # (y * cos) + (rotate_half(y) * sin), rounded as the eager ops round (compiled: see rms_norm)
            half = D // 2
            partners = tl.where(cols < half, cols + half, cols - half)
            p = tl.load(x_rows + partners[None, :], mask=mask, other=0.0).to(tl.float32) * scale[:, None]
            if HAS_WEIGHT:
                p = p * tl.load(w_ptr + partners, mask=cols < D, other=0.0).to(tl.float32)[None, :]
            p = p.to(out_ptr.dtype.element_ty).to(tl.float32)
            rotated = tl.where(cols[None, :] < half, -p, p)
            angles = (rows // HEADS)[:, None].to(tl.int64) * D + cols[None, :]
            cos = tl.load(cos_ptr + angles, mask=mask, other=0.0).to(tl.float32)
            sin = tl.load(sin_ptr + angles, mask=mask, other=0.0).to(tl.float32)
            first = (y.to(tl.float32) * cos).to(out_ptr.dtype.element_ty).to(tl.float32)
            second = (rotated * sin).to(out_ptr.dtype.element_ty).to(tl.float32)
            y = (first + second).to(out_ptr.dtype.element_ty)
        tl.store(out_rows + cols[None, :], y, mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float,
             rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """``x * (mean(x**2, -1) + eps) ** -0.5 * weight`` in fp32, returned in ``x``'s dtype (DiffusionGemma's
    RMSNorm); each row reduced by the ``row_reduce`` plan, so its result does not depend on the batch.

    With ``rope=(cos, sin)`` (each ``x.shape[:-2] + (D,)``, one angle row per position, shared by its heads:
    ``x`` is ``(..., heads, D)``), the output is then rotated as transformers' ``apply_rotary_pos_emb`` does,
    in the same launch and with the same roundings: the bits of the norm followed by the eager rotary ops under
    the interpreter; compiled for a GPU, the sum and its second product become one bf16 fma, so up to one bf16
    unit in the last place away from them (``canvaslab.invariant.norms``)."""
    d = x.shape[-1]
    if not x.is_contiguous():
        x = x.contiguous()
    rows = x.numel() // d
    out = torch.empty_like(x)
    per_program, block, warps = row_shape(d)
    if rope is not None:
        cos, sin = (t.expand(*x.shape[:-2], d).contiguous() for t in rope)
        heads = x.shape[-2]
    else:
        cos = sin = x
        heads = 1
    _rms_norm_kernel[(triton.cdiv(rows, per_program),)](
        x, weight if weight is not None else x, out, cos, sin, rows, d, d, d, eps, heads,
        HAS_WEIGHT=weight is not None, ROPE=rope is not None, ROWS=per_program, BLOCK=block,
        N_BLOCKS=triton.cdiv(d, block), num_warps=warps)
    return out


@triton.jit
def _rescale(m_old, m_new, s, t):
    """(s, t) = (sum e^(x-m), sum e^(x-m) (x-m)) of a lane re-based from max ``m_old`` to ``m_new``."""
    filled = s > 0  # an empty lane (s == 0, both maxima -inf) stays (0, 0)
    gap = tl.where(filled, m_old, 0.0) - tl.where(filled, m_new, 0.0)
    scale = tl.exp(gap)
    return s * scale, (t + gap * s) * scale


PHILOX_KEY = tl.constexpr(0x5EED)  # the rows' streams differ by their counters (row seed, position, token), not by the key


@triton.jit
def _philox_words(seeds, counter):
    """Four random uint32 words from one Philox call at (counter, row seed): a function of the int64 row seed
    and the counter alone (the rows' streams differ by their seeds)."""
    seeds = seeds.to(tl.uint64, bitcast=True)
    zeros = counter.to(tl.uint32) * 0
    seed_lo = (seeds & 0xFFFFFFFF).to(tl.uint32) + zeros
    seed_hi = (seeds >> 32).to(tl.uint32) + zeros
    return tl.philox(PHILOX_KEY, counter.to(tl.uint32), seed_lo, seed_hi, zeros)


@triton.jit
def _uniforms4(seeds, counter):
    """Four U[0, 1) from one Philox call at (counter, row seed). One call gives 128 random bits; using all four
    words quarters the integer work per token, which (not memory) bounded the vocabulary pass."""
    b0, b1, b2, b3 = _philox_words(seeds, counter)
    return (tl.uint_to_uniform_float(b0), tl.uint_to_uniform_float(b1), tl.uint_to_uniform_float(b2),
            tl.uint_to_uniform_float(b3))


@triton.jit
def _scaled(rows_in, rows_out, cols, row_mask, V, two_over_cap, softcap, inv_temperature,
            HAS_SOFTCAP: tl.constexpr, EVEN: tl.constexpr):
    """One chunk of a row: softcap and temperature applied, stored in the output's dtype; lanes past the
    vocabulary are -inf."""
    if EVEN:
        mask = row_mask[:, None] & (cols >= 0)
    else:
        mask = row_mask[:, None] & (cols < V)
    x = tl.load(rows_in + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_SOFTCAP:  # softcap * tanh(x / softcap), tanh written with one exp
        x = softcap - 2.0 * softcap / (tl.exp(x * two_over_cap) + 1.0)
    x = x * inv_temperature
    tl.store(rows_out + cols, x.to(rows_out.dtype.element_ty), mask=mask)
    return tl.where(mask, x, float("-inf"))


@triton.jit
def _race_key(x, u):
    """Exponential race: argmax p / E = argmax x - log E, E = -log U ~ Exp(1) (U = 0, p = 2^-31: E finite)."""
    return x - tl.log(-tl.log(tl.maximum(u, 2.0 ** -33)))


@triton.jit
def _keep_first_max(value, at, best, best_at):
    better = value > best  # strict: each lane keeps its first maximum (its columns arrive in order)
    return tl.where(better, value, best), tl.where(better, at, best_at)


@triton.jit
def _add_exp(x, peak, total, moment):
    shifted = tl.where(x == float("-inf"), 0.0, x - peak)
    e = tl.where(x == float("-inf"), 0.0, tl.exp(shifted))
    return total + e, moment + e * shifted


@triton.jit(do_not_specialize=["R"])
def _vocab_sample_kernel(logits_ptr, out_ptr, seeds_ptr, entropy_ptr, argmax_ptr, sample_ptr, R, V, L, s_in, s_out,
                         softcap, temperature_ptr, HAS_SOFTCAP: tl.constexpr, ROWS: tl.constexpr, QUARTER: tl.constexpr,
                         N_BLOCKS: tl.constexpr, EVEN: tl.constexpr):
    # Each row (batch row, canvas position) is reduced on its own lanes: nothing of another row is read. A
    # block is four chunks of QUARTER columns; lane j sees columns j, j + QUARTER, ... in increasing order.
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_mask = rows < R
    inv_temperature = 1.0 / tl.load(temperature_ptr)  # read on the device: a captured CUDA graph replays every step
    two_over_cap = 2.0 / softcap
    seeds = tl.load(seeds_ptr + rows // L, mask=row_mask, other=0)[:, None]
    counter_base = ((rows % L) * (N_BLOCKS * QUARTER))[:, None]
    rows_in = logits_ptr + rows[:, None].to(tl.int64) * s_in
    rows_out = out_ptr + rows[:, None].to(tl.int64) * s_out
    offs = tl.arange(0, QUARTER)[None, :]
    peak = tl.full((ROWS, QUARTER), float("-inf"), dtype=tl.float32)
    total = tl.zeros((ROWS, QUARTER), dtype=tl.float32)  # per lane: sum of e^(x - peak)
    moment = tl.zeros((ROWS, QUARTER), dtype=tl.float32)  # per lane: sum of e^(x - peak) (x - peak)
    best = tl.full((ROWS, QUARTER), float("-inf"), dtype=tl.float32)
    best_at = tl.zeros((ROWS, QUARTER), dtype=tl.int32)
    race = tl.full((ROWS, QUARTER), float("-inf"), dtype=tl.float32)
    race_at = tl.zeros((ROWS, QUARTER), dtype=tl.int32)
    for i in range(0, N_BLOCKS):
        c0 = i * 4 * QUARTER + offs
        c1, c2, c3 = c0 + QUARTER, c0 + 2 * QUARTER, c0 + 3 * QUARTER
        x0 = _scaled(rows_in, rows_out, c0, row_mask, V, two_over_cap, softcap, inv_temperature, HAS_SOFTCAP, EVEN)
        x1 = _scaled(rows_in, rows_out, c1, row_mask, V, two_over_cap, softcap, inv_temperature, HAS_SOFTCAP, EVEN)
        x2 = _scaled(rows_in, rows_out, c2, row_mask, V, two_over_cap, softcap, inv_temperature, HAS_SOFTCAP, EVEN)
        x3 = _scaled(rows_in, rows_out, c3, row_mask, V, two_over_cap, softcap, inv_temperature, HAS_SOFTCAP, EVEN)
        best, best_at = _keep_first_max(x0, c0, best, best_at)
        best, best_at = _keep_first_max(x1, c1, best, best_at)
        best, best_at = _keep_first_max(x2, c2, best, best_at)
        best, best_at = _keep_first_max(x3, c3, best, best_at)
        u0, u1, u2, u3 = _uniforms4(seeds, counter_base + i * QUARTER + offs)
        race, race_at = _keep_first_max(_race_key(x0, u0), c0, race, race_at)
        race, race_at = _keep_first_max(_race_key(x1, u1), c1, race, race_at)
        race, race_at = _keep_first_max(_race_key(x2, u2), c2, race, race_at)
        race, race_at = _keep_first_max(_race_key(x3, u3), c3, race, race_at)
        # one re-basing of the lane's sums per block of four (not per token)
        new_peak = tl.maximum(tl.maximum(peak, tl.maximum(x0, x1)), tl.maximum(x2, x3))
        total, moment = _rescale(peak, new_peak, total, moment)
        total, moment = _add_exp(x0, new_peak, total, moment)
        total, moment = _add_exp(x1, new_peak, total, moment)
        total, moment = _add_exp(x2, new_peak, total, moment)
        total, moment = _add_exp(x3, new_peak, total, moment)
        peak = new_peak
    top = tl.max(peak, axis=1)
    total, moment = _rescale(peak, top[:, None], total, moment)
    s = tl.where(row_mask, tl.sum(total, axis=1), 1.0)  # rows past R: nothing to reduce
    # H = -sum p log p = log S - sum e^(x - top) (x - top) / S: no cancellation when one token dominates
    tl.store(entropy_ptr + rows, tl.log(s) - tl.sum(moment, axis=1) / s, mask=row_mask)
    top_value = tl.max(best, axis=1)
    first = tl.min(tl.where(best == top_value[:, None], best_at, V), axis=1)
    tl.store(argmax_ptr + rows, first.to(tl.int64), mask=row_mask)
    top_key = tl.max(race, axis=1)
    drawn = tl.min(tl.where(race == top_key[:, None], race_at, V), axis=1)
    tl.store(sample_ptr + rows, drawn.to(tl.int64), mask=row_mask)


@triton.jit
def _next_largest(x, nan, free, offs, BLOCK: tl.constexpr):
    """Per row, the column of the largest value still ``free``, the lowest among equals; NaN above everything."""
    any_nan = tl.max(tl.where(free & nan, 1, 0), axis=1)[:, None]
    top = tl.max(tl.where(free & ~nan, x, float("-inf")), axis=1)[:, None]
    candidates = free & tl.where(any_nan > 0, nan, (x == top) & ~nan)
    return tl.min(tl.where(candidates, offs, BLOCK), axis=1)


@triton.jit(do_not_specialize=["R"])
def _topk_kernel(x_ptr, values_ptr, indices_ptr, R, D, s_x, K: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    # k rounds of "the largest value not taken, the lowest index among equals; NaN above everything": the order
    # of a stable descending sort, so the answer is the sort's (ties included) and depends on the row alone.
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_mask = rows < R
    offs = tl.arange(0, BLOCK)[None, :]
    free = row_mask[:, None] & (offs < D)
    row_start = x_ptr + rows.to(tl.int64) * s_x
    x = tl.load(row_start[:, None] + offs, mask=free, other=0.0).to(tl.float32)
    nan = x != x
    for j in tl.static_range(K):
        at = _next_largest(x, nan, free, offs, BLOCK)
        value = tl.load(row_start + at, mask=row_mask)  # the chosen element's own bits (-0.0, a NaN's payload)
        tl.store(values_ptr + rows * K + j, value, mask=row_mask)
        tl.store(indices_ptr + rows * K + j, at.to(tl.int64), mask=row_mask)
        free = free & (offs != at[:, None])


TOPK_MAX_WIDTH, TOPK_MAX_K = 1024, 32


def topk_rows(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest values of each row of ``x`` (``(..., D)``, float16/bfloat16/float32, ``D`` at most
    ``TOPK_MAX_WIDTH``, ``k`` at most ``TOPK_MAX_K``) and their indices, in a stable descending sort's order (NaN
    first, equal values by index): one program per few rows, no sort (the routers' top-k over the experts)."""
    d = x.shape[-1]
    if not (0 < k <= min(d, TOPK_MAX_K) and d <= TOPK_MAX_WIDTH):
        raise ValueError(f"topk_rows: k={k} over {d} values is outside the kernel's range")
    rows = x.reshape(-1, d).contiguous()
    values = torch.empty((rows.shape[0], k), dtype=x.dtype, device=x.device)
    indices = torch.empty((rows.shape[0], k), dtype=torch.int64, device=x.device)
    block = triton.next_power_of_2(d)
    per_program = max(1, 2048 // block)
    _topk_kernel[(triton.cdiv(rows.shape[0], per_program),)](rows, values, indices, rows.shape[0], d, d, K=k,
                                                            ROWS=per_program, BLOCK=block)
    return values.view(*x.shape[:-1], k), indices.view(*x.shape[:-1], k)


@triton.jit(do_not_specialize=["R"])
def _router_kernel(scores_ptr, expert_scale_ptr, probs_ptr, weights_ptr, indices_ptr, R, E, s_x, K: tl.constexpr,
                   ROWS: tl.constexpr, BLOCK: tl.constexpr, K_BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_mask = rows < R
    offs = tl.arange(0, BLOCK)[None, :]
    free = row_mask[:, None] & (offs < E)
    x = tl.load(scores_ptr + rows[:, None].to(tl.int64) * s_x + offs, mask=free, other=float("-inf")).to(tl.float32)
    # softmax in float32 with ``_row_kernel``'s steps for a row of one block: max, exponentials, sum over a
    # (ROWS, BLOCK) tile, quotient (compiled, the last bits may differ from that kernel's: seen on an H100)
    top = tl.max(x, axis=1)
    exps = tl.exp(x - tl.where(top == float("-inf"), 0.0, top)[:, None])
    probs = tl.exp(x - top[:, None]) / tl.sum(exps, axis=1)[:, None]
    tl.store(probs_ptr + rows[:, None].to(tl.int64) * E + offs, probs, mask=free)
    # top-k as ``_topk_kernel`` (a stable descending sort's first k: NaN first, equal values by index)
    nan = probs != probs
    ks = tl.arange(0, K_BLOCK)[None, :]
    chosen = tl.zeros((ROWS, K_BLOCK), dtype=tl.float32)
    chosen_at = tl.zeros((ROWS, K_BLOCK), dtype=tl.int32)
    for j in tl.static_range(K):
        at = _next_largest(probs, nan, free, offs, BLOCK)
        value = tl.sum(tl.where(offs == at[:, None], probs, 0.0), axis=1)  # the one term: its bits (probs >= +0)
        chosen = tl.where(ks == j, value[:, None], chosen)
        chosen_at = tl.where(ks == j, at[:, None], chosen_at)
        free = free & (offs != at[:, None])
    # renormalised by their float32 sum (``_row_kernel``'s over a (ROWS, K_BLOCK) tile), IEEE quotient as torch's
    # div, then times the expert's scale in float32
    kept = row_mask[:, None] & (ks < K)
    total = tl.sum(tl.where(kept, chosen, 0.0), axis=1)
    scale = tl.load(expert_scale_ptr + chosen_at, mask=kept, other=0.0).to(tl.float32)
    weights = tl.math.div_rn(chosen, total[:, None]) * scale
    tl.store(weights_ptr + rows[:, None] * K + ks, weights, mask=kept)
    tl.store(indices_ptr + rows[:, None] * K + ks, chosen_at.to(tl.int64), mask=kept)


def route(scores: torch.Tensor, expert_scale: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """DiffusionGemma's router after its projection, in one launch: ``(probabilities, weights, indices)`` by
    transformers' steps (the same experts; values that may differ in the last bits) from ``scores`` ``(..., E)`` (``E`` at most ``TOPK_MAX_WIDTH``, ``k`` at most
    ``TOPK_MAX_K``): the float32 softmax, its ``k`` largest in ``topk_rows``' order, those divided by their sum,
    times ``expert_scale`` of their experts. Each row is computed on its own lanes with the tile plan
    ``row_reduce`` gives a row of ``E``, so nothing depends on the other rows."""
    e = scores.shape[-1]
    if not (0 < k <= min(e, TOPK_MAX_K) and e <= TOPK_MAX_WIDTH):
        raise ValueError(f"route: top-{k} of {e} experts is outside the kernel's range")
    rows = scores.reshape(-1, e)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    r = rows.shape[0]
    probs = torch.empty((r, e), dtype=torch.float32, device=scores.device)
    weights = torch.empty((r, k), dtype=torch.float32, device=scores.device)
    indices = torch.empty((r, k), dtype=torch.int64, device=scores.device)
    per_program, block, warps = row_shape(e)
    _router_kernel[(triton.cdiv(r, per_program),)](rows, expert_scale.contiguous(), probs, weights, indices, r, e,
                                                   rows.stride(0), K=k, ROWS=per_program, BLOCK=block,
                                                   K_BLOCK=triton.next_power_of_2(k), num_warps=warps)
    lead = scores.shape[:-1]
    return probs.view(*lead, e), weights.view(*lead, k), indices.view(*lead, k)


@triton.jit
def _uniform_tokens_kernel(seeds_ptr, out_ptr, L, V, BLOCK: tl.constexpr):
    # Token i of row r: the first Philox word at counter i under the row's seed, scaled to [0, V) by a
    # 32-bit multiply-shift (bias below V / 2^32 per token, the order of torch.randint's modulo).
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    b0, _, _, _ = _philox_words(tl.load(seeds_ptr + row), offs)
    tokens = (b0.to(tl.uint64) * V) >> 32
    tl.store(out_ptr + row.to(tl.int64) * L + offs, tokens.to(tl.int64), mask=offs < L)


def uniform_tokens(seeds: torch.Tensor, length: int, vocab_size: int) -> torch.Tensor:
    """``(B, length)`` int64 token ids uniform over ``[0, vocab_size)``, row ``r`` from its own counter-based stream
    ``seeds[r]`` (int64): a function of that seed alone, drawn on the device with no host work (a CUDA graph
    can hold it)."""
    out = torch.empty((seeds.shape[0], length), dtype=torch.int64, device=seeds.device)
    block = min(1024, triton.next_power_of_2(length))
    _uniform_tokens_kernel[(seeds.shape[0], triton.cdiv(length, block))](seeds.contiguous(), out, length, vocab_size,
                                                                         BLOCK=block)
    return out


@triton.jit
def _keep_rows_kernel(dst_ptr, src_ptr, flags_ptr, N, BLOCK: tl.constexpr, CHUNKS: tl.constexpr):
    row = tl.program_id(0)
    if tl.load(flags_ptr + row) != 0:  # rows not flagged cost one load
        base = row.to(tl.int64) * N
        for i in range(0, CHUNKS):
            offs = (tl.program_id(1) * CHUNKS + i) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < N
            tl.store(dst_ptr + base + offs, tl.load(src_ptr + base + offs, mask=mask), mask=mask)


def keep_rows(dst: torch.Tensor, src: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    """``dst[r] = src[r]`` for every row ``r`` with ``flags[r]`` true, decided on the device (no host sync, so a
    CUDA graph can hold it); ``dst`` is returned."""
    if dst.shape != src.shape or not (dst.is_contiguous() and src.is_contiguous()):
        raise ValueError("keep_rows: dst and src must be contiguous tensors of one shape")
    n = dst[0].numel()
    if n >= 2 ** 31:  # offsets within a row are 32-bit
        raise ValueError("keep_rows: a row of 2^31 elements or more")
    block, chunks = 4096, 16
    _keep_rows_kernel[(dst.shape[0], triton.cdiv(n, block * chunks))](dst, src, flags.contiguous(), n, BLOCK=block,
                                                                       CHUNKS=chunks)
    return dst


def vocab_plan(v: int) -> tuple[int, int, int]:
    """(rows per program, quarter-block width, warps) for a vocabulary of ``v``: a function of ``v`` alone. A
    real vocabulary (262,144) gets one program per row; a small one (tests, tiny models) shares a program."""
    quarter = min(1024, triton.next_power_of_2(triton.cdiv(v, 4)))
    return (1, quarter, 8) if v > 4096 else (max(1, 2048 // quarter), quarter, 4)


def vocab_sample(logits: torch.Tensor, seeds: torch.Tensor, temperature: float | torch.Tensor, softcap: float | None = None,
                 out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The sampler's whole pass over the vocabulary, in one read of the logits.

    ``logits`` ``(B, L, V)`` (the lm_head output when ``softcap`` is given, else softcapped logits); ``seeds``
    ``(B,)`` int64, one random stream per batch row; ``temperature`` a float or a one-element float32 tensor
    on the logits' device. For each position, with ``x = softcap(logits) /
    temperature``: writes ``x`` in ``out``'s dtype (default: ``logits``'s; ``out`` may be ``logits`` itself),
    and returns ``(x, entropy of softmax(x), argmax x, one draw from softmax(x))``, the last three ``(B, L)``.
    A row's lanes read only that row, in an order fixed by V, so nothing depends on the batch.
    """
    b, length, v = logits.shape
    logits = logits.contiguous()
    out = torch.empty_like(logits) if out is None else out
    if not out.is_contiguous() or out.shape != logits.shape:
        raise ValueError("vocab_sample: out must be a contiguous tensor of the logits' shape")
    rows = b * length
    entropy = torch.empty((b, length), device=logits.device, dtype=torch.float32)
    argmax = torch.empty((b, length), device=logits.device, dtype=torch.int64)
    sample = torch.empty_like(argmax)
    per_program, quarter, warps = vocab_plan(v)
    if not isinstance(temperature, torch.Tensor):
        temperature = torch.tensor([temperature], dtype=torch.float32, device=logits.device)
    _vocab_sample_kernel[(triton.cdiv(rows, per_program),)](
        logits, out, seeds, entropy, argmax, sample, rows, v, length, v, v,
        float(softcap or 1.0), temperature, HAS_SOFTCAP=softcap is not None, ROWS=per_program, QUARTER=quarter,
        N_BLOCKS=triton.cdiv(v, 4 * quarter), EVEN=v % (4 * quarter) == 0, num_warps=warps)
    return out, entropy, argmax, sample
