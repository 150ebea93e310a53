"""Every study table fits an 80-column terminal without wrapping a number or a typical module path."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from canvaslab.reports.batch_study import batch_study_table
from canvaslab.reports.names import compact_location, compact_module_path
from canvaslab.reports.order_metrics import order_metrics_tables
from canvaslab.reports.vocab_scan import vocab_scan_table

ROOT = Path(__file__).resolve().parents[2]
H200_STUDY = ROOT / "benchmarks" / "results" / "h200-batch-study" / "h200_batch_study_real_shapes_6l_bf16.json"
REGIMES = ("math", "code_completion", "code_synthesis", "factual", "open_ended", "json")


def render(*tables, width: int = 80) -> list[str]:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))
    for table in tables:
        console.print(table)
    return console.export_text().splitlines()


def test_compact_module_paths():
    assert compact_module_path("model.encoder.language_model.layers.0.self_attn.q_proj::linear") == \
        "enc.L0.attn.q_proj:linear"
    assert compact_module_path("model.decoder.layers.12.post_feedforward_layernorm") == "dec.L12.post_ffn_ln"
    assert compact_module_path("model.decoder.self_conditioning.pre_norm") == "dec.selfcond.pre_norm"
    assert compact_module_path("model.decoder.layers.3.mlp.experts") == "dec.L3.mlp.experts"
    # only whole components are shortened
    assert compact_module_path("model.decoder.sublayers.3") == "dec.sublayers.3"
    assert compact_location("canvas 0 encoder", "model.encoder.language_model.layers.2.input_layernorm::mean") == \
        "c0 enc.L2.in_ln:mean"
    assert compact_location("canvas 1 pass 7", "model.decoder.layers.0.router.proj") == "c1 p7 dec.L0.router.proj"


def _run(prompt_id: str, batch: int, call: str, text_changed: bool, stop_changed: bool) -> dict:
    return {"prompt_id": prompt_id, "batch_size": batch, "first_divergence": {"pass": "canvas 0 pass 13", "call": call},
            "origin": {"name": call, "inputs_identical": True}, "router_scores_changed_pct": 0.390625,
            "final_logits_changed_pct": 99.84375, "passes_matching": 12, "passes_total": 48,
            "text_changed": text_changed, "stop_changed": stop_changed}


def test_batch_study_table_fits_80_columns_with_paths_on_one_line():
    study = json.loads(H200_STUDY.read_text())
    long_call = "model.decoder.layers.29.post_attention_layernorm::mean"
    study["runs"].append(_run("builtin-15", 4096, long_call, True, True))
    lines = render(batch_study_table(study))
    assert max(map(len, lines)) <= 80
    text = "\n".join(lines)
    for header in ("prompt", "B", "first divergence", "router", "logits", "changed", "4096", "text, stop"):
        assert header in text
    for run in study["runs"]:  # each first divergence is printed whole, on one line
        first = run["first_divergence"]
        assert compact_location(first["pass"], first["call"]) in text
    wide = "\n".join(render(batch_study_table(study, wide=True), width=250))
    assert long_call in wide and "passes" in wide


def _regime(index: int) -> dict:
    return {"n_generations": 1000, "tau_b": -0.123, "tau_b_ci": [-0.456, -0.012], "block_tau": {"16": -0.5},
            "control_tau": -0.051, "tokens_per_call": 12.3, "same_call_fraction": 0.75, "unaccept_events": 10.5,
            "accept_calls": {"mean": 123.4, "budget": 256}, "commit_entropy_mean": 1.2345,
            "accuracy": 0.5 if index else None, "auroc": 0.61, "auroc_ci": [-0.123, 0.999]}


def test_order_tables_fit_80_columns_without_wrapping_a_number():
    metrics = {"n_generations": 6000, "regimes": {name: _regime(i) for i, name in enumerate(REGIMES)},
               "pooled_auroc": {"value": 0.6, "n": 6000, "simpson_prone": False},
               "baseline": {"regimes": {name: {"accuracy": 0.5} for name in REGIMES}}}
    tables = order_metrics_tables(metrics)
    lines = render(*tables)
    assert max(map(len, lines)) <= 80
    text = "\n".join(lines)
    headers = ("regime", "n", "tau_b", "tau16", "control", "tok/call", "same", "unacc", "calls", "H", "acc", "AUROC")
    for value in (*headers, "[-0.456, -0.012]", "[-0.123, 0.999]", "123.4/256", "code_completion", "AR acc", "0.50"):
        assert value in text  # nothing cropped, nothing wrapped
    assert len(order_metrics_tables(metrics, wide=True)) == 1


def test_the_order_table_says_how_many_generations_tau_b_rests_on():
    """A regime whose answers mostly commit in one call has tau_b for a few generations only: the table must
    not let its mean (and CI) read as one over all the regime's generations."""
    json_regime = {**_regime(1), "n_generations": 100, "undefined": {"tau_b": {"n": 98, "reasons": {}}}}
    metrics = {"n_generations": 200, "regimes": {"json": json_regime, "math": {**_regime(1), "n_generations": 100}},
               "pooled_auroc": {"value": 0.6, "n": 200, "simpson_prone": False}}
    lines = render(*order_metrics_tables(metrics))
    assert max(map(len, lines)) <= 80
    text = "\n".join(lines)
    assert "n=2" in text and "n=100" in text


def test_vocab_scan_table_fits_80_columns_and_shows_each_measure():
    report = {"tokenizer": "gemma3", "vocab_size": 262144, "unused_count": 6241, "canvas_length": 256,
              "unused_id_blocks": [[6, 99], [256000, 262143]], "expected_unused_per_canvas": 6.09,
              "corpus": {"files": ["runs/corpus.txt"], "tokens_scanned": 12345678, "unused_occurrences_total": 3,
                         "unused_occurrences": [{"token": "<unused0>", "id": 6, "count": 3}],
                         "tokens_per_second": 543210.4}}
    lines = render(vocab_scan_table(report))
    assert max(map(len, lines)) <= 80
    text = "\n".join(lines)
    for value in ("262,144", "6,241", "6-99, 256000-262143", "6.09", "12,345,678", "<unused0> (id 6)", "543,210"):
        assert value in text
