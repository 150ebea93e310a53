"""The terminal tables and the report page print what the validity rules allow, on the committed studies."""

from __future__ import annotations

import json
from pathlib import Path

from canvaslab.reports.html.noise_panel import verdict_rows
from canvaslab.reports.html.order_panel import regime_rows
from canvaslab.reports.noise_study import noise_study_table
from canvaslab.reports.order_metrics import order_metrics_tables
from canvaslab.reports.readers.order_metrics import OrderStudy

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "mini-grammar"
ORDER = RESULTS / "order_study_cpu" / "order_metrics.json"
NOISE = RESULTS / "noise_study" / "confirmatory" / "noise_study.json"


def _column(table, name: str) -> dict[str, str]:
    names = [column.header for column in table.columns]
    regimes = [str(cell) for cell in table.columns[0].cells]
    return dict(zip(regimes, (str(cell) for cell in table.columns[names.index(name)].cells)))


def test_auroc_from_1_wrong_or_3_right_answers_prints_no_interval():
    metrics = json.loads(ORDER.read_text())
    auroc = _column(order_metrics_tables(metrics)[1], "AUROC")
    assert auroc["math"] == "1.000\n1 wrong answer" and auroc["json"] == "0.961\n3 right answers"
    rows = {row[0]: row[-1] for row in regime_rows(OrderStudy(ORDER, metrics))}
    assert "[" not in rows["math"] and "1 wrong answer" in rows["math"] and "371 of 1,000" in rows["math"]
    assert "[" not in rows["json"] and "3 right answers" in rows["json"]


def test_tau_b_keeps_its_interval_where_it_rests_on_enough_prompts():
    metrics = json.loads(ORDER.read_text())
    assert _column(order_metrics_tables(metrics)[0], "tau_b")["math"].startswith("0.465\n[0.425, 0.509]")


def test_an_equivalence_the_two_sided_test_contradicts_is_flagged_beside_the_verdict():
    report = json.loads(NOISE.read_text())
    table = noise_study_table(report)
    assert "a primary verdict is flagged" in str(table.title)
    assert "unused - rare, planted_logprob_boost: equivalent within the margin, yet different from zero: +0.085, " \
           "two-sided p = 0.0045" in str(table.caption)
    rows = {(row[0], row[1]): row[-1] for row in verdict_rows(report)}
    assert rows[("unused - rare", "planted_logprob_boost *")].startswith("equivalent (! equivalent within the margin")
    assert rows[("unused - random", "planted_logprob_boost *")] == "different"
