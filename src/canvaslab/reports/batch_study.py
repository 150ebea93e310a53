"""The batch-size study's terminal table."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}%"


def short_name(name: str) -> str:
    """Module paths shortened for a terminal: ``model.decoder.layers.0.self_attn.o_proj`` -> ``dec.0.self_attn.o_proj``."""
    for long, short in (("model.encoder.language_model.layers.", "enc."), ("model.decoder.layers.", "dec."),
                        ("model.encoder.language_model.", "enc."), ("model.decoder.", "dec."), ("model.", "")):
        name = name.replace(long, short)
    return name


def short_pass(label: str) -> str:
    """``canvas 0 pass 3`` -> ``c0 p3``; ``canvas 0 encoder`` -> ``c0 enc``."""
    return label.replace("canvas ", "c").replace(" pass ", " p").replace(" encoder", " enc").replace(
        "prompt cache (B=1 encoder)", "prompt cache")


def _origin_cell(run) -> str:
    origin, first = run["origin"], run["first_divergence"]
    if not origin:
        return "-"
    if first and origin["name"] == first["call"]:
        return "itself" if origin["inputs_identical"] else "before it (unrecorded)"
    return short_name(origin["name"]) + ("" if origin["inputs_identical"] else " (inputs differed)")


def batch_study_table(result: dict[str, Any]) -> Table:
    table = Table(title="batch-size study: row 0 in a batch vs row 0 alone (B=1); router/logits: % changed "
                        "in the first differing decoder pass", show_lines=False)
    # Narrow terminals fold the two name columns; the numbers never wrap.
    for column, wide in (("prompt", True), ("B", False), ("first divergence", True), ("origin", True),
                         ("router", False), ("logits", False), ("passes", False), ("text, stop", False)):
        table.add_column(column, overflow="fold", no_wrap=not wide, min_width=8 if wide else None)
    for run in result["runs"]:
        first = run["first_divergence"]
        table.add_row(
            run["prompt_id"], str(run["batch_size"]),
            f"{short_pass(first['pass'])} {short_name(first['call'])}" if first else "none",
            _origin_cell(run),
            _pct(run["router_scores_changed_pct"]), _pct(run["final_logits_changed_pct"]),
            f"{run['passes_matching']}/{run['passes_total']}",
            f"{'changed' if run['text_changed'] else 'same'}, {'changed' if run['stop_changed'] else 'same'}",
        )
    summary = result["summary"]
    table.caption = (
        f"{summary['diverged']}/{summary['runs']} runs diverged, {summary['text_changed']} changed text, "
        f"{summary['stop_changed']} changed stopping point; passes matching {summary['passes_matching']}/"
        f"{summary['passes_total']}; {summary['bytes_compared']:,} bytes compared; batch sizes that agree: "
        f"{summary['equivalence_classes']}; repeat B=1 identical: {summary['repeat_control_identical']}"
        f"{_repeat_where(result.get('repeat_control'))}"
    )
    skipped = sorted({label for run in result["runs"] for label in run.get("passes_not_compared", [])})
    if skipped:
        table.caption += (f"; not compared: {', '.join(skipped)} (the prompt, padded to the longest one, has another "
                          "shape than at B=1; later passes read it through the KV cache)")
    return table


def _repeat_where(repeat: dict | None) -> str:
    return f" ({repeat['process']})" if repeat else ""
