"""The card's own limits and a model's pass limits on it: the GPU's measured memory bandwidth (a device-to-device
copy, bytes read and written) and bf16 matrix-product peak (8192 x 8192 x 8192 on random data), then for each
depth the two floors of one denoising pass per row: reading the decoder's weights once (the B=1 limit: at
B=1 the canvas's 256 tokens x top-8 experts touch nearly every expert) and the bf16 compute of one row's
canvas through the decoder and the output head (the large-B limit: projections, the top-k experts' products,
attention over prompt + canvas). With ``--speed``, throughput.py results are set against them: steady-state
ms per row-pass over the limit for its batch size. On a CPU the measurements shrink to toy sizes (a dry run).

    python benchmarks/card_limits.py --model real-shapes --layers 6,30 --device cuda --out OUT/limits.json
    python benchmarks/card_limits.py --model real-shapes --layers 6,30 --device cuda --out OUT/limits.json \\
        --speed OUT/throughput_6l.json OUT/throughput_30l.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from canvaslab.environment import environment_fingerprint, record_result
from canvaslab.io import read_json, write_json_atomic
from canvaslab.models import anatomy, load_model

LARGE_BATCH = 32  # from here on a pass is compute-bound: its figure is set against the compute limit


def timed_ms(work, device: torch.device, repeats: int, warmups: int = 3) -> float:
    for _ in range(warmups):
        work()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            work()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            start_s = time.perf_counter()
            work()
            times.append(1000 * (time.perf_counter() - start_s))
    return statistics.median(times)


def measure_card(device: torch.device) -> dict:
    cuda = device.type == "cuda"
    copy_bytes, side = (4 * 2 ** 30, 8192) if cuda else (2 ** 24, 256)
    source = torch.empty(copy_bytes // 2, dtype=torch.bfloat16, device=device)
    target = torch.empty_like(source)
    copy_ms = timed_ms(lambda: target.copy_(source), device, repeats=20)
    del source, target
    a, b = (torch.randn(side, side, dtype=torch.bfloat16, device=device) for _ in range(2))
    matmul_ms = timed_ms(lambda: a @ b, device, repeats=10)
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    return {"device": name, "copy_gb_s": 2 * copy_bytes / copy_ms / 1e6, "copy_bytes": copy_bytes,
            "bf16_matmul_tflop_s": 2 * side ** 3 / matmul_ms / 1e9, "matmul_side": side,
            "memory_gib": torch.cuda.get_device_properties(device).total_memory / 2 ** 30 if cuda else None}


def pass_cost(model, prompt_tokens: int) -> dict:
    """Bytes of weights one decoder pass reads and bf16 flops of one row's canvas through it."""
    text = model.config.text_config
    canvas = model.config.canvas_length
    layers = anatomy.decoder_layers(model)
    head = anatomy.lm_head(model).weight
    weight_bytes = head.numel() * head.element_size()
    flops = 2 * canvas * head.numel()
    for layer_type, layer in zip(text.layer_types, layers):
        for name, parameter in layer.named_parameters():
            weight_bytes += parameter.numel() * parameter.element_size()
            share = text.top_k_experts / text.num_experts if ".experts." in f".{name}" else 1.0
            flops += 2 * canvas * parameter.numel() * share
        full = layer_type == "full_attention"
        context = prompt_tokens + canvas if full else min(prompt_tokens + canvas, text.sliding_window)
        queries = layer.self_attn.q_proj.out_features  # heads x head dim (the full-attention layers' differ)
        flops += 4 * canvas * context * queries  # the scores and their weighted sum of values
    return {"layers": len(layers), "canvas_tokens": canvas, "prompt_tokens": prompt_tokens,
            "weight_gb_per_pass": weight_bytes / 1e9, "gflop_per_row_pass": flops / 1e9}


def limits(card: dict, cost: dict) -> dict:
    return {**cost, "weight_read_ms": cost["weight_gb_per_pass"] / card["copy_gb_s"] * 1000,
            "compute_ms_per_row": cost["gflop_per_row_pass"] / card["bf16_matmul_tflop_s"]}


def against_limits(speed_files: list[Path], by_layers: dict[int, dict]) -> list[dict]:
    """Each throughput.py row's steady-state ms per row-pass over its limit (B=1: the weight read; B >= 32:
    the compute; between: both shown)."""
    rows = []
    for path in speed_files:
        result = read_json(path)
        layers = result["environment"]["model_source"]["layers"]
        limit = by_layers.get(layers)
        for run in result["runs"]:
            ms = run.get("steady_pass_ms_per_row_step")
            row = {"file": path.name, "layers": layers, "mode": run["mode"], "batch": run["batch"],
                   "steady_ms_per_row_pass": ms, "pass_ms_per_row_step": run.get("pass_ms_per_row_step"),
                   "peak_memory_gib": run.get("peak_memory_gib")}
            if limit and ms:
                row["vs_weight_read_limit"] = ms / (limit["weight_read_ms"] / run["batch"])
                row["vs_compute_limit"] = ms / limit["compute_ms_per_row"]
                row["bound"] = "weight read" if run["batch"] == 1 else "compute" if run["batch"] >= LARGE_BATCH else "-"
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="preset, installed model, checkpoint directory or config.json")
    parser.add_argument("--layers", default="", help="comma-separated depths (presets); default: the model's own")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--prompt-tokens", type=int, default=16, help="prompt length the attention limit assumes")
    parser.add_argument("--speed", type=Path, nargs="*", default=[], help="throughput.py results to set against")
    parser.add_argument("--out", type=Path, required=True, help="JSON result file")
    args = parser.parse_args()
    device = torch.device(args.device)
    card = measure_card(device)
    by_layers = {}
    for depth in [int(d) for d in args.layers.split(",") if d] or [None]:
        model = load_model(args.model, device="meta", layers=depth, dtype="bfloat16").model
        cost = limits(card, pass_cost(model, args.prompt_tokens))
        by_layers[cost["layers"]] = cost
    result = {"card": card, "limits": list(by_layers.values()), "speed": against_limits(args.speed, by_layers),
              "config": {**vars(args), "out": str(args.out), "speed": [str(p) for p in args.speed]},
              "environment": environment_fingerprint(device=device)}
    write_json_atomic(args.out, result)
    record_result(args.out, shows="the card's measured bandwidth and bf16 matmul peak, the model's pass limits on it "
                  "and (--speed) steady-state pass times as ratios to them", environment=result["environment"])
    print(card, flush=True)
    for entry in [*result["limits"], *result["speed"]]:
        print({k: round(v, 3) if isinstance(v, float) else v for k, v in entry.items()}, flush=True)


if __name__ == "__main__":
    main()
