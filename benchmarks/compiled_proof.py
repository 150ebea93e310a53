"""The batch-size proof on invariant mode's fast paths: is row 0's generation byte-identical alone and in batches?

The capture recorder cannot see inside compiled code or CUDA-graph replays, so this proof compares what
leaves them, at every denoising pass: the scaled logits the sampler is given (the whole decoder's output,
vocabulary-sized), the per-position entropy, the accepted set, and the final tokens, through an
``accept_canvas`` observer. Prompts are encoded in the batch (row 0 left-padded among longer prompts
with ``--fill mixed``; copies of row 0 with ``--fill copies``).

``--path compiled`` runs transformers' static-cache compiled path (canvaslab's backend, with the fused
step's CUDA graphs on CUDA); ``--path graphs`` the dynamic-cache fused step with its CUDA graphs (eager on a
CPU). ``--mode stock --path graphs`` is a negative control (transformers' eager step); stock on ``compiled``
cannot be observed (transformers compiles the sampler's ``accept_canvas`` with the observer inside).

    python benchmarks/compiled_proof.py --model real-shapes --layers 6 --device cuda --path compiled \\
        --fills copies,mixed --batch-sizes 1,2,3,4,5,6,7,8,32,64 --steps 4 --out OUT/proof_compiled.json
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import time
from pathlib import Path

import torch

from canvaslab.environment import environment_fingerprint, record_result
from canvaslab.generation import generate
from canvaslab.invariant import replaced_ops
from canvaslab.io import write_json_atomic
from canvaslab.models import load_model
from canvaslab.prompts import BUILTIN_PROMPTS


class RowDigests:
    """sha256 of row 0's scaled logits, entropy and accepted mask at every pass (bytes on the host)."""

    def __init__(self, row: int = 0):
        self.row, self.passes, self.bytes = row, [], 0

    def on_accept(self, *, logits, accepted_mask, accepted_canvas, cur_step, entropy):
        digests = []
        for tensor in (logits[self.row], entropy[self.row] if entropy is not None else None, accepted_mask[self.row]):
            if tensor is None:
                digests.append(None)
                continue
            data = tensor.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes()
            self.bytes += len(data)
            digests.append(hashlib.sha256(data).hexdigest())
        self.passes.append(digests)


def batch_prompts(prompts: list[list[int]], fill: str, size: int) -> list[list[int]]:
    if fill == "copies":
        return [prompts[0]] * size
    others = sorted(prompts[1:], key=len, reverse=True)  # the longest first: row 0 is left-padded
    return [prompts[0], *[others[i % len(others)] for i in range(size - 1)]]


def use_path(loaded, path: str) -> None:
    loaded.model.generation_config.cache_implementation = "static" if path == "compiled" else None


@contextlib.contextmanager
def fused_steps():
    """The fused steps generate makes in the block (their CUDA-graph replays and capture failures)."""
    from canvaslab.generation.fused_step import FusedStep

    made, original = [], FusedStep.__init__

    def remember(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    FusedStep.__init__ = remember
    try:
        yield made
    finally:
        FusedStep.__init__ = original


def run_once(loaded, prompts, mode: str, steps: int) -> tuple[dict, float]:
    digests = RowDigests()
    start = time.perf_counter()
    with fused_steps() as made:
        out = generate(loaded, prompts, mode=mode, seed=7, observers=[digests],
                       generation={"max_denoising_steps": steps, "confidence_threshold": 1e-30})
    if loaded.device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    graphs = {"replays": sum(step.replays for step in made),
              "graph_failures": [failure for step in made for failure in step.graph_failures]}
    return {"tokens": out.rows[0].tokens, "passes": digests.passes, "bytes": digests.bytes, **graphs}, seconds


def prove(loaded, *, mode: str, fills: list[str], sizes: list[int], steps: int, deadline: float | None = None) -> dict:
    """Row 0 alone (the reference: the same prompt for every fill), then each batch size with every fill, the
    sizes in the order given (so a deadline cuts the largest sizes, not a whole fill)."""
    prompts = [loaded.tokenizer(text)["input_ids"] for text in BUILTIN_PROMPTS[:8]]
    reference, seconds = run_once(loaded, [prompts[0]], mode, steps)
    runs, compared = [{"fill": "alone", "batch": 1, "seconds": seconds, "replays": reference["replays"],
                       "graph_failures": reference["graph_failures"]}], 0
    print(runs[-1], flush=True)
    for size in sizes:
        for fill in fills:
            if size == 1:
                continue
            if deadline is not None and time.time() > deadline:
                runs.append({"fill": fill, "batch": size, "skipped": "out of time"})
                continue
            got, seconds = run_once(loaded, batch_prompts(prompts, fill, size), mode, steps)
            matching = sum(a == b for a, b in zip(got["passes"], reference["passes"]))
            compared += got["bytes"]
            runs.append({"fill": fill, "batch": size, "seconds": seconds, "passes": len(got["passes"]),
                         "replays": got["replays"], "graph_failures": got["graph_failures"],
                         "passes_identical": matching, "tokens_identical": got["tokens"] == reference["tokens"],
                         "identical": matching == len(reference["passes"]) == len(got["passes"])
                         and got["tokens"] == reference["tokens"]})
            print({k: v for k, v in runs[-1].items()}, flush=True)
    done = [run for run in runs if "identical" in run]
    return {"runs": runs, "summary": {"compared": len(done), "diverged": sum(not run["identical"] for run in done),
                                      "skipped": sum("skipped" in run for run in runs), "bytes_compared": compared}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="preset, installed model, checkpoint directory or config.json")
    parser.add_argument("--layers", type=int, default=None, help="keep the first N layers (presets)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--mode", default="invariant", choices=("stock", "rowwise", "invariant"))
    parser.add_argument("--path", choices=("compiled", "graphs"), default="compiled")
    parser.add_argument("--fills", default="copies,mixed", help="comma-separated: copies, mixed")
    parser.add_argument("--batch-sizes", default="1,2,3,8", help="comma-separated")
    parser.add_argument("--steps", type=int, default=4, help="denoising passes per call")
    parser.add_argument("--seconds", type=float, default=None, help="stop starting new batches after this long")
    parser.add_argument("--out", type=Path, required=True, help="JSON result file")
    args = parser.parse_args()
    loaded = load_model(args.model, device=args.device, layers=args.layers)
    use_path(loaded, args.path)
    deadline = time.time() + args.seconds if args.seconds else None
    result = prove(loaded, mode=args.mode, fills=args.fills.split(","), steps=args.steps, deadline=deadline,
                   sizes=[int(b) for b in args.batch_sizes.split(",")])
    result["config"] = vars(args) | {"out": str(args.out)}
    result["environment"] = environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source,
                                                    replaced_ops={args.mode: replaced_ops(args.mode)})
    write_json_atomic(args.out, result)
    record_result(args.out, shows="whether row 0's scaled logits, entropy and accepted set at every pass and its tokens "
                  f"are byte-identical alone and in batches on the {args.path} path ({args.mode} mode)",
                  environment=result["environment"])
    print(args.mode, args.path, result["summary"], flush=True)


if __name__ == "__main__":
    main()
