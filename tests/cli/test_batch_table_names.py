"""The batch-size study's table as the terminal shows it: with ``--fill mixed`` the origin column appears beside
the first divergence, and a module path is never cut in two at the usual 80-100 columns."""

from __future__ import annotations

import pytest
from rich.console import Console

from canvaslab.reports.batch_study import batch_study_table
from canvaslab.reports.names import compact_location

ROTARY = "model.encoder.language_model.rotary_emb[sliding_attention]"
Q_PROJ = "model.encoder.language_model.layers.0.self_attn.q_proj::linear"


def _run(prompt_id: str, batch: int, call: str, origin: str, inputs_identical: bool) -> dict:
    return {"prompt_id": prompt_id, "batch_size": batch, "first_divergence": {"pass": "canvas 0 encoder", "call": call},
            "origin": {"name": origin, "inputs_identical": inputs_identical}, "router_scores_changed_pct": 99.95,
            "final_logits_changed_pct": 99.8, "passes_matching": 1, "passes_total": 4, "text_changed": True,
            "stop_changed": True}


def _mixed_fill_result() -> dict:
    """What ``batch-study --fill mixed`` on tiny gives: left-padded rows diverge first in the rotary embedding."""
    runs = [_run("builtin-0", 2, ROTARY, "left padding of the studied row", False),
            _run("builtin-1", 2, Q_PROJ, Q_PROJ, True), _run("builtin-2", 3, ROTARY, "left padding of the studied row", False)]
    summary = {"runs": 3, "diverged": 3, "text_changed": 3, "stop_changed": 3, "passes_total": 12, "passes_matching": 3,
               "bytes_compared": 58_225_152, "equivalence_classes": [[1], [2], [3]], "repeat_control_identical": True}
    return {"runs": runs, "summary": summary, "repeat_control": {"process": "same-process"}}


def _render(width: int) -> list[str]:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))
    table = batch_study_table(_mixed_fill_result())
    console.print(table, crop=False)
    console.print(table, crop=False)  # printed twice: fitted anew, the same lines
    lines = console.export_text().splitlines()
    assert lines[:len(lines) // 2] == lines[len(lines) // 2:]
    return lines


@pytest.mark.parametrize("width", [80, 90, 100])
def test_module_paths_stay_whole_with_mixed_fill(width):
    lines = _render(width)
    assert max(map(len, lines)) <= width
    for module in ("enc.rotary_emb[sliding_attention]", "enc.L0.attn.q_proj:linear"):
        assert any(module in line for line in lines), (module, "\n".join(lines))
    text = "\n".join(lines)
    for word in ("origin", "changed", "text, stop", "99.8%", "builtin-2"):
        assert word in text


def test_paths_stay_on_the_pass_line_when_the_console_has_room():
    text = "\n".join(_render(100))
    assert compact_location("canvas 0 encoder", ROTARY) in text
