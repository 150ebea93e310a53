"""Where a batch's GPU memory goes: the needle test's batch (one short prompt among B-1 fillers of 1,024-2,048
tokens by default, encoded in the batch) generated once, with the memory allocated and the peak in each phase
(load, encoder, every decoder pass split at lm_head) and, if it runs out of memory, the live allocations at that
moment grouped by the line of canvaslab or transformers that made them. On a CPU the phases are recorded without
memory figures (a dry run of the script).

    python benchmarks/memory_probe.py --model real-shapes --layers 30 --device cuda --batch-size 128 \\
        --out OUT/memory_30l_b128.json
"""

from __future__ import annotations

import argparse
import collections
import os
import random
from pathlib import Path

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # as benchmarks/needle.py

import torch  # noqa: E402

from canvaslab.environment import environment_fingerprint, record_result  # noqa: E402
from canvaslab.generation import generate  # noqa: E402
from canvaslab.io import write_json_atomic  # noqa: E402
from canvaslab.models import anatomy, load_model  # noqa: E402
from needle import FILLER_TOKENS, NEEDLE, fillers, token_range  # noqa: E402  (benchmarks/)

GIB = 2 ** 30


class Phases:
    """Memory at each hook and the peak since the previous one (None for both off CUDA)."""

    def __init__(self, device):
        self.device, self.rows = device, []
        self.cuda = device.type == "cuda"

    def mark(self, name: str) -> None:
        if not self.cuda:
            self.rows.append({"at": name, "allocated_gib": None, "peak_since_previous_gib": None})
            return
        self.rows.append({"at": name, "allocated_gib": torch.cuda.memory_allocated(self.device) / GIB,
                          "peak_since_previous_gib": torch.cuda.max_memory_allocated(self.device) / GIB})
        torch.cuda.reset_peak_memory_stats(self.device)


def hooked(model, phases: Phases) -> list:
    encoder, decoder, head = anatomy.encoder(model), anatomy.decoder(model), anatomy.lm_head(model)
    return [encoder.register_forward_pre_hook(lambda *_: phases.mark("before encoder")),
            encoder.register_forward_hook(lambda *_: phases.mark("encoder")),
            decoder.register_forward_pre_hook(lambda *_: phases.mark("before decoder pass")),
            decoder.register_forward_hook(lambda *_: phases.mark("decoder pass (layers)")),
            head.register_forward_hook(lambda *_: phases.mark("lm_head"))]


def live_by_line(snapshot: dict, top: int = 30) -> list[dict]:
    """Active blocks of a memory snapshot, summed by the innermost canvaslab/transformers frame that allocated them."""
    sizes, counts = collections.Counter(), collections.Counter()
    for segment in snapshot["segments"]:
        for block in segment["blocks"]:
            if block["state"] != "active_allocated":
                continue
            frames = block.get("frames") or []
            ours = [f for f in frames if "canvaslab" in f["filename"] or "transformers" in f["filename"]]
            key = " <- ".join(f"{Path(f['filename']).name}:{f['line']} {f['name']}" for f in ours[:3]) or "(no frame)"
            sizes[key] += block["size"]
            counts[key] += 1
    return [{"gib": size / GIB, "blocks": counts[key], "where": key} for key, size in sizes.most_common(top)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="real-shapes", help="preset, installed model, checkpoint directory or config.json")
    parser.add_argument("--layers", type=int, default=30, help="keep the first N layers (presets)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=4, help="denoising passes")
    parser.add_argument("--mode", default="invariant", choices=("stock", "rowwise", "invariant"))
    parser.add_argument("--filler-tokens", type=token_range, default=FILLER_TOKENS, metavar="LEAST,MOST",
                        help="length range of the filler prompts (default 1024,2048)")
    parser.add_argument("--seed", type=int, default=0, help="the fillers' tokens and the needle's row")
    parser.add_argument("--out", type=Path, required=True, help="JSON result file")
    args = parser.parse_args()
    loaded = load_model(args.model, device=args.device, layers=args.layers)
    cuda = loaded.device.type == "cuda"
    phases = Phases(loaded.device)
    phases.mark("model loaded")
    needle = loaded.tokenizer(NEEDLE)["input_ids"]
    others = fillers(args.batch_size - 1, loaded.model.config.text_config.vocab_size, args.seed + args.batch_size,
                     args.filler_tokens)
    row = random.Random(args.seed + args.batch_size).randrange(args.batch_size)
    prompts = others[:row] + [needle] + others[row:]
    result = {"config": {**vars(args), "out": str(args.out)}, "prompt_tokens": sum(map(len, prompts)),
              "longest_prompt": max(map(len, prompts)),
              "environment": environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source,
                                                     mode=args.mode)}
    if cuda:  # torch's allocator history: what is live if the batch runs out of memory
        torch.cuda.memory._record_memory_history(max_entries=200_000)
    handles = hooked(loaded.model, phases)
    try:
        generate(loaded, prompts, mode=args.mode, generation={"max_denoising_steps": args.steps})
        result["outcome"] = "finished"
    except torch.OutOfMemoryError as error:
        result["outcome"] = f"out of memory: {str(error).splitlines()[0]}"
        result["live_at_oom"] = live_by_line(torch.cuda.memory._snapshot())
    finally:
        for handle in handles:
            handle.remove()
        if cuda:
            torch.cuda.memory._record_memory_history(enabled=None)
    phases.mark("end")
    result["phases"] = phases.rows
    write_json_atomic(args.out, result)
    record_result(args.out, shows="GPU memory allocated and peak per generate phase of a needle-sized batch; the live "
                  "allocations by source line if it ran out of memory", environment=result["environment"])
    for entry in result["phases"]:
        print(entry, flush=True)
    print(result["outcome"])
    for entry in result.get("live_at_oom", []):
        print(f"{entry['gib']:8.2f} GiB {entry['blocks']:5d} {entry['where']}")


if __name__ == "__main__":
    main()
