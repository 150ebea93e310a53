"""The GPU evidence, read from its folders: proofs, op scan, speed, memory, whole generations and serving.

``real-shapes`` (the 26B-A4B shapes, random weights), bf16, on one H200 (``h200-*``) or one H100 (``h100-*``).
Each figure is read from the file the README row names; a claim with no file behind it is not printed.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from canvaslab.invariant.modes import mode_named
from canvaslab.reports.evidence.sources import result_file, table

RESULTS = Path("benchmarks/results")
H200 = RESULTS / "h200-invariant"
H200_BATCH_STUDY = RESULTS / "h200-batch-study" / "h200_batch_study_real_shapes_6l_bf16.json"
H200_OP_SCAN = RESULTS / "h200-op-scan" / "op_scan.json"
H200_GENERATIONS = RESULTS / "h200-30l-generations"
H100_RUN = RESULTS / "h100-gpu-run"
H100_PROOFS = RESULTS / "h100-gpu-run-proofs"
SERVE = {"h100-6l": RESULTS / "h100-serve-load", "h100-6l-continuous": RESULTS / "h100-serve-continuous-6l",
         "h100-6l-continuous-fused": RESULTS / "h100-serve-continuous-fused-6l",
         "h200-30l": RESULTS / "h200-serve-load-30l", "cpu-mini": RESULTS / "cpu-serve-load",
         "cpu-tiny": RESULTS / "cpu-serve-load-tiny", "cpu-tiny-continuous": RESULTS / "cpu-serve-continuous-tiny",
         "cpu-tiny-continuous-stock": RESULTS / "cpu-serve-continuous-tiny-stock",
         "cpu-mini-continuous": RESULTS / "cpu-serve-continuous-mini"}
_ENCODER_NORM_MEAN = re.compile(r"^model\.encoder\.language_model\.layers\.(\d+)\.[\w.]*norm::mean$")


def sizes_text(sizes: list[int]) -> str:
    """Batch sizes with each run of consecutive sizes of three or more written ``low-high``: ``1-8, 32, 64``."""
    runs: list[list[int]] = []
    for size in sorted(sizes):
        if runs and size == runs[-1][-1] + 1:
            runs[-1].append(size)
        else:
            runs.append([size])
    return ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs)


def gb_text(n_bytes: int) -> str:
    return f"{n_bytes / 1e9:.1f} GB"


def proof(root: Path, folder: Path) -> dict[str, Any]:
    """A batch-size study's summary, with its batch sizes and whether any batched row 0 was left-padded."""
    study = result_file(root, folder / "batch_study.json")
    return {**study["summary"], "batch_sizes": study["config"]["settings"]["batch_sizes"],
            "left_padded": any(run.get("left_padded") for run in study["runs"])}


def proof_text(summary: dict[str, Any], with_bytes: bool = True) -> str:
    """``27/27 passes identical (5.9 GB compared)`` where no run diverged, else ``2/2 diverged``."""
    if summary["diverged"]:
        return f"{summary['diverged']}/{summary['runs']} diverged"
    text = f"{summary['passes_matching']}/{summary['passes_total']} passes identical"
    return text + (f" ({gb_text(summary['bytes_compared'])} compared)" if with_bytes else "")


def needle_text(root: Path, *paths: Path) -> str:
    """Each needle run's batch, at its depth: ``identical at B = 64 and 128`` or where it differed."""
    runs = [(result_file(root, path), run) for path in paths for run in result_file(root, path)["runs"]]
    differing = [f"B={run['batch']}" for _, run in runs if not run["identical"]]
    batches = sorted({run["batch"] for _, run in runs})
    verdict = "identical" if not differing else f"different at {', '.join(differing)}"
    return f"{verdict} at B = {' and '.join(map(str, batches))}"


def needle_fillers(root: Path, *paths: Path) -> str:
    lengths = [n for path in paths for run in result_file(root, path)["runs"] for n in run["filler_lengths"]]
    counts = sorted({len(run["filler_lengths"]) for path in paths for run in result_file(root, path)["runs"]})
    return f"{' or '.join(map(str, counts))} fillers of {min(lengths):,}-{max(lengths):,} tokens"


