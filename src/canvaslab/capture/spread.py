"""How far a difference spread, pass by pass: per decoder pass and decoder layer, the canvas positions
whose row-0 layer output differs from the reference.

The recorder keeps one digest per canvas position for every decoder layer output, in every pass, so
this costs no extra capture: it is a reading of two captures the study already holds. The comparison
(``capture.compare``) reports the first differing pass; the report's layer x pass heatmap needs all.
"""

from __future__ import annotations

from typing import Any

from canvaslab.capture.recorder import Capture
from canvaslab.models import anatomy


def positions_differing_per_pass(reference: Capture, run: Capture) -> list[dict[str, Any]]:
    """One entry per decoder pass of the reference: ``{pass, canvas, step, canvas_positions, layers}``,
    ``layers`` mapping ``"layer N"`` to the number of positions whose digest differs (None: no counterpart)."""
    run_groups = run.by_pass()
    passes = []
    for key, group in reference.by_pass().items():
        if key.phase != "decoder":
            continue
        matched = {record.key: record for record in run_groups.get(key, [])}
        layers: dict[str, int | None] = {}
        width = None
        for record in group:
            layer = anatomy.decoder_layer_index(record.name)
            if record.kind != "module" or layer is None or not record.positions:
                continue
            other = matched.get(record.key)
            width = len(record.positions)
            layers[f"layer {layer}"] = (
                None if other is None or not other.positions or len(other.positions) != width
                else sum(a != b for a, b in zip(record.positions, other.positions)))
        passes.append({"pass": key.label(), "canvas": key.canvas, "step": key.step,
                       "canvas_positions": width, "layers": layers})
    return passes
