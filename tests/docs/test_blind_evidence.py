"""The blind-set table of the docs is rendered from the record and its result files, through the validity rules."""

from __future__ import annotations

import json
from pathlib import Path

from canvaslab.reports.evidence import sources, tables
from canvaslab.reports.evidence.figures import blind_failures
from canvaslab.training import blind_eval


def _write_release(root: Path, folder: str, model: str, release: str, scores: dict[str, list[bool]],
                   rerun: bool = False) -> None:
    result = {"release": release, "model": model, "summary": {t: blind_eval.task_score(s) for t, s in scores.items()}}
    path = root / sources.BLIND / folder / f"blind_{model}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result), encoding="utf-8")
    blind_eval.add_to_record(root / sources.BLIND / "record.json", release, "ab" * 32,
                             f"{folder}/blind_{model}.json", rerun)


def test_the_table_has_one_column_per_release_and_prints_what_the_rules_allow(tmp_path):
    _write_release(tmp_path, "m", "mini", "canvaslab-mini 1.1.0",
                   {"add2": [True] * 45 + [False] * 5, "json": [True] * 3 + [False] * 47})
    _write_release(tmp_path, "m2", "mini", "canvaslab-mini 1.1.0", {"add2": [True] * 50, "json": [False] * 50},
                   rerun=True)
    table = tables.blind_mini(tmp_path)
    assert table.splitlines()[0] == "| task | `mini` 1.1.0 | `mini` 1.1.0 (re-run) |"
    sums = next(line for line in table.splitlines() if line.startswith("| 2-digit sums |"))
    assert "45/50 (0.90 [0.79, 0.96])" in sums and "50/50 (1.00) (" in sums and "zero variance" in sums
    json_row = next(line for line in table.splitlines() if line.startswith("| JSON |"))
    assert "3/50 (0.06) (rests on 3 right answers (< 5): no interval" in json_row and "[" not in json_row


def test_the_failure_counts_are_read_from_each_answer_and_its_item_key():
    answers = [
        {"task": "word", "key": "blind:word:gain0:Isla:kites:20:30", "text": "We add: 20 + 30 ...\n#### 50",
         "score": True},
        {"task": "word", "key": "blind:word:loss1:Isla:kites:30:20", "text": "We add: 30 + 20 ...\n#### 50",
         "score": False},
        {"task": "word", "key": "blind:word:loss1:Isla:kites:30:9", "text": "We subtract: 30 - 9 ...\n#### 11",
         "score": False},
        {"task": "json", "key": 'blind:json:0:{"open": true, "seats": 4}', "text": '{"open": true, "seats": 4}',
         "score": True},
        {"task": "json", "key": 'blind:json:1:{"open": true, "year": 9}', "text": '{"open": true}', "score": False},
        {"task": "json", "key": 'blind:json:2:{"paid": false, "rank": 1}', "text": "no JSON here", "score": False},
        {"task": "code", "key": "blind:code:add:0:tweak_figure_3", "text": "def tweak_figure_3(el):", "score": False},
        {"task": "code", "key": "blind:code:add:1:nudge_input_4", "text": "def other(el):", "score": False},
    ]
    assert blind_failures(answers) == {
        "word.right-operation": "2 of 3", "word.right-operation-wrong-result": "1", "json.parsed": "2 of 3",
        "json.every-key": "1", "code.named": "1 of 2"}
