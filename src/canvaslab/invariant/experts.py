"""Batch-invariant mixture-of-experts through transformers' ``ExpertsInterface``.

Tokens are grouped by expert in a stable sort's order (one answer, whatever the batch): on CUDA (eager) by two
integer Triton launches that also give the inverse order and the tile schedule
(``triton_kernels.expert_grouping``, in place of a radix sort, counts, a scatter and cumulative sums), elsewhere
by ``torch.sort(stable=True)``. On CUDA both
projections run as one grouped Triton launch each (``triton_kernels.grouped_linear``): fixed tiles,
the whole K range reduced in order, the tile schedule computed on the device. On the CPU each expert's
tokens go through ``F.linear`` (so the CPU's batch-invariant matmul computes them). Compiled code calls
both projections as ``canvaslab::grouped_linear`` ops (the same kernels, opaque to the compiler). Each token's top-k
expert outputs are then combined in a fixed order, with no atomic ``index_add_``, whose order could
vary between runs: on CUDA (eager) in one Triton pass that reads each token's outputs where the experts
left them (``triton_kernels.combine_experts``: the same bits as un-permute, weight and add, which took
three passes and ~13% of the GPU time at B=64), in compiled code and on the CPU with torch ops.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F
from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

from canvaslab.invariant import custom_ops

NAME = "canvaslab_invariant"


def _grouped_on_cuda(self, routed: torch.Tensor, schedule: tuple[torch.Tensor, torch.Tensor],
                     rows: torch.Tensor | None = None) -> torch.Tensor:
    """Both projections of the routed rows (``schedule``: ``triton_kernels.expert_schedule``'s): ``routed``
    itself, or with ``rows`` the rows ``routed[rows]`` (gathered by the first kernel's loads)."""
    from canvaslab.invariant.triton_kernels import grouped_linear

    transposed = getattr(self, "is_transposed", False)
    gated = self._apply_gate(grouped_linear(routed, self.gate_up_proj, schedule, transposed, rows=rows))
    return grouped_linear(gated, self.down_proj, schedule, transposed)


def _grouped_ops(self, routed: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Both projections as ``canvaslab::grouped_linear`` ops: what compiled code runs, on either device."""
    transposed = getattr(self, "is_transposed", False)
    gated = self._apply_gate(custom_ops.grouped_linear(routed, self.gate_up_proj, counts, transposed))
    return custom_ops.grouped_linear(gated, self.down_proj, counts, transposed)


def _per_expert_on_cpu(self, routed: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    outputs, start = [], 0
    for expert, count in enumerate(counts.tolist()):
        if count:
            chunk = routed[start:start + count]
            gated = self._apply_gate(F.linear(chunk, self.gate_up_proj[expert]))
            outputs.append(F.linear(gated, self.down_proj[expert]))
            start += count
    return torch.cat(outputs)


def invariant_experts_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                              top_k_weights: torch.Tensor) -> torch.Tensor:
    if getattr(self, "has_bias", False) or getattr(self, "has_post_expert_norm", False):
        raise NotImplementedError("canvaslab's invariant experts support gated experts without biases or post-norm")
    if hidden_states.is_cuda and not torch.compiler.is_compiling():
        return _experts_on_cuda(self, hidden_states, top_k_index, top_k_weights)
    tokens, top_k = top_k_index.shape
    flat_experts = top_k_index.reshape(-1)
    order = torch.sort(flat_experts, stable=True).indices
    # Counted with integer atomics (exact in any order); bincount would wait for the GPU to size its output.
    counts = torch.zeros(self.num_experts, dtype=torch.int64, device=flat_experts.device)
    counts.index_add_(0, flat_experts, torch.ones_like(flat_experts))
    routed = hidden_states[order // top_k]
    # Compiled code (the grouped products as custom ops; Inductor fuses the combine) and the CPU
    compute = _grouped_ops if torch.compiler.is_compiling() else _per_expert_on_cpu
    outputs = torch.empty_like(routed)
    outputs[order] = compute(self, routed, counts)
    return combine_in_order(outputs.view(tokens, top_k, -1), top_k_weights).to(hidden_states.dtype)


def _experts_on_cuda(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                     top_k_weights: torch.Tensor) -> torch.Tensor:
    """Eager CUDA: grouping (two launches), both projections (one each), the combine (one). The kernels also run
    on CPU tensors under ``TRITON_INTERPRET=1``, which is how the tests reach this path without a GPU."""
    from canvaslab.invariant.triton_kernels import combine_experts, expert_grouping

    tokens, top_k = top_k_index.shape
    grouping = expert_grouping(top_k_index.reshape(-1), self.num_experts, top_k)
    outputs = _grouped_on_cuda(self, hidden_states, grouping["schedule"], rows=grouping["rows"])
    return combine_experts(outputs, grouping["slots"].view(tokens, top_k), top_k_weights)


def combine_in_order(outputs: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
    """``(tokens, top_k, H)`` expert outputs weighted (rounded to their dtype) and summed over k in order, in
    float32, as the stock sum accumulates."""
    weighted = outputs * top_k_weights[..., None].to(outputs.dtype)
    combined = weighted[:, 0].float()
    for k in range(1, outputs.shape[1]):  # fixed order over the token's experts
        combined += weighted[:, k]
    return combined


def register() -> None:
    ALL_EXPERTS_FUNCTIONS.register(NAME, invariant_experts_forward)
