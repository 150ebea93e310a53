"""Batch-invariant mixture-of-experts through transformers' ``ExpertsInterface``.

Tokens are grouped by expert with a stable sort (one answer, whatever the batch), each expert's tokens
go through its two projections as ordinary ``F.linear`` calls (so the batch-invariant matmul computes
them, whatever number of tokens the batch routes to the expert), and each token's top-k expert outputs
are combined in a fixed order, with no atomic ``index_add_``, whose order could vary between runs.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F
from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

NAME = "canvaslab_invariant"


def invariant_experts_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                              top_k_weights: torch.Tensor) -> torch.Tensor:
    tokens, top_k = top_k_index.shape
    flat_experts = top_k_index.reshape(-1)
    order = torch.sort(flat_experts, stable=True).indices
    counts = torch.bincount(flat_experts, minlength=self.num_experts).tolist()
    routed = hidden_states[order // top_k]
    outputs = hidden_states.new_empty((tokens * top_k, hidden_states.shape[-1]))
    start = 0
    for expert, count in enumerate(counts):
        if count == 0:
            continue
        chunk = routed[start:start + count]
        gated = self._apply_gate(F.linear(chunk, self.gate_up_proj[expert]))
        outputs[order[start:start + count]] = F.linear(gated, self.down_proj[expert])
        start += count
    weighted = outputs.view(tokens, top_k, -1) * top_k_weights[..., None].to(outputs.dtype)
    combined = weighted[:, 0]
    for k in range(1, top_k):  # fixed order over the token's experts
        combined = combined + weighted[:, k]
    return combined.to(hidden_states.dtype)


def register() -> None:
    ALL_EXPERTS_FUNCTIONS.register(NAME, invariant_experts_forward)
