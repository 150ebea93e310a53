"""The needle test of batch invariance: one prompt generated alone, then at a random row among B-1 long
fillers (1,024-2,048 random tokens each by default, every prompt encoded in the batch, so the needle is
left-padded by up to ~2,000 tokens). The needle's tokens and, for every denoising pass, its accepted canvas,
accepted mask and per-position entropy must equal the run alone byte for byte (``identical``). Peak GPU
memory of each batched run is recorded; a batch that runs out of memory is recorded as such.

    python benchmarks/needle.py --model real-shapes --layers 6 --device cuda --batch-sizes 64,128 \\
        --mode invariant --steps 4 --out OUT/needle_6l.json
"""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path

# Before torch touches CUDA: at 30 layers and B=128 the batch needs ~114 GiB, but with fixed-size segments the
# allocator had 28.8 GiB reserved and unusable (fragmentation) and ran out; growable segments reuse it.
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import torch  # noqa: E402

from canvaslab.environment import environment_fingerprint, record_result
from canvaslab.generation import generate
from canvaslab.io import write_json_atomic
from canvaslab.models import anatomy, load_model

NEEDLE = "the man said that the water in the river was cold"


class NeedleRow:
    """Keeps one row's sampler decisions and entropies, pass by pass (on the device until the end)."""

    def __init__(self, row: int):
        self.row, self.passes = row, []

    def on_accept(self, *, logits, accepted_mask, accepted_canvas, cur_step, entropy=None) -> None:
        self.passes.append((accepted_canvas[self.row].clone(), accepted_mask[self.row].clone(),
                            None if entropy is None else entropy[self.row].clone()))


FILLER_TOKENS = (1024, 2048)


def fillers(count: int, vocab_size: int, seed: int, tokens: tuple[int, int] = FILLER_TOKENS) -> list[list[int]]:
    """Random token ids (away from the special ids at the start of the vocabulary), ``tokens`` (least, most)
    per prompt."""
    rng = random.Random(seed)
    first = min(1000, vocab_size // 2)
    return [[rng.randrange(first, vocab_size) for _ in range(rng.randint(*tokens))] for _ in range(count)]


def token_range(text: str) -> tuple[int, int]:
    """``--filler-tokens LEAST,MOST``."""
    least, most = (int(part) for part in text.split(","))
    if not 0 < least <= most:
        raise argparse.ArgumentTypeError(f"{text!r}: want LEAST,MOST with 0 < LEAST <= MOST")
    return least, most


def run(loaded, prompts, row, mode, steps):
    observer = NeedleRow(row)
    if loaded.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(loaded.device)
    calls = []  # the decoder's forward calls: passes replayed from a CUDA graph make none
    handle = anatomy.decoder(loaded.model).register_forward_hook(lambda *_: calls.append(1))
    start = time.perf_counter()
    try:
        output = generate(loaded, prompts, mode=mode, observers=[observer], generation={"max_denoising_steps": steps})
    finally:
        handle.remove()
    seconds = time.perf_counter() - start
    observer.replays = len(observer.passes) - len(calls)
    peak = torch.cuda.max_memory_allocated(loaded.device) / 2 ** 30 if loaded.device.type == "cuda" else None
    return output.rows[row].tokens, observer.passes, seconds, peak, observer.replays


def same(a, b) -> bool:
    tokens_a, passes_a = a
    tokens_b, passes_b = b
    return tokens_a == tokens_b and len(passes_a) == len(passes_b) and all(
        all(torch.equal(x, y) if x is not None else y is None for x, y in zip(pa, pb)) for pa, pb in zip(passes_a, passes_b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="preset, installed model, checkpoint directory or config.json")
    parser.add_argument("--layers", type=int, default=None, help="keep the first N layers (presets)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-sizes", default="64,128", help="comma-separated")
    parser.add_argument("--mode", default="invariant", choices=("stock", "rowwise", "invariant"))
    parser.add_argument("--steps", type=int, default=2, help="denoising passes per call")
    parser.add_argument("--filler-tokens", type=token_range, default=FILLER_TOKENS, metavar="LEAST,MOST",
                        help="length range of the filler prompts (default 1024,2048)")
    parser.add_argument("--seed", type=int, default=0, help="the fillers' tokens and the needle's row")
    parser.add_argument("--out", type=Path, required=True, help="JSON result file (rewritten after every batch)")
    args = parser.parse_args()
    loaded = load_model(args.model, device=args.device, layers=args.layers)
    result = needle_runs(loaded, [int(b) for b in args.batch_sizes.split(",")], args.mode, args.steps, args.seed,
                         args.out, args.filler_tokens)
    record_result(args.out, shows="whether one prompt's tokens and every pass's accepted canvas, mask and entropy are "
                  "byte-identical alone and among long fillers; peak GPU memory", environment=result["environment"])
    print({"runs": [{k: v for k, v in run.items() if k != "filler_lengths"} for run in result["runs"]]})


def needle_runs(loaded, batch_sizes, mode, steps, seed, out: Path, filler_tokens=FILLER_TOKENS) -> dict:
    needle = loaded.tokenizer(NEEDLE)["input_ids"]
    tokens, passes, seconds, peak, replays = run(loaded, [needle], 0, mode, steps)
    result = {"environment": environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source),
              "mode": mode, "steps": steps, "filler_tokens": list(filler_tokens), "runs": [],
              "alone": {"seconds": seconds, "peak_memory_gib": peak, "graph_replays": replays}}
    for batch in batch_sizes:
        others = fillers(batch - 1, loaded.model.config.text_config.vocab_size, seed + batch, filler_tokens)
        row = random.Random(seed + batch).randrange(batch)
        prompts = others[:row] + [needle] + others[row:]
        entry = {"batch": batch, "needle_row": row, "filler_lengths": [len(p) for p in others]}
        try:
            batched = run(loaded, prompts, row, mode, steps)
            entry.update(identical=same((tokens, passes), batched[:2]), seconds=batched[2], peak_memory_gib=batched[3],
                         passes=len(batched[1]), graph_replays=batched[4])
        except torch.OutOfMemoryError as error:
            entry.update(identical=None, error=f"out of memory: {str(error).splitlines()[0]}")
            torch.cuda.empty_cache()
        result["runs"].append(entry)
        print({k: v for k, v in entry.items() if k != "filler_lengths"}, flush=True)
        write_json_atomic(out, result)
    return result


if __name__ == "__main__":
    main()
