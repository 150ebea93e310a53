"""Row 0's denoising path: one state per accept call, split into canvases, cut to the row's own passes."""

from __future__ import annotations

import torch

from canvaslab.capture.canvas_path import CanvasPathRecorder


def _accept(recorder, step, tokens, mask, entropy=None):
    recorder.on_accept(logits=None, accepted_mask=torch.tensor(mask), accepted_canvas=torch.tensor(tokens),
                       cur_step=step, entropy=entropy)


def test_row_zero_is_kept_per_call_and_passes_after_its_stop_are_dropped():
    recorder = CanvasPathRecorder()
    recorder.on_phase("generate")
    # canvas 0: steps 3, 2, 1 (cur_step counts down); canvas 1 restarts at 3
    for step in (3, 2, 1, 3, 2):
        _accept(recorder, step, [[step, 10 + step], [7, 7]], [[True, step < 3], [False, False]],
                torch.tensor([[0.5, 1.25], [9.0, 9.0]]))
    path = recorder.path([2, 1])  # row 0 stopped after 2 passes of canvas 0 and 1 of canvas 1
    assert [(p["canvas"], p["step"]) for p in path["passes"]] == [(0, 0), (0, 1), (1, 0)]
    assert path["passes"][1] == {"canvas": 0, "step": 1, "tokens": [2, 12], "accepted": "11", "entropy": [0.5, 1.25]}
    assert path["passes"][0]["accepted"] == "10" and path["canvas_length"] == 2


def test_a_new_generate_starts_a_new_path():
    recorder = CanvasPathRecorder()
    _accept(recorder, 2, [[1]], [[True]])
    recorder.on_phase("generate")
    _accept(recorder, 2, [[5]], [[False]])
    assert recorder.path([1])["passes"] == [{"canvas": 0, "step": 0, "tokens": [5], "accepted": "0", "entropy": None}]
