"""A code generation's trace keeps the sandbox's reason beside its verdict (the optional ``sandbox`` key), the
verdict is the scorer's own, old traces without the key still read, and the drill-down shows the reason as text."""

from __future__ import annotations

import json

import pytest
import torch

from canvaslab.analysis.order_metrics import compute_order_metrics
from canvaslab.api import report as build_report
from canvaslab.capture.commit_trace import read_traces, write_traces
from canvaslab.generation.runner import RowResult
from canvaslab.io import write_json_atomic
from canvaslab.scoring.probes import sandbox_detail, score, score_with_detail
from canvaslab.scoring.probes.probe import make_probe
from canvaslab.scoring.sandbox import SandboxResult
from canvaslab.studies.commit_order.tracer import CommitTracer

RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"
WRONG = "```python\ndef add(a, b):\n    print('<script>alert(1)</script>')\n    raise ValueError('no <b>sum</b>')\n```"


def _probe(local_id: str):
    return make_probe("code_synthesis", local_id, "Write add(a, b).",
                      {"entry_point": "add", "tests": "assert add(2, 3) == 5\nassert add(-1, 1) == 0\n"})


def _traces(texts):
    tracer = CommitTracer()
    tracer.on_phase("generate")
    rows = len(texts)
    for step in (2, 1):
        tracer.on_accept(logits=torch.zeros(rows, 4, 8), accepted_mask=torch.ones(rows, 4, dtype=torch.bool),
                         accepted_canvas=torch.zeros(rows, 4), cur_step=step)
    results = [RowResult(prompt_ids=[2], tokens=[5, 6, 7, 8], text=text, stop_passes=[None], passes=[2],
                         eos_position=None) for text in texts]
    probes = [_probe(f"p{i}") for i in range(rows)]
    settings = {"max_denoising_steps": 2, "eos_token_id": [1], "pad_token_id": 0}
    return probes, tracer.traces(results, probes, [0] * rows, settings=settings)


def test_a_failing_code_answer_s_trace_carries_the_sandbox_s_reason_and_the_same_verdict(tmp_path):
    probes, (right, wrong) = _traces([RIGHT, WRONG])
    assert right.correct is True and wrong.correct is False
    assert [right.correct, wrong.correct] == [score(probes[0], RIGHT), score(probes[1], WRONG)]
    assert right.extra["sandbox"] == "passed (2 calls of the answer)"
    reason = wrong.extra["sandbox"]
    assert reason.startswith("failed: ValueError at tests.py line 1: the candidate raised ValueError")
    assert "no <b>sum</b>" in reason
    assert "<script>alert(1)</script>" in reason  # what the answer printed
    again = list(read_traces(write_traces(tmp_path / "t.jsonl", [right, wrong])))
    assert again[1].extra["sandbox"] == reason


def test_the_detail_is_bounded_and_text_regimes_have_none():
    long = SandboxResult(passed=False, timed_out=False, failure="AssertionError at tests.py line 1", calls=1,
                         candidate_output="x" * 50_000, tests_output="Traceback\n" * 5_000, elapsed_s=0.1)
    detail = sandbox_detail(long)
    assert len(detail) <= 2000 and detail.startswith("failed: AssertionError at tests.py line 1\ntests' output:")
    timed = SandboxResult(passed=False, timed_out=True, failure="time limit reached", calls=0,
                          candidate_output="", tests_output="", elapsed_s=9.0)
    assert sandbox_detail(timed) == "failed: time limit reached"
    probe = make_probe("factual", "f0", "Capital of France?", {"answers": ["Paris"]})
    assert score_with_detail(probe, "Paris") == (True, None)


def _order_folder(folder, traces):
    write_traces(folder / "traces.jsonl", traces)
    metrics = compute_order_metrics(folder / "traces.jsonl", n_bootstrap=0)
    write_json_atomic(folder / "order_metrics.json", {**metrics, "environment": {"mode": "stock"}})


def test_old_traces_without_the_key_read_and_the_page_shows_the_reason_escaped(tmp_path):
    _, traces = _traces([RIGHT, WRONG])
    records = [trace.to_record() for trace in traces]
    old = dict(records[0])
    del old["sandbox"]
    (tmp_path / "old.jsonl").write_text(json.dumps(old) + "\n")
    assert "sandbox" not in next(iter(read_traces(tmp_path / "old.jsonl"))).extra
    folder = tmp_path / "order"
    folder.mkdir()
    _order_folder(folder, traces)
    html = build_report([folder], tmp_path / "r.html").html.read_text()
    drill = html[html.index('<details class="drill"'):]
    drill = drill[:drill.index("</details>")]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in drill and "no &lt;b&gt;sum&lt;/b&gt;" in drill
    assert "<script>alert" not in html and "failed: " in drill
