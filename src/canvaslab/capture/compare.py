"""Compare a run's capture with the reference (B=1) capture: where results first part, and why.

The *first divergence* is the first recorded call, in execution order, whose row-0 output differs. The
*origin* is the first call whose inputs were identical but whose output was not: the operation that
created the difference rather than passed it on. When the first differing call already had differing
inputs, the difference came from code between two recorded calls, and the origin says so. Values a
decoder pass receives from the previous one (the renoised canvas, the self-conditioning logits) are
recorded as ``carried`` calls at the start of the pass; a difference first seen there is named as that
value and the pass it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from canvaslab.capture.digest import bits
from canvaslab.capture.recorder import Capture, CallRecord, PassKey
from canvaslab.models import anatomy


@dataclass
class Comparison:
    passes_total: int = 0
    passes_matching: int = 0
    bytes_compared: int = 0
    first: CallRecord | None = None
    origin: dict[str, Any] | None = None
    structure_changed: str | None = None
    spread_pass: PassKey | None = None
    positions_per_layer: dict[str, int] = field(default_factory=dict)
    canvas_positions: int | None = None

    @property
    def diverged(self) -> bool:
        return self.first is not None or self.structure_changed is not None

    def detail_targets(self, reference: Capture) -> set[tuple[PassKey, str, int]]:
        """Calls whose full row-0 outputs the detailed comparison needs."""
        if self.first is None:
            return set()
        targets = {self.first.key}
        for record in reference.by_pass().get(self.spread_pass, []):
            if record.kind == "module" and (anatomy.is_router_projection(record.name) or anatomy.is_lm_head(record.name)):
                targets.add(record.key)
        return targets


# What each carried record holds, for the origin's name; the canvas of a canvas's first pass is drawn noise.
CARRIED_VALUES = {"carried.canvas": "renoised canvas", "carried.self_conditioning_logits": "self_conditioning_logits"}


def _carried_origin(record: CallRecord, inputs_identical: bool) -> dict[str, Any]:
    key = record.pass_key
    if key.step == 0:
        return {"name": f"initial canvas of canvas {key.canvas}", "kind": "carried", "op": None,
                "inputs_identical": inputs_identical,
                "explanation": "the noise the sampler drew for this canvas's first pass differs"}
    source = PassKey(key.canvas, "decoder", key.step - 1).label()
    value = CARRIED_VALUES.get(record.name, record.name)
    made = ("the previous pass's own result matched, so the difference was made when the value was handed on "
            "(renoising, or the logits passed to the next pass)" if inputs_identical else
            "the previous pass's sampler decision or logits already differed")
    return {"name": f"carried: {value} from {source}", "kind": "carried", "op": None,
            "inputs_identical": inputs_identical, "explanation": f"{value} carried from {source} to {key.label()} "
                                                                  f"differs: {made}"}


def _origin(group_ref: list[CallRecord], matched: dict, index: int) -> dict[str, Any]:
    first_ref = group_ref[index]
    first_run = matched.get(first_ref.key)
    if first_ref.kind == "carried":
        return _carried_origin(first_ref, first_run is not None and first_ref.inputs == first_run.inputs)
    if first_run is not None and first_ref.inputs == first_run.inputs:
        op = first_ref.name.split("::")[-1] if first_ref.kind == "op" else None
        return {"name": first_ref.name, "kind": first_ref.kind, "op": op, "inputs_identical": True,
                "explanation": "inputs identical, output differs: the difference is created here"}
    before = group_ref[index - 1].name if index else "the start of this pass"
    return {"name": first_ref.name, "kind": first_ref.kind, "op": None, "inputs_identical": False,
            "explanation": f"inputs already differ: the difference was made by unrecorded code between "
                           f"{before} and {first_ref.name}, or arrived through state (e.g. the KV cache)"}


def _positions_per_layer(group_ref: list[CallRecord], matched: dict) -> tuple[dict[str, int], int | None]:
    counts, width = {}, None
    for ref in group_ref:
        run = matched.get(ref.key)
        layer = anatomy.decoder_layer_index(ref.name)
        if ref.kind == "module" and layer is not None and run is not None and ref.positions and run.positions:
            counts[f"layer {layer}"] = sum(a != b for a, b in zip(ref.positions, run.positions))
            width = len(ref.positions)
    return counts, width


def compare_captures(reference: Capture, run: Capture) -> Comparison:
    """Byte-exact comparison of two captures, pass by pass, in the reference's execution order.

    Calls are matched by (pass, name, occurrence), so a mode that adds calls still lines up with the
    reference. Every pass counts (prompt cache, encoder, decoder): a pass matches when each of its calls
    has a counterpart of the same shape and value, so the run diverged exactly when some pass does not
    match.
    """
    result = Comparison()
    ref_groups, run_groups = reference.by_pass(), run.by_pass()
    for key, group_ref in ref_groups.items():
        result.passes_total += 1
        group_run = run_groups.get(key)
        if group_run is None:
            result.structure_changed = result.structure_changed or f"{key.label()} is missing from the run"
            continue
        matched = {record.key: record for record in group_run}
        missing = {i for i, r in enumerate(group_ref) if r.key not in matched or matched[r.key].shape != r.shape}
        if missing and result.structure_changed is None:
            result.structure_changed = f"{key.label()}: {group_ref[min(missing)].name} has no counterpart in the run"
        # ops and carried values repeat bytes a module or the sampler already output: counted once
        result.bytes_compared += sum(r.nbytes for i, r in enumerate(group_ref)
                                     if r.kind in ("module", "sampler") and i not in missing)
        differing = [i for i, r in enumerate(group_ref) if i in missing or matched[r.key].output != r.output]
        result.passes_matching += int(not differing)
        if differing and result.first is None:
            result.first = group_ref[differing[0]]
            result.origin = _origin(group_ref, matched, differing[0])
            result.spread_pass = key if key.phase == "decoder" else PassKey(key.canvas, "decoder", 0)
        if result.spread_pass == key:
            result.positions_per_layer, result.canvas_positions = _positions_per_layer(group_ref, matched)
    extra = [key for key in run_groups if key not in ref_groups]
    result.passes_total += len(extra)  # passes only the run made (it stopped later) never match
    if extra and result.structure_changed is None:
        result.structure_changed = f"the run made {len(extra)} more passes than the reference"
    return result


def element_difference(a: torch.Tensor, b: torch.Tensor) -> dict[str, Any]:
    """Fraction of elements whose bits differ, and the largest absolute difference."""
    if a.shape != b.shape:
        return {"fraction_changed": None, "max_abs_diff": None, "note": f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}"}
    changed = (bits(a) != bits(b)).reshape(-1)
    max_abs = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
    return {"fraction_changed": changed.double().mean().item(), "elements": a.numel(), "max_abs_diff": max_abs}


def detail(comparison: Comparison, reference: Capture, run: Capture) -> dict[str, Any]:
    """Element-level statistics from the kept tensors of a detailed re-run of both sides."""
    first_key = comparison.first.key
    first = (element_difference(reference.kept[first_key], run.kept[first_key]) if first_key in run.kept
             else {"fraction_changed": None, "max_abs_diff": None, "note": "the run has no such call"})
    router_changed = router_total = 0
    logits = None
    for key, ref_tensor in reference.kept.items():
        pass_key, name, _ = key
        if pass_key != comparison.spread_pass or key not in run.kept or run.kept[key].shape != ref_tensor.shape:
            continue
        if anatomy.is_router_projection(name):
            router_changed += int((bits(ref_tensor) != bits(run.kept[key])).sum().item())
            router_total += ref_tensor.numel()
        elif anatomy.is_lm_head(name):
            logits = element_difference(ref_tensor, run.kept[key])
    return {
        "first": first,
        "router_scores_changed_pct": 100.0 * router_changed / router_total if router_total else None,
        "final_logits_changed_pct": 100.0 * logits["fraction_changed"] if logits and logits["fraction_changed"] is not None else None,
    }
