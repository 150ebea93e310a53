"""The op scan as a study: each batch-sensitive op (``canvaslab.invariant.op_scan``) in each mode is a unit.

Run it in stock mode to see what a machine does, and in invariant mode to check that every op has one
class of batch sizes.

A unit's record holds row 0's output digest at every batch size; the classes of batch sizes that agree
with each other, and ``op_scan.json``, are computed from the stored records. The ops of one mode are one
group: they run inside one ``generation_mode``, on one worker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from canvaslab.analysis.batch_classes import equivalence_classes
from canvaslab.capture.digest import digest
from canvaslab.environment import environment_fingerprint
from canvaslab.invariant import generation_mode, replaced_ops
from canvaslab.invariant.op_scan import OpCase, op_cases
from canvaslab.io import write_json_atomic
from canvaslab.studies.engine import Study

RESULT_FILE = "op_scan.json"
# The op names, fixed here so units derive from the plan without building a model (held equal by a test).
OPS = ("encoder k_proj, last prompt token", "encoder k_proj, prompt", "decoder q_proj", "decoder k_proj",
       "decoder o_proj", "decoder mlp.gate_proj", "decoder mlp.down_proj", "decoder router.proj", "lm_head",
       "self-conditioning matmul", "softmax fp32 over vocab", "sampler entropy (logsumexp)", "sampler sort",
       "RMSNorm", "router top-k", "experts", "attention (decoder canvas over prompt + canvas)",
       "decoder q_proj with bias (addmm)", "attention scores (bmm)", "log_softmax fp32 over vocab")


class OpScanStudy(Study):
    name = "op_scan"
    unit_label = "ops"

    def __init__(self, model: dict[str, Any], modes: list[str], batch_sizes: list[int], seed: int = 0, loaded=None):
        self.model, self.modes, self.seed, self.loaded = model, list(modes), seed, loaded
        self.batch_sizes = sorted(set(batch_sizes) | {1})

    def __getstate__(self):
        return {**self.__dict__, "loaded": None}

    def plan(self) -> dict[str, Any]:
        return {"model": self.model, "modes": self.modes, "batch_sizes": self.batch_sizes, "seed": self.seed}

    def units(self) -> list[str]:
        return self.units_of_plan(self.plan())

    @staticmethod
    def units_of_plan(plan: dict[str, Any], folder: Path | None = None) -> list[str]:
        return [f"{mode}/{op}" for mode in plan["modes"] for op in OPS]

    def groups(self) -> list[list[str]]:
        return [[f"{mode}/{op}" for op in OPS] for mode in self.modes]

    def prepare(self):
        if self.loaded is not None:
            return self.loaded
        from canvaslab.models import load_study_model

        return load_study_model(self.model)

    def worker_info(self, loaded) -> dict[str, Any]:
        return {"environment": environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source)}

    def run_group(self, loaded, group: list[str], todo: list[str]):
        mode = group[0].split("/", 1)[0]
        cases = {case.name: case for case in op_cases(loaded.model)}
        with generation_mode(loaded.model, mode):
            for unit in todo:
                case = cases[unit.split("/", 1)[1]]
                signatures = case_signatures(case, self.batch_sizes, self.seed)
                yield unit, {"mode": mode, "op": case.name, "shape": case.shape, "device": str(loaded.device),
                             "signatures": {str(b): s for b, s in signatures.items()}}

    def write_views(self, folder, records, workers) -> dict[str, Any]:
        result = op_scan_view(self.plan(), records, workers)
        write_json_atomic(Path(folder) / RESULT_FILE, result)
        return result


def op_scan_view(plan: dict[str, Any], records: dict[str, dict], workers: dict[str, dict]) -> dict[str, Any]:
    """``op_scan.json`` from the stored op records: classes of batch sizes per op and mode."""
    scans = []
    for mode in plan["modes"]:
        ops = {}
        for op in OPS:
            record = records.get(f"{mode}/{op}")
            if record is not None:
                classes = equivalence_classes({int(b): s for b, s in record["signatures"].items()})
                ops[op] = {"shape": record["shape"], "classes": classes, "invariant": len(classes) == 1}
        scans.append({"mode": mode, "batch_sizes": plan["batch_sizes"], "ops": ops})
    environment = next((w["environment"] for w in workers.values() if "environment" in w), None)
    return {"environment": environment, "scans": scans, "replaced_ops": {m: replaced_ops(m) for m in plan["modes"]}}


@torch.no_grad()
def case_signatures(case: OpCase, batch_sizes: list[int], seed: int = 0) -> dict[int, str]:
    """Row 0's output digest at every batch size (B=1 included), inputs drawn once for the largest batch."""
    sizes = sorted(set(batch_sizes) | {1})
    inputs = case.make_input(max(sizes), torch.Generator().manual_seed(seed))
    signatures = {}
    for batch in sizes:
        output = case.run(inputs, batch)
        signatures[batch] = str(digest(output[: output.shape[0] // batch]))
    return signatures


def scan_ops(loaded, batch_sizes: list[int], mode: str = "stock", seed: int = 0) -> dict:
    """Equivalence classes of batch sizes per op, for row 0 against B=1."""
    results = {}
    with generation_mode(loaded.model, mode):
        for case in op_cases(loaded.model):
            classes = equivalence_classes(case_signatures(case, batch_sizes, seed))
            results[case.name] = {"shape": case.shape, "classes": classes, "invariant": len(classes) == 1}
    return {"mode": mode, "batch_sizes": sorted(set(batch_sizes) | {1}), "ops": results}