def throughput(root: Path, path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """A ``throughput.py`` file's runs by (mode, batch size)."""
    return {(run["mode"], run["batch"]): run for run in result_file(root, path)["runs"]}


def _pass_ms(runs: dict[tuple[str, int], dict[str, Any]], mode: str, batch: int) -> str:
    run = runs.get((mode, batch))
    return "not run" if run is None else f"{run['pass_ms_per_row_step']:.2f}"


def first_difference(study: dict[str, Any]) -> str:
    """Where the diverged runs of a batch-size study first differ: how many in an encoder RMSNorm's ``mean``."""
    first = [_ENCODER_NORM_MEAN.match(run["first_divergence"]["call"]) for run in study["runs"] if run["diverged"]]
    norms = [int(match[1]) for match in first if match]
    if not norms:
        return "outside the encoder's norms"
    return f"in an encoder RMSNorm's `mean` in {len(norms)} of {len(first)} runs (layers {min(norms)}-{max(norms)})"


def batch_study_row(root: Path) -> list[str]:
    study = result_file(root, H200_BATCH_STUDY)
    summary, settings = study["summary"], study["config"]["settings"]
    classes = summary["equivalence_classes"]
    where = f"first difference {first_difference(study)}"
    config = study["config"]
    return [f"batch-size study, {settings['mode']}, {config['layers']} layers, {len(config['prompts'])} prompts x "
            f"B = {sizes_text(settings['batch_sizes'])}",
            f"{summary['diverged']}/{summary['runs']} runs diverged, {summary['text_changed']}/{summary['runs']} texts "
            "changed, " + ("every batch size its own class" if all(len(c) == 1 for c in classes) else
                           f"classes `{classes}`") + f"; {where}", "`benchmarks/results/h200-batch-study/`"]


def op_scan_row(root: Path) -> list[str]:
    scans = {scan["mode"]: scan for scan in result_file(root, H200_OP_SCAN)["scans"]}
    stock, invariant = scans["stock"]["ops"], scans["invariant"]["ops"]
    split = [name for name, op in stock.items() if not op["invariant"]]
    held = sum(op["invariant"] for op in invariant.values())
    invariant_text = (f"one class for each of the {len(invariant)}" if held == len(invariant)
                      else f"one class for {held} of the {len(invariant)}")
    return [f"op scan, B = {sizes_text(scans['stock']['batch_sizes'])}",
            f"stock splits {len(split)} of the {len(stock)} ops ({'; '.join(f'`{name}`' for name in split)}); "
            f"invariant: {invariant_text}", "`benchmarks/results/h200-op-scan/`"]


def h200_proof_row(root: Path) -> list[str]:
    mixed, copies, stock = (proof(root, H200 / "callB/proof" / name)
                            for name in ("invariant_6l_mixed", "invariant_6l_copies", "stock_6l_mixed"))
    deep = proof(root, H200 / "callC/proof/invariant_30l_mixed")
    needles = (H200 / "callB/needle_6l.json", H200 / "callC/needle_30l.json")
    return [f"invariant proof, 6 layers, mixed prompts{' (row 0 left-padded)' if mixed['left_padded'] else ''}, "
            f"B = {sizes_text(mixed['batch_sizes'])}; needle: one prompt among {needle_fillers(root, *needles)}",
            f"{mixed['diverged']}/{mixed['runs']} runs diverged, {proof_text(mixed)}; copies "
            f"{proof_text(copies, False)}; "
            f"30 layers, B = {sizes_text(deep['batch_sizes'])}: {proof_text(deep, False)}; stock "
            f"{proof_text(stock)}; needle {needle_text(root, *needles)} at 6 and 30 layers",
            "`benchmarks/results/h200-invariant/`"]


def h200_throughput(root: Path) -> tuple[dict[tuple[str, int], dict[str, Any]], dict[tuple[str, int], dict[str, Any]]]:
    """The H200's runs at 6 and 30 layers by (mode, batch size).

    At 6 layers and B=1 the later call's 8-pass difference over 7 repeats replaces the 4-pass one: one slow call
    of three moved the 4-pass figure by 0.9 ms (``NOTES.md``, section 4).
    """
    files = ("callA/throughput_6l.json", "callA/throughput_6l_b64.json", "callB/throughput_6l_b1_steps8.json")
    six = {key: run for name in files for key, run in throughput(root, H200 / name).items()}
    return six, throughput(root, H200 / "callA/throughput_30l.json")


def speed_h200(root: Path) -> str:
    """The H200's ms per row-step of one pass, stock beside invariant, with each mode's peak memory."""
    rows = []
    for layers, runs in zip((6, 30), h200_throughput(root)):
        for batch in sorted({b for _, b in runs}):
            peaks = [f"{runs[(m, batch)]['peak_memory_gib']:.1f}" if (m, batch) in runs else "-"
                     for m in ("invariant", "stock")]
            rows.append([str(layers), str(batch), _pass_ms(runs, "stock", batch), _pass_ms(runs, "invariant", batch),
                         " / ".join(peaks)])
    return table(["layers", "B", "stock", "invariant", "peak GiB invariant / stock"], rows)


def h200_speed_row(root: Path) -> list[str]:
    six, deep = h200_throughput(root)
    tracer = result_file(root, H200 / "callA/tracer_overhead_fast.json")

    def cells(runs: dict, batches: tuple[int, ...]) -> str:
        return ", ".join(f"B={b} {_pass_ms(runs, 'invariant', b)} / {_pass_ms(runs, 'stock', b)}" for b in batches)
    peak = {mode: six[(mode, 32)]["peak_memory_gib"] for mode in ("invariant", "stock")}
    return ["speed, ms per row-step of one pass, invariant / stock; peak memory; commit tracer",
            f"6 layers: {cells(six, (1, 32, 64))}; 30 layers: {cells(deep, (1, 32))}; peak at 6 layers, B=32: "
            f"{peak['invariant']:.1f} GiB invariant, {peak['stock']:.1f} GiB stock; the commit tracer "
            f"{tracer['on_accept_pct_of_generate']:.2f}% of generate ({tracer['config']['layers']} layers, "
            f"B={tracer['config']['batch_size']})", "`benchmarks/results/h200-invariant/`"]


def generations(root: Path, folder: Path, *names: str) -> tuple[dict[str, Any], dict[tuple[int, int], dict[str, Any]]]:
    """A ``whole_generations.py`` run's config and its cells by (prompt length, batch size), over several files."""
    files = [result_file(root, folder / name) for name in names]
    cells = {(c["prompt_length"], c["batch_size"]): c["modes"] for f in files for c in f["cells"]}
    return files[0]["config"], cells


def _rate(modes: dict[str, Any], mode: str) -> str:
    cell = modes[mode]
    return "does not fit" if cell.get("oom") else f"{cell['requests_per_s']:.2f}"


GENERATION_FILES = {"h200-30l": (H200_GENERATIONS, "whole_generations_30l.json", "whole_generations_30l_b128.json"),
                    "h100-6l": (RESULTS / "h100-whole-generations", "whole_generations_6l.json")}


def generation_rates(cells: dict[tuple[int, int], dict[str, Any]]) -> tuple[int, list[int], dict[str, str]]:
    """The shortest prompts' length, their batch sizes, and per mode the requests/s at each (``does not fit``)."""
    short = min(length for length, _ in cells)
    batches = sorted(b for length, b in cells if length == short)
    return short, batches, {mode: "/".join(_rate(cells[(short, b)], mode) for b in batches)
                            for mode in ("invariant", "stock")}


def h200_generations_row(root: Path) -> list[str]:
    config, cells = generations(root, H200_GENERATIONS, *GENERATION_FILES["h200-30l"][1:])
    short, batches, per_mode = generation_rates(cells)
    deep = proof(root, H200_GENERATIONS / "proof")
    needle = needle_text(root, H200_GENERATIONS / "needle_30l.json")
    return [f"whole generations, {config['layers']} layers, one H200 ({config['generation']['max_denoising_steps']} "
            f"passes, prompts of {' and '.join(f'{n:,}' for n in config['prompt_lengths'])} tokens)",
            f"invariant {per_mode['invariant']} requests/s at B = {'/'.join(map(str, batches))} against stock "
            f"{per_mode['stock']} ({short}-token prompts); on the same code the proof {proof_text(deep, False)}, the "
            f"needle {needle}", "`benchmarks/results/h200-30l-generations/`"]


def serve_runs(root: Path, key: str) -> dict[str, dict[str, Any]]:
    """A ``serve_load.py`` file's runs by ``mode`` (one batching) or ``mode/batching``."""
    load = result_file(root, SERVE[key] / "serve_load.json")
    return load.get("modes") or load["runs"]


def serve_figures(run: dict[str, Any]) -> tuple[int, int, list[float]]:
    """Probe answers differing, probe answers, and the requests/s of each level."""
    levels = run["levels"]
    return (sum(len(level["differing"]) for level in levels), sum(level["probe_answers"] for level in levels),
            [level["requests_per_s"] for level in levels])


def rates_text(rates: list[float]) -> str:
    digits = 2 if max(rates) < 2 else 1  # a CPU's rates below 2 requests/s need the second digit
    return f"{min(rates):.{digits}f}-{max(rates):.{digits}f}"


def _serve_config(root: Path, key: str) -> dict[str, Any]:
    return result_file(root, SERVE[key] / "serve_load.json")["config"]


def serve_row(root: Path, key: str, card: str) -> list[str]:
    """One serve-load run: probe answers differing per mode (and batching), and the requests/s range of each."""
    runs, config = serve_runs(root, key), _serve_config(root, key)
    levels = config["levels"]
    cells = {name: serve_figures(run) for name, run in runs.items()}
    clients = f"{levels[0]}-{levels[-1]}" if len(levels) > 2 else " and ".join(map(str, levels))
    what = f"`canvaslab serve`, {config['layers']} layers, one {card}, {clients} concurrent clients"
    folder = f"`{SERVE[key].as_posix()}/`"
    if "batchings" not in config:
        (same, n_same, alone), (other, n_other, stock) = cells["invariant"], cells["stock"]
        return [what, f"probe answers differing from their answers alone: invariant {same} of {n_same}, stock "
                      f"{other} of {n_other}; {rates_text(alone)} against {rates_text(stock)} requests/s", folder]
    differing = "; ".join(f"{mode} " + ", ".join(f"{cells[f'{mode}/{b}'][0]} of {cells[f'{mode}/{b}'][1]} {b}"
                                                  for b in config["batchings"]) for mode in config["modes"])
    rates = " against ".join(f"{b} {rates_text(cells[f'invariant/{b}'][2])}" for b in config["batchings"])
    return [what + f", {' and '.join(config['batchings'])} batching",
            f"probe answers differing from their answers alone: {differing}; invariant {rates} requests/s", folder]


def _rate_text(value: float) -> str:
    """Three significant digits, trailing zeros kept: 0.562, 3.40, 11.9, 130, 1,659."""
    digits = 0 if value >= 100 else 1 if value >= 10 else 2 if value >= 1 else 3
    return f"{value:,.{digits}f}"


def serve_levels(root: Path, key: str) -> str:
    """One serve-load run, a row per mode (and batching) and level: probes, throughput, latency, batches."""
    runs = serve_runs(root, key)
    streaming = any("first_chunk_p50_s" in level for run in runs.values() for level in run["levels"])
    rows = []
    for name, run in runs.items():
        for level in run["levels"]:
            row = [name, str(level["concurrency"]), f"{len(level['differing'])} / {level['probe_answers']}",
                   str(level["requests"]), _rate_text(level["requests_per_s"]), _rate_text(level["tokens_per_s"])]
            if streaming:
                row.append(_rate_text(level["canvas_tokens_per_s"]))
            row.append(f"{_rate_text(level['latency_p50_s'])} / {_rate_text(level['latency_p99_s'])}")
            if streaming:
                row.append(f"{_rate_text(level['first_chunk_p50_s'])} / {_rate_text(level['first_chunk_p99_s'])}")
            sizes = sorted(level["batch_sizes"].items(), key=lambda item: int(item[0]))
            row.append(", ".join(f"{size} x {count}" for size, count in sizes))
            rows.append(row)
    header = ["run" if streaming else "mode", "other clients", "probe answers differing", "requests", "requests/s",
              "tokens/s"] + (["canvas tokens/s"] if streaming else []) + ["latency p50 / p99 (s)"] + (
        ["first chunk p50 / p99 (s)"] if streaming else []) + [
        "rows per batch or pass (size x count)" if streaming else "batches formed (rows x count)"]
    return table(header, rows)


def _limits(root: Path) -> tuple[dict[str, Any], dict[int, dict[str, Any]], dict[tuple[str, int, int], dict[str, Any]]]:
    limits = result_file(root, H100_RUN / "limits.json")
    return (limits["card"], {entry["layers"]: entry for entry in limits["limits"]},
            {(entry["mode"], entry["layers"], entry["batch"]): entry for entry in limits["speed"]})


def _invariant(mode: str) -> bool:
    """Whether a result file's mode name is the batch-invariant mode."""
    return mode_named(mode).batch_invariant


def _versus_limit(entry: dict[str, Any]) -> str:
    ratio = entry["vs_weight_read_limit"] if entry["bound"] == "weight read" else entry["vs_compute_limit"]
    return f"{ratio:.2f}x the {entry['bound'].replace(' ', '-')} limit"


def h100_speed_row(root: Path) -> list[str]:
    card, _, speed = _limits(root)
    built = result_file(root, H100_RUN / "load" / "load_30l.json")
    memory = result_file(root, H100_RUN / "memory_30l_b32.json")
    peak = max(phase["peak_since_previous_gib"] for phase in memory["phases"])
    cells = []
    for layers in sorted({layers for _, layers, _ in speed}):
        batches = sorted({b for mode, depth, b in speed if depth == layers and _invariant(mode)})
        cells.append(f"{layers} layers: " + ", ".join(
            f"B={b} {speed[('invariant', layers, b)]['steady_ms_per_row_pass']:.2f} "
            f"({_versus_limit(speed[('invariant', layers, b)])}) / "
            + (f"{speed[('stock', layers, b)]['steady_ms_per_row_pass']:.2f}" if ("stock", layers, b) in speed
               else "not run") for b in batches))
    return ["speed on one H100, ms per row-pass in steady state, invariant (its ratio to the card's measured limit) "
            "/ stock; memory at 30 layers",
            "; ".join(cells) + f"; 30 layers built: {built['weights_gib']:.2f} GiB of weights, device peak "
            f"{built['device_peak_gib']:.2f} GiB; B={memory['config']['batch_size']}, "
            f"{memory['longest_prompt']:,}-token prompts: {memory['outcome']}, peak {peak:.1f} GiB of "
            f"{card['memory_gib']:.1f}",
            "`benchmarks/results/h100-gpu-run/`"]


def gpu_tests_passed(root: Path, path: Path) -> str:
    """The pytest summary line's counts: ``91 passed``."""
    text = (root / path).read_text(encoding="utf-8")
    summary = re.findall(r"^=*\s*((?:\d+ (?:passed|failed|errors?|skipped)(?:, )?)+)", text, re.MULTILINE)
    return summary[-1].rstrip(", ") if summary else "no summary"


def h100_proof_row(root: Path) -> list[str]:
    mixed, deep, stock = (proof(root, H100_PROOFS / "proof" / name)
                          for name in ("invariant_6l_mixed", "invariant_30l_mixed", "stock_6l_mixed"))
    six, thirty = H100_PROOFS / "needle_6l.json", H100_PROOFS / "needle_30l.json"
    return [f"invariant proof on one H100, 6 layers, mixed prompts, B = {sizes_text(mixed['batch_sizes'])}; "
            f"30 layers, B = {sizes_text(deep['batch_sizes'])}",
            f"{proof_text(mixed)}; 30 layers {proof_text(deep)}; stock {proof_text(stock, False)}; needle "
            f"{needle_text(root, six)} at 6 layers and {needle_text(root, thirty)} at 30; GPU tests "
            f"{gpu_tests_passed(root, H100_PROOFS / 'gpu_tests.txt')}", "`benchmarks/results/h100-gpu-run-proofs/`"]


def readme_gpu(root: Path) -> str:
    """The README's GPU rows: the H200's studies, proofs, speed and serving, then the H100's."""
    rows = [batch_study_row(root), op_scan_row(root), h200_proof_row(root), h200_speed_row(root),
            h200_generations_row(root), serve_row(root, "h200-30l", "H200"), serve_row(root, "h100-6l", "H100"),
            serve_row(root, "h100-6l-continuous-fused", "H100"), h100_speed_row(root), h100_proof_row(root)]
    return table(["what", "result", "folder"], rows)


def gpu_values(root: Path) -> dict[str, str]:
    """The GPU figures that sentences and the evidence page's tables carry, by name."""
    mixed = proof(root, H200 / "callB/proof/invariant_6l_mixed")
    deep = proof(root, H200 / "callC/proof/invariant_30l_mixed")
    six = throughput(root, H200 / "callA/throughput_6l.json")
    needle = max(run["peak_memory_gib"] for run in result_file(root, H200 / "callC/needle_30l.json")["runs"])
    tracer = result_file(root, H200 / "callA/tracer_overhead_fast.json")
    scans = {scan["mode"]: scan["ops"] for scan in result_file(root, H200_OP_SCAN)["scans"]}
    held = sum(op["invariant"] for op in scans["invariant"].values())
    values = {"opscan.h200.stock-split": str(sum(not op["invariant"] for op in scans["stock"].values())),
              "opscan.h200.invariant-held": (f"each of the {held}" if held == len(scans["invariant"])
                                             else f"{held} of the {len(scans['invariant'])}"),
              "batch.h200.first-difference": first_difference(result_file(root, H200_BATCH_STUDY)),
              "gpu.h200.proof-6l.diverged": f"{mixed['diverged']}/{mixed['runs']}",
              "gpu.h200.proof-6l.passes": f"{mixed['passes_matching']}/{mixed['passes_total']}",
              "gpu.h200.proof-30l.passes": f"{deep['passes_matching']}/{deep['passes_total']}",
              "gpu.h200.needle-30l.peak": f"{needle:.1f}",
              "gpu.h200.6l.b32.invariant": f"{six[('invariant', 32)]['pass_ms_per_row_step']:.2f}",
              "gpu.h200.6l.b32.stock": f"{six[('stock', 32)]['pass_ms_per_row_step']:.2f}",
              "gpu.h200.tracer": f"{tracer['on_accept_pct_of_generate']:.2f}%"}
    proofs = (("invariant_6l_mixed", "callB"), ("invariant_6l_copies", "callB"), ("invariant_30l_mixed", "callC"),
              ("stock_6l_mixed", "callB"))
    for name, call in proofs:
        summary = proof(root, H200 / call / "proof" / name)
        values[f"gpu.h200.proof.{name}"] = proof_text(summary)
        values[f"gpu.h200.proof.{name}.classes"] = f"`{summary['equivalence_classes']}`"
    for layers, call in ((6, "callB"), (30, "callC")):
        runs = result_file(root, H200 / call / f"needle_{layers}l.json")["runs"]
        values[f"gpu.h200.needle-{layers}l.peaks"] = " and ".join(f"{run['peak_memory_gib']:.1f}" for run in runs)
    limits = RESULTS / "h200-pass-limits"
    for layers in (6, 30):
        for name in (f"throughput_{layers}l.json", f"throughput_{layers}l_b128.json"):
            for (mode, batch), run in throughput(root, limits / name).items():
                values[f"h200-limits.{layers}l.b{batch}.{mode}"] = f"{run['pass_ms_per_row_step']:.2f}"
    for (mode, batch), run in throughput(root, limits / "throughput_30l_one_repeat.json").items():
        values[f"h200-limits.30l-one-repeat.b{batch}.{mode}"] = f"{run['pass_ms_per_row_step']:.1f}"
    memory = result_file(root, limits / "memory_30l_b128.json")
    values["h200-limits.memory-30l-b128.peak"] = f"{max(p['peak_since_previous_gib'] for p in memory['phases']):.1f}"
    values["h200-limits.gpu-tests"] = gpu_tests_passed(root, limits / "gpu_tests.txt")
    for key, (folder, *names) in GENERATION_FILES.items():
        _, cells = generations(root, folder, *names)
        _, _, rates = generation_rates(cells)
        values.update({f"generations.{key}.{mode}": rate for mode, rate in rates.items()})
    return values


def h100_values(root: Path) -> dict[str, str]:
    """The H100 run's figures: the card's measured limits, loading, memory, speed, proofs, needles, GPU tests."""
    card, limits, speed = _limits(root)
    built = result_file(root, H100_RUN / "load" / "load_30l.json")
    checkpoint = result_file(root, H100_RUN / "load" / "checkpoint_6l.json")
    memory = result_file(root, H100_RUN / "memory_30l_b32.json")
    values = {"h100.card.copy": f"{card['copy_gb_s'] / 1000:.2f} TB/s",
              "h100.card.matmul": f"{card['bf16_matmul_tflop_s']:.0f} TFLOP/s",
              "h100.card.memory": f"{card['memory_gib']:.1f}",
              "h100.built-30l": f"{built['weights_gib']:.2f} GiB of weights, device peak "
                                f"{built['device_peak_gib']:.2f} GiB (+{built['device_peak_over_weights_gib']:.1f} "
                                f"GiB), {built['load_s']:.1f} s",
              "h100.checkpoint-6l.seconds": f"{checkpoint['load_s']:.1f} s",
              "h100.checkpoint-6l.device-peak": f"{checkpoint['device_peak_gib']:.2f} GiB",
              "h100.checkpoint-6l.host-rise": f"{checkpoint['host_peak_rise_gib']:.1f} GiB",
              "h100.memory-30l.peak": f"{max(phase['peak_since_previous_gib'] for phase in memory['phases']):.1f} GiB",
              "h100.gpu-tests": gpu_tests_passed(root, H100_PROOFS / "gpu_tests.txt")}
    for layers, limit in limits.items():
        values[f"h100.limit.{layers}l.weight-read"] = f"{limit['weight_read_ms']:.2f} ms"
        values[f"h100.limit.{layers}l.compute"] = f"{limit['compute_ms_per_row']:.3g} ms"
    for (mode, layers, batch), entry in speed.items():
        values[f"h100.speed.{layers}l.b{batch}.{mode}"] = f"{entry['steady_ms_per_row_pass']:.2f}"
        if _invariant(mode):
            values[f"h100.speed.{layers}l.b{batch}.ratio"] = _versus_limit(entry).split(" the ")[0]
    for name in ("invariant_6l_mixed", "invariant_30l_mixed", "stock_6l_mixed"):
        summary = proof(root, H100_PROOFS / "proof" / name)
        values[f"h100.proof.{name}"] = proof_text(summary)
        values[f"h100.proof.{name}.classes"] = f"`{summary['equivalence_classes']}`"
    for layers in (6, 30):
        runs = result_file(root, H100_PROOFS / f"needle_{layers}l.json")["runs"]
        values[f"h100.needle-{layers}l.peaks"] = " and ".join(f"{run['peak_memory_gib']:.1f}" for run in runs)
    return values


H100_ROUTING = RESULTS / "h100-routing-kernels"


def profile_batches(root: Path, path: Path) -> dict[int, dict[str, Any]]:
    """A steady-state profile's figures per batch size: ms per row-pass (step), kernels and ms of one replayed
    pass, and each listed kernel's ms and calls per pass."""
    found: dict[int, dict[str, Any]] = {}
    batch = None
    for line in (root / path).read_text(encoding="utf-8").splitlines():
        if match := re.match(r"## steady state batch=(\d+)", line):
            batch = int(match.group(1))
            found[batch] = {"kernels": {}}
        elif batch is None:
            continue
        elif match := re.match(r"\s+per row-pass: step ([\d.]+) ms", line):
            found[batch]["row_pass_ms"] = float(match.group(1))
        elif match := re.match(r"\s+all kernels\s+([\d.]+)\s+([\d.]+)", line):
            found[batch]["pass_ms"], found[batch]["launches"] = float(match.group(1)), int(float(match.group(2)))
        elif match := re.match(r"\s+([\d.]+)\s+([\d.]+)\s+.+?\s{2,}(\S+)$", line):
            found[batch]["kernels"].setdefault(match.group(3), (float(match.group(1)), float(match.group(2))))
    return found


def routing_values(root: Path) -> dict[str, str]:
    """The H100 run of the routing kernels: speed against the card's limits, kernels per pass from the profiles,
    the router kernel's share, proofs, op scan, needle, GPU tests, the 6-layer checkpoint's host memory."""
    limits = result_file(root, H100_ROUTING / "limits.json")
    values: dict[str, str] = {}
    for entry in limits["speed"]:
        key = f"h100-routing.speed.{entry['layers']}l.b{entry['batch']}.{entry['mode']}"
        values[key] = f"{entry['steady_ms_per_row_pass']:.2f}"
        if _invariant(entry["mode"]):
            values[key.replace(".invariant", ".ratio")] = _versus_limit(entry).split(" the ")[0]
    for layers in (6, 30):
        for batch, figures in profile_batches(root, H100_ROUTING / f"profile_{layers}l_steady.txt").items():
            prefix = f"h100-routing.profile.{layers}l.b{batch}"
            values[f"{prefix}.launches"] = f"{figures['launches']:,}"
            values[f"{prefix}.row-pass"] = f"{figures['row_pass_ms']:.2f}"
            router = figures["kernels"].get("_router_kernel")
            if router:
                values[f"{prefix}.router"] = f"{router[0]:.2f} ms in {router[1]:.0f} launches"
    for batch, figures in profile_batches(root, H100_RUN / "profile_30l_steady.txt").items():
        values[f"h100.profile.30l.b{batch}.launches"] = f"{figures['launches']:,}"
    for batch in (1, 32):  # the difference of the two depths' profiles over their 24 layers
        launches = [int(values[f"h100-routing.profile.{layers}l.b{batch}.launches"].replace(",", "")) for layers in (6, 30)]
        values[f"h100-routing.profile.per-layer.b{batch}"] = f"{(launches[1] - launches[0]) / 24:.1f}"
    for name in ("invariant_6l_mixed", "invariant_30l_mixed", "stock_6l_mixed"):
        values[f"h100-routing.proof.{name}"] = proof_text(proof(root, H100_ROUTING / "proof" / name))
    scans = {scan["mode"]: scan for scan in result_file(root, H100_ROUTING / "op_scan" / "op_scan.json")["scans"]}
    invariant = scans["invariant"]["ops"]
    held = sum(1 for entry in invariant.values() if len(entry["classes"]) == 1)
    values["h100-routing.op-scan"] = (f"{held} of {len(invariant)} ops one class at B = "
                                      f"{', '.join(map(str, scans['invariant']['batch_sizes']))}")
    values["h100-routing.op-scan.stock-split"] = str(sum(1 for entry in scans["stock"]["ops"].values() if len(entry["classes"]) > 1))
    runs = result_file(root, H100_ROUTING / "needle_6l.json")["runs"]
    values["h100-routing.needle-6l"] = ("identical" if all(run["identical"] for run in runs) else "differed") + \
        " at B = " + " and ".join(str(run["batch"]) for run in runs)
    values["h100-routing.gpu-tests"] = gpu_tests_passed(root, H100_ROUTING / "gpu_tests.txt")
    checkpoint = result_file(root, H100_ROUTING / "load" / "checkpoint_6l.json")
    values["h100-routing.checkpoint-6l.anonymous-rise"] = f"{checkpoint['host_anonymous_rise_gib']:.2f} GiB"
    values["h100-routing.checkpoint-6l.largest-shard"] = f"{checkpoint['largest_shard_gib']:.2f} GiB"
    values["h100-routing.checkpoint-6l.rss-rise"] = f"{checkpoint['host_peak_rise_gib']:.1f} GiB"
    return values
