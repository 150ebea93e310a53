"""The batch study records what the report replays: row 0's canvas per pass for B=1 and every run, the
text of each token on it, and the spread per pass, consistent with the study's own comparison."""

from __future__ import annotations

import math

from canvaslab.prompts import builtin_prompts
from canvaslab.studies.batch_size import BatchStudySettings, run_batch_study


def test_study_records_canvas_paths_and_spread_per_pass(tiny):
    settings = BatchStudySettings(batch_sizes=[1, 3], generation={"max_denoising_steps": 3})
    result = run_batch_study(tiny, builtin_prompts(1), settings)
    run = result["runs"][0]
    reference = result["reference_canvas_paths"]["builtin-0"]
    for path, row in ((reference, run["reference"]), (run["canvas_path"], run["run"])):
        assert len(path["passes"]) == sum(row["passes"])  # one state per pass of the row's own
        assert path["canvas_length"] == 256
        for state in path["passes"]:
            assert len(state["tokens"]) == len(state["accepted"]) == len(state["entropy"]) == 256
            assert set(state["accepted"]) <= {"0", "1"}
            assert all(0 <= e <= math.log(tiny.vocab_size) + 1e-3 for e in state["entropy"])
    tokens = {t for path in (reference, run["canvas_path"]) for s in path["passes"] for t in s["tokens"]}
    assert {int(t) for t in result["canvas_token_text"]} == tokens
    spread = run["spread_per_pass"]
    assert len(spread) == run["passes_total"]
    at_spread_pass = next(p for p in spread if p["pass"] == run["spread_pass"]) if run["spread_pass"] else None
    if at_spread_pass is not None:  # the per-pass spread agrees with the comparison's own count
        assert at_spread_pass["layers"] == run["positions_with_difference_per_layer"]
    # a run that matched B=1 in every pass would show no differing position anywhere
    assert (run["passes_matching"] == run["passes_total"]) == all(
        not any(p["layers"].values()) for p in spread)
