"""The engine changes where numbers are kept, not the numbers: each study's view equals what its building
blocks compute directly, in one pass without the store (the way the studies ran before the engine)."""

from __future__ import annotations

import json

from canvaslab.analysis.batch_classes import common_classes, equivalence_classes
from canvaslab.analysis.batch_size import summarize
from canvaslab.studies.op_scan import scan_ops
from canvaslab.io import _finite, _json_default
from canvaslab.prompts import builtin_prompts
from canvaslab.studies.batch_size import BatchStudySettings, run_batch_study
from canvaslab.studies.batch_size.design import batch_rows
from canvaslab.studies.batch_size.study import _Runner, capture_signature, compare_run, model_plan
from canvaslab.studies.engine import run_study
from canvaslab.studies.op_scan import OPS, OpScanStudy


def test_op_scan_study_gives_the_direct_scan(tiny, tmp_path):
    view, outcome = run_study(OpScanStudy(model_plan(tiny), ["stock"], [1, 2, 3], loaded=tiny), tmp_path)
    direct = scan_ops(tiny, [1, 2, 3], "stock")
    assert view["scans"] == [direct] and outcome.ran == len(OPS) == len(direct["ops"])
    assert tuple(direct["ops"]) == OPS  # the study's fixed op list is the model's


def test_batch_study_gives_the_direct_comparison(tiny, tmp_path):
    settings = BatchStudySettings(batch_sizes=[1, 2], repeat_control="same-process",
                                  generation={"max_denoising_steps": 2})
    prompt = builtin_prompts(1)[0]
    result = run_batch_study(tiny, [prompt], settings, out_dir=tmp_path)
    run = _Runner(tiny, settings)
    ids = tiny.tokenizer(prompt.text)["input_ids"]
    reference = run([ids])
    direct = compare_run(run, prompt, batch_rows(ids, [], 2, "copies"), reference, 2, "copies")
    classes = equivalence_classes({1: capture_signature(reference[0]), 2: direct["signature"]})
    as_json = json.loads(json.dumps(_finite(direct), default=_json_default))  # as every result file holds it
    assert result["runs"] == [as_json]
    assert result["summary"] == summarize([as_json], common_classes([classes]), True)
    assert result["reference_canvas_paths"] == {prompt.prompt_id: reference[1].canvas_path}
