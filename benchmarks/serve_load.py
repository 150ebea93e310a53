"""The serving proof under load: `canvaslab serve`'s app under uvicorn on localhost, fixed probe requests answered
alone, then again amid C concurrent clients' random traffic (random prompts of random lengths, max_tokens, seeds
and n; completions, chat and streams) for each C. Per mode and batching (continuous: rows join and leave at pass
boundaries; static: whole batches): how many probe answers differ from their answers alone (all bytes but id and
created), requests/s, completion and canvas tokens/s, latency p50/p99, a stream's time to its first chunk p50/p99
and the batch (static) or pass (continuous) sizes.

With ``--side-by-side`` (CPU) the batchings of each mode run at the same time, each in its own process pinned to
its own core with one intra-op thread, so whatever else loads the machine loads the arms being compared alike.

    python benchmarks/serve_load.py --model mini --dtype float32 --modes invariant,stock \\
        --batchings continuous,static --levels 1,4,16,64 --steps 8 --repeats 1 --max-tokens 64 --out OUT
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from canvaslab.choices import BATCHINGS, MODES
from canvaslab.environment import environment_fingerprint, record_result
from canvaslab.io import read_json, write_json_atomic
from canvaslab.models import load_model
from canvaslab.serving import Engine, ServeSettings, create_app, running_server
from canvaslab.serving.loadtest import default_probes, probe_under_load


def whole_numbers(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers separated by commas") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give numbers of 1 or more")
    return values


def names_among(choices: tuple[str, ...], what: str):
    def names(text: str) -> list[str]:
        values = [part.strip() for part in text.split(",") if part.strip()]
        bad = [value for value in values if value not in choices]
        if bad or not values:
            raise argparse.ArgumentTypeError(f"{text!r}: give {what} among {', '.join(choices)}")
        return values

    return names


async def measure(url: str, engine: Engine, levels: list[int], budget: int, probes, repeats: int, seed: int) -> dict:
    limits = httpx.Limits(max_connections=max(levels) + len(probes) + 8, max_keepalive_connections=None)
    async with httpx.AsyncClient(base_url=url, timeout=3600, limits=limits) as client:
        return await probe_under_load(client, engine.settings.model, levels, budget=budget, probes=probes,
                                      repeats=repeats, seed=seed, canvas_length=engine.canvas_length,
                                      batch_sizes=lambda: engine.batch_sizes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="preset, installed model, checkpoint directory or config.json")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"))
    parser.add_argument("--layers", type=int, default=None, help="keep the first N layers (presets)")
    parser.add_argument("--modes", type=names_among(MODES, "modes"), default=["invariant", "stock"],
                        help="comma-separated, run in order")
    parser.add_argument("--batchings", type=names_among(BATCHINGS, "batchings"), default=["continuous", "static"],
                        help="comma-separated, run in order for each mode")
    parser.add_argument("--levels", type=whole_numbers, default=[1, 4, 16, 64],
                        help="numbers of concurrent other clients, comma-separated (default 1,4,16,64)")
    parser.add_argument("--steps", type=int, default=None, help="max denoising steps per canvas (default: the model's)")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="the probes' max_tokens and the other clients' largest (default: the model's budget)")
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--batch-window-ms", type=int, default=10)
    parser.add_argument("--max-queue", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=2, help="times each probe is sent at each level")
    parser.add_argument("--seed", type=int, default=0, help="the other clients' random requests")
    parser.add_argument("--side-by-side", action="store_true",
                        help="CPU: run each mode's batchings at once, one process pinned to one core each")
    parser.add_argument("--core", type=int, default=None, help=argparse.SUPPRESS)  # an arm's core (side by side)
    parser.add_argument("--out", type=Path, required=True, help="result folder: writes serve_load.json there")
    args = parser.parse_args()
    if args.side_by_side:
        side_by_side(parser, args)
        return
    if args.core is not None:
        pin_to_core(args.core)

    loaded = load_model(args.model, dtype=args.dtype, device=args.device, layers=args.layers)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "serve_load.json"
    result = {"environment": environment_fingerprint(loaded.model, loaded.device, model_source=loaded.source),
              "config": config_of(args), "runs": {}}
    for mode, batching in [(mode, batching) for mode in args.modes for batching in args.batchings]:
        name = f"{mode}/{batching}"
        settings = ServeSettings(args.model, mode=mode, max_batch=args.max_batch, batch_window_ms=args.batch_window_ms,
                                 max_queue=args.max_queue, steps=args.steps, batching=batching)
        engine = Engine(loaded, settings)
        budget = min(args.max_tokens or engine.budget, engine.budget)
        probes = [dataclasses.replace(probe, body={"max_tokens": budget, **probe.body}) for probe in default_probes()]
        started = time.perf_counter()
        with running_server(create_app(engine)) as url:
            measured = asyncio.run(measure(url, engine, args.levels, budget, probes, args.repeats, args.seed))
        measured["seconds"] = time.perf_counter() - started
        result["runs"][name] = measured
        write_json_atomic(path, result)
        # each run recorded at once: a run cut short keeps the ones done, with their manifest
        record_result(path, shows=SHOWS, environment=result["environment"])
        print_levels(name, measured)
    print_summary(result)


SHOWS = ("probe answers of `canvaslab serve` alone and amid concurrent random traffic per mode and batching: how many "
         "differ, requests/s, completion and canvas tokens/s, latency p50/p99, time to a stream's first chunk p50/p99 "
         "and batch or pass sizes")


def config_of(args: argparse.Namespace) -> dict:
    return {key: value for key, value in vars(args).items() if key not in ("out", "core")}


def print_levels(name: str, measured: dict) -> None:
    for level in measured["levels"]:
        print({"run": name, **{key: level[key] for key in (
            "concurrency", "probe_answers", "differing", "requests", "errors", "requests_per_s", "tokens_per_s",
            "canvas_tokens_per_s", "latency_p50_s", "latency_p99_s", "first_chunk_p50_s", "batch_sizes")}},
              flush=True)


def print_summary(result: dict) -> None:
    print({name: {"differing": measured["differing"], "probe_answers": measured["probe_answers"]}
           for name, measured in result["runs"].items()})


def pin_to_core(core: int) -> None:
    """This process on one core with one intra-op thread (an arm of a side-by-side run)."""
    import torch

    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)


def side_by_side(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Each mode's batchings at once, one process per batching, each pinned to its own core; one result file."""
    cores = sorted(os.sched_getaffinity(0))
    if args.device != "cpu":
        parser.error("--side-by-side pins CPU cores: use it with --device cpu")
    if len(cores) < len(args.batchings):
        parser.error(f"--side-by-side needs a core per batching ({len(args.batchings)}); this process has {len(cores)}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "serve_load.json"
    result = {"config": config_of(args), "runs": {},
              "side_by_side": {"cores": cores[:len(args.batchings)], "torch_threads_per_arm": 1}}
    with tempfile.TemporaryDirectory(dir=args.out) as scratch:
        for mode in args.modes:
            arms = {batching: Path(scratch, f"{mode}-{batching}") for batching in args.batchings}
            processes = [subprocess.Popen(arm_command(args, mode, batching, core, folder))
                         for core, (batching, folder) in zip(cores, arms.items())]
            if any(process.wait() != 0 for process in processes):
                raise SystemExit(f"an arm of mode {mode} failed (see its output above)")
            for batching, folder in arms.items():
                arm = read_json(folder / "serve_load.json")
                result.setdefault("environment", arm["environment"])
                result["runs"].update(arm["runs"])
            write_json_atomic(path, result)
            record_result(path, shows=SHOWS + "; the batchings of a mode run at once, one pinned core each",
                          environment=result["environment"])
    print_summary(result)


def arm_command(args: argparse.Namespace, mode: str, batching: str, core: int, out: Path) -> list[str]:
    command = [sys.executable, str(Path(__file__).resolve()), "--model", args.model, "--device", args.device,
               "--dtype", args.dtype, "--modes", mode, "--batchings", batching,
               "--levels", ",".join(map(str, args.levels)), "--max-batch", str(args.max_batch),
               "--batch-window-ms", str(args.batch_window_ms), "--max-queue", str(args.max_queue),
               "--repeats", str(args.repeats), "--seed", str(args.seed), "--core", str(core), "--out", str(out)]
    for flag, value in (("--layers", args.layers), ("--steps", args.steps), ("--max-tokens", args.max_tokens)):
        if value is not None:
            command += [flag, str(value)]
    return command


if __name__ == "__main__":
    main()
