"""What loading a model costs: wall time, peak host memory and peak device memory
(torch.cuda.max_memory_allocated), beside the size of the weights. Host memory twice: the resident-set
high-water mark (ru_maxrss), which also counts the pages of memory-mapped safetensors files that were read,
and the peak of anonymous memory (RssAnon, sampled every few milliseconds), the host copies the load made. A random-weight preset is built on the meta device and materialised tensor by
tensor on the target device; a checkpoint directory is read shard by shard straight to the device. The goal:
device peak within the weights + 2 GiB, host peak about one shard. Run one load per process (the host
high-water mark only rises); ``--save`` also writes the loaded model as a checkpoint (shards of
``--shard-size``) for a second run to load.

    python benchmarks/load_memory.py --model real-shapes --layers 30 --device cuda --out OUT/load_30l.json
    python benchmarks/load_memory.py --model real-shapes --layers 6 --device cuda --save /tmp/ckpt_6l \\
        --out OUT/build_6l.json
    python benchmarks/load_memory.py --model /tmp/ckpt_6l --device cuda --out OUT/checkpoint_6l.json
"""

from __future__ import annotations

import argparse
import resource
import threading
import time
from pathlib import Path

import torch

from canvaslab.environment import environment_fingerprint, record_result
from canvaslab.io import write_json_atomic
from canvaslab.models import load_model

GIB = 2 ** 30
HEADROOM_GIB = 2.0


def host_peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB  # ru_maxrss is in KiB on Linux


class AnonymousPeak:
    """The peak of the process's anonymous resident memory (``RssAnon`` in /proc/self/status), sampled by a
    thread while the block runs; None where /proc does not give it."""

    def __init__(self, interval_s: float = 0.002):
        self.interval_s, self.before, self.peak = interval_s, self.read(), None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @staticmethod
    def read() -> float | None:
        try:
            with open("/proc/self/status") as status:
                for line in status:
                    if line.startswith("RssAnon:"):
                        return int(line.split()[1]) * 1024 / GIB
        except OSError:
            return None
        return None

    def _sample(self) -> None:
        while not self._stop.is_set():
            value = self.read()
            if value is not None:
                self.peak = value if self.peak is None else max(self.peak, value)
            time.sleep(self.interval_s)

    def __enter__(self) -> "AnonymousPeak":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        last = self.read()
        if last is not None and self.peak is not None:
            self.peak = max(self.peak, last)


def weights_gib(model: torch.nn.Module) -> float:
    """Bytes of the distinct parameters and buffers (tied weights counted once)."""
    tensors = {t.data_ptr(): t for t in [*model.parameters(), *model.buffers()]}
    return sum(t.numel() * t.element_size() for t in tensors.values()) / GIB


def shard_gib(folder: Path) -> float | None:
    shards = [p.stat().st_size for p in folder.glob("*.safetensors")] if folder.is_dir() else []
    return max(shards) / GIB if shards else None


def measure(args) -> tuple[dict, object]:
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.init()
        torch.cuda.reset_peak_memory_stats()
    host_before = host_peak_gib()
    start = time.perf_counter()
    with AnonymousPeak() as anonymous:
        loaded = load_model(args.model, device=args.device, layers=args.layers, seed=args.seed)
        if cuda:
            torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    weights = weights_gib(loaded.model)
    result = {"load_s": round(seconds, 3), "weights_gib": round(weights, 3),
              "host_peak_before_gib": round(host_before, 3), "host_peak_gib": round(host_peak_gib(), 3),
              "host_peak_rise_gib": round(host_peak_gib() - host_before, 3),
              "largest_shard_gib": shard_gib(Path(args.model))}
    if anonymous.peak is not None and anonymous.before is not None:
        result.update(host_anonymous_before_gib=round(anonymous.before, 3),
                      host_anonymous_peak_gib=round(anonymous.peak, 3),
                      host_anonymous_rise_gib=round(anonymous.peak - anonymous.before, 3))
    if cuda:
        peak = torch.cuda.max_memory_allocated() / GIB
        result.update(device_peak_gib=round(peak, 3), device_allocated_gib=round(torch.cuda.memory_allocated() / GIB, 3),
                      device_peak_over_weights_gib=round(peak - weights, 3),
                      device_goal_met=peak <= weights + HEADROOM_GIB,
                      device_total_gib=round(torch.cuda.get_device_properties(0).total_memory / GIB, 3))
    return result, loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="preset, installed model, checkpoint directory or config.json")
    parser.add_argument("--layers", type=int, default=None, help="keep the first N layers")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0, help="random weights' seed (presets, config.json)")
    parser.add_argument("--save", type=Path, default=None, help="also save the loaded model here as a checkpoint")
    parser.add_argument("--shard-size", default="2GB", help="largest shard --save writes")
    parser.add_argument("--out", type=Path, required=True, help="JSON result file")
    args = parser.parse_args()
    result, loaded = measure(args)
    result["config"] = {**vars(args), "out": str(args.out), "save": str(args.save) if args.save else None}
    if args.save is not None:
        start = time.perf_counter()
        loaded.model.save_pretrained(args.save, max_shard_size=args.shard_size)
        loaded.tokenizer.save_pretrained(args.save)
        result["save_s"] = round(time.perf_counter() - start, 3)
    result["environment"] = environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source)
    write_json_atomic(args.out, result)
    record_result(args.out, shows="a model load's wall time, peak host and device memory against the weights' size",
                  environment=result["environment"])
    print({key: value for key, value in result.items() if key not in ("environment", "config")}, flush=True)


if __name__ == "__main__":
    main()
