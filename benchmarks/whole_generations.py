"""Complete generate calls as a user runs them: latency, requests/s, canvas tokens/s, time to the first canvas.

For each prompt length (``--prompt-lengths``: prompts of exactly that many token ids, drawn with ``--seed``
from the tokenizer's ordinary vocabulary, a different prompt per row) and each batch size, every mode generates
with the model's own budget and stopping rule (``--steps`` overrides the passes per canvas). Modes alternate
call by call: one warm-up round (reported apart as ``first_call_s``: it pays for compilation, autotuning and
first allocations), then ``--repeats`` timed rounds. Medians over the timed calls of each mode:

- ``latency_s`` per call (device work included), ``requests_per_s`` (B / latency), ``canvas_tokens_per_s``
  (rows x canvases run x canvas length, per second) and ``passes`` (decoder passes the call ran);
- ``time_to_first_canvas_s``: from the call's start to the accept decision of the first canvas's last pass,
  when the batch's first canvas is final (every row's first canvas completes at once in DiffusionGemma's
  loop). It comes from generate's observer hook (``on_accept``) and the encoder's call per canvas;
- ``outside_passes_share``: the part of a call outside its decoder passes (a canvas's passes run from its
  first decoder call to its last accept decision): set-up, prompt encoding (``prompt_encoding_s``, also
  reported alone), each canvas's preparation, and assembling the output;
- ``peak_memory_gib``: torch.cuda.max_memory_allocated over the mode's calls in the cell (null on a CPU).

The marks are CUDA events recorded on the current stream (no synchronisation inside the call, so it runs as
unobserved), or ``time.perf_counter`` on a CPU. profile_generate.py's phase timer is not used: it synchronises
at every decoder call, and a pass replayed from a CUDA graph calls no module. An observer's only cost here is
a timestamp, but in stock and rowwise modes attaching one also makes the runner catch the sampler's entropy
around ``accept_canvas`` (tracer_overhead.py measures what a full observer costs).

A mode that runs out of GPU memory in a cell is recorded as ``{"oom": true}`` and not tried at larger batch
sizes for that prompt length; ``largest_batch`` lists the largest batch size each mode finished. Cells not
started when ``--budget-s`` is spent are recorded as skipped. The JSON is rewritten after every cell.

    python benchmarks/whole_generations.py --model real-shapes --layers 6 --device cuda \\
        --out OUT/whole_generations_6l.json
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from canvaslab.choices import DTYPES, MODES
from canvaslab.environment import environment_fingerprint, record_result
from canvaslab.errors import CanvaslabError
from canvaslab.invariant import replaced_ops
from canvaslab.io import write_json_atomic
from canvaslab.models import anatomy, load_model
from canvaslab.studies.unused_tokens.token_pools import excluded_ids
from canvaslab.studies.unused_tokens.vocab_scan import find_unused_tokens
from throughput import decoder_passes  # benchmarks/ (the script's own folder is on sys.path)
from tracer_overhead import timed_generate

TIMED = ("latency_s", "requests_per_s", "canvas_tokens_per_s", "time_to_first_canvas_s", "passes", "canvases",
         "graph_replays", "prompt_encoding_s", "decoder_passes_s", "outside_passes_s", "outside_passes_share")


# ---- options -------------------------------------------------------------------------------------------------

def whole_numbers(text: str) -> list[int]:
    """A comma-separated list of whole numbers of at least 1."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers separated by commas") from None
    if any(value < 1 for value in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be 1 or more")
    return values


def mode_names(text: str) -> list[str]:
    modes = text.split(",")
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown or len(set(modes)) != len(modes):
        raise argparse.ArgumentTypeError(f"{text!r}: distinct modes from {', '.join(MODES)}")
    return modes


def whole_number(minimum: int):
    """An argparse type: one whole number of at least ``minimum``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r}: must be {minimum} or more")
        return value
    return parse


def seconds(text: str) -> float:
    """A number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be 0 or more")
    return value


def parser() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--model", default="tiny", help="preset, installed model, checkpoint directory or config.json")
    options.add_argument("--layers", type=whole_number(1), default=None, help="keep the first N layers (presets)")
    options.add_argument("--device", default="cpu")
    options.add_argument("--dtype", default="auto", choices=DTYPES)
    options.add_argument("--prompt-lengths", type=whole_numbers, default=[64, 512, 2048],
                         help="comma-separated prompt lengths in tokens (default 64,512,2048)")
    options.add_argument("--batch-sizes", type=whole_numbers, default=[1, 8, 32, 128],
                         help="comma-separated (default 1,8,32,128)")
    options.add_argument("--modes", type=mode_names, default=["invariant", "stock"],
                         help=f"comma-separated, from {', '.join(MODES)} (default invariant,stock)")
    options.add_argument("--repeats", type=whole_number(1), default=3, help="timed rounds after the warm-up round")
    options.add_argument("--steps", type=whole_number(1), default=None,
                         help="max denoising passes per canvas (default: the model's own)")
    options.add_argument("--budget-s", type=seconds, default=None,
                         help="wall-clock seconds from the start; cells not started by then are skipped")
    options.add_argument("--seed", type=whole_number(0), default=0, help="draws the prompts and seeds generate")
    options.add_argument("--out", type=Path, required=True, help="JSON result file (rewritten after every cell)")
    return options


# ---- prompts -------------------------------------------------------------------------------------------------

def ordinary_ids(loaded) -> np.ndarray:
    """The ids a prompt is drawn from: the tokenizer's, less special ids, the generation's eos and pad ids and
    ``<unusedN>`` entries."""
    size = min(len(loaded.tokenizer), loaded.vocab_size)
    ordinary = np.ones(size, dtype=bool)
    for token_id in [*excluded_ids(loaded.tokenizer, loaded.generation_defaults, size),
                     *find_unused_tokens(loaded.tokenizer).ids]:
        if token_id < size:
            ordinary[token_id] = False
    return np.flatnonzero(ordinary)


def prompt_rows(ordinary: np.ndarray, length: int, batch: int, seed: int) -> list[list[int]]:
    """``batch`` prompts of exactly ``length`` ids; row r is the same at every batch size."""
    return [np.random.default_rng([seed, length, row]).choice(ordinary, size=length).tolist() for row in range(batch)]


# ---- one observed call ---------------------------------------------------------------------------------------

class CallMarks:
    """Timestamps in one generate call: its start, the encoder's start and end (once per canvas), the first
    decoder call after each encoding, and every accept decision (generate's ``on_accept`` observer hook).
    On CUDA a mark is an event on the current stream: it is reached when the work queued before it is done."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: list[tuple[str, object]] = []

    def mark(self, label: str) -> None:
        if self.cuda and torch.cuda.is_current_stream_capturing():
            return  # a pass being captured into a CUDA graph: an event there would be part of the graph
        if self.cuda:
            stamp = torch.cuda.Event(enable_timing=True)
            stamp.record()
        else:
            stamp = time.perf_counter()
        self.marks.append((label, stamp))

    def on_accept(self, **_decision) -> None:
        self.mark("accept")

    @contextlib.contextmanager
    def watching(self, model):
        encoder, decoder = anatomy.encoder(model), anatomy.decoder(model)
        handles = [encoder.register_forward_pre_hook(lambda *_: self.mark("encoder start")),
                   encoder.register_forward_hook(lambda *_: self.mark("encoder end")),
                   decoder.register_forward_pre_hook(self.first_pass)]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()

    def first_pass(self, *_) -> None:
        """The canvas's first decoder call (the later ones need no mark, and replayed passes call no module)."""
        if self.marks[-1][0] == "encoder end":
            self.mark("pass")

    def seconds(self) -> list[tuple[str, float]]:
        """(label, seconds since the first mark), after the call's work is done."""
        start = self.marks[0][1]
        if self.cuda:
            return [(label, start.elapsed_time(stamp) / 1000) for label, stamp in self.marks]
        return [(label, stamp - start) for label, stamp in self.marks]


def canvases(marks: list[tuple[str, float]]) -> list[dict]:
    """The marks grouped per canvas: its encoding, its first decoder call and its accept decisions."""
    found = []
    for label, at in marks:
        if label == "encoder start":
            found.append({"encoder start": at, "accepts": []})
        elif label == "accept":
            found[-1]["accepts"].append(at)
        elif label != "start":
            found[-1][label] = at
    if not found or not all(canvas["accepts"] and "pass" in canvas for canvas in found):
        raise RuntimeError("generate ran a canvas without an encoder call, a decoder call or an accept decision: "
                           "this model's path bypasses the module hooks these timings rely on")
    return found


def call_numbers(marks, latency: float, passes: list[int], batch: int, canvas_length: int) -> dict:
    """One call's numbers (``passes``: decoder passes and CUDA graph replays, from throughput.decoder_passes)."""
    per_canvas = canvases(marks)
    encoding = sum(canvas["encoder end"] - canvas["encoder start"] for canvas in per_canvas)
    in_passes = sum(canvas["accepts"][-1] - canvas["pass"] for canvas in per_canvas)
    return {"latency_s": latency, "requests_per_s": batch / latency,
            "canvas_tokens_per_s": batch * len(per_canvas) * canvas_length / latency,
            "time_to_first_canvas_s": per_canvas[0]["accepts"][-1], "passes": passes[0], "canvases": len(per_canvas),
            "graph_replays": passes[1], "prompt_encoding_s": encoding, "decoder_passes_s": in_passes,
            "outside_passes_s": latency - in_passes, "outside_passes_share": (latency - in_passes) / latency}


def observed_call(loaded, prompts, mode: str, generation: dict, seed: int) -> dict:
    marks = CallMarks(loaded.device)
    with marks.watching(loaded.model), decoder_passes(loaded.model) as passes:
        marks.mark("start")
        latency = timed_generate(loaded, prompts, generation, [marks], seed=seed, mode=mode)
    return call_numbers(marks.seconds(), latency, passes, len(prompts), loaded.model.config.canvas_length)


# ---- one cell: a prompt length and batch size, every mode ----------------------------------------------------

def peak_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2 ** 30 if device.type == "cuda" else None


def call_or_oom(loaded, prompts, mode: str, generation: dict, seed: int) -> dict | None:
    """One call's numbers and its peak memory, or None if it ran out of GPU memory."""
    if loaded.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(loaded.device)
    try:
        numbers = observed_call(loaded, prompts, mode, generation, seed)
    except torch.cuda.OutOfMemoryError:
        numbers = None
    if numbers is None:  # outside the handler, so the failed call's frames (and tensors) are gone
        gc.collect()
        torch.cuda.empty_cache()
        return None
    return {**numbers, "peak_memory_gib": peak_gib(loaded.device)}


def medians(calls: list[dict], first: dict) -> dict:
    summary = {"calls": len(calls), "first_call_s": first["latency_s"]}
    summary.update({key: statistics.median(call[key] for call in calls) for key in TIMED})
    peaks = [call["peak_memory_gib"] for call in [first, *calls]]
    summary["peak_memory_gib"] = max(peaks) if None not in peaks else None
    summary["all_latency_s"] = [call["latency_s"] for call in calls]
    return summary


def run_cell(loaded, prompts, modes: list[str], generation: dict, repeats: int, seed: int) -> dict:
    """Every mode on the same prompts, alternating call by call: a warm-up round, then ``repeats`` rounds."""
    calls: dict[str, list[dict]] = {mode: [] for mode in modes}
    out_of_memory: set[str] = set()
    for _ in range(repeats + 1):
        for mode in modes:
            if mode in out_of_memory:
                continue
            numbers = call_or_oom(loaded, prompts, mode, generation, seed)
            if numbers is None:
                out_of_memory.add(mode)
            else:
                calls[mode].append(numbers)
    return {mode: {"oom": True} if mode in out_of_memory else medians(calls[mode][1:], calls[mode][0])
            for mode in modes}


# ---- the grid ------------------------------------------------------------------------------------------------

def largest_batch(cells: list[dict], modes: list[str]) -> dict:
    """Per mode and prompt length, the largest batch size that finished (None: none did)."""
    found = {mode: {} for mode in modes}
    for cell in cells:
        for mode in modes:
            finished = "latency_s" in cell.get("modes", {}).get(mode, {})
            best = found[mode].get(str(cell["prompt_length"]))
            found[mode][str(cell["prompt_length"])] = max(cell["batch_size"], best or 0) if finished else best
    return found


def grid_cell(loaded, args, ordinary, length: int, batch: int, ran_out: dict[str, int]) -> dict:
    """One cell. ``ran_out``: the batch size at which a mode ran out of memory at this length; such a mode is
    not tried at a larger batch."""
    live = [mode for mode in args.modes if mode not in ran_out]
    results = run_cell(loaded, prompt_rows(ordinary, length, batch, args.seed), live,
                       {"max_denoising_steps": args.steps}, args.repeats, args.seed) if live else {}
    ran_out.update({mode: batch for mode, result in results.items() if result.get("oom")})
    for mode in set(args.modes) - set(live):
        results[mode] = {"oom": True, "skipped": f"ran out of memory at batch size {ran_out[mode]}"}
    return {"prompt_length": length, "batch_size": batch, "modes": {mode: results[mode] for mode in args.modes}}


def describe(cell: dict) -> str:
    parts = [f"L={cell['prompt_length']} B={cell['batch_size']}"]
    for mode, result in cell.get("modes", {}).items():
        if "latency_s" in result:
            parts.append(f"{mode}: {result['latency_s']:.4f} s, {result['requests_per_s']:.2f} req/s, "
                         f"{result['canvas_tokens_per_s']:.0f} tok/s, "
                         f"first canvas {result['time_to_first_canvas_s']:.4f} s, "
                         f"outside passes {100 * result['outside_passes_share']:.1f}%")
        else:
            parts.append(f"{mode}: {result}")
    return "; ".join(parts) if "modes" in cell else f"{parts[0]}: {cell['skipped']}"


def write(args, loaded, environment: dict, settings: dict, cells: list[dict], started: float) -> None:
    config = {**{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "generation": settings,
              "canvas_length": loaded.model.config.canvas_length}
    write_json_atomic(args.out, {"benchmark": "whole_generations", "environment": environment, "config": config,
                                 "cells": cells, "largest_batch": largest_batch(cells, args.modes),
                                 "wall_s": time.monotonic() - started})


def main() -> None:
    started = time.monotonic()
    options = parser()
    args = options.parse_args()
    try:
        loaded = load_model(args.model, dtype=args.dtype, device=args.device, layers=args.layers)
    except CanvaslabError as error:
        options.error(str(error))
    settings = {**loaded.generation_defaults, **({"max_denoising_steps": args.steps} if args.steps else {})}
    environment = environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source,
                                          replaced_ops={mode: replaced_ops(mode) for mode in args.modes})
    ordinary, cells, ran_out = ordinary_ids(loaded), [], {}
    for length in args.prompt_lengths:
        ran_out.clear()
        for batch in args.batch_sizes:
            if args.budget_s is not None and time.monotonic() - started >= args.budget_s:
                cells.append({"prompt_length": length, "batch_size": batch, "skipped": "budget spent"})
            else:
                cells.append(grid_cell(loaded, args, ordinary, length, batch, ran_out))
            print(describe(cells[-1]), flush=True)
            write(args, loaded, environment, settings, cells, started)  # survives a cut-off
    record_result(args.out, shows="complete generate calls per prompt length, batch size and mode: latency, "
                  "requests/s, canvas tokens/s, time to the first canvas, passes, the share outside the decoder "
                  "passes, peak GPU memory, out-of-memory cells", environment=environment)


if __name__ == "__main__":
    main()
