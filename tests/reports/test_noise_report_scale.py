"""The noise study's report at the sizes a reader accepts (4,096 effects): figures of a bounded size, a terminal
table of bounded length, every effect still in the page's table; and entries without a margin or an interval
(null, NaN, infinity) drawn as such, without a warning."""

from __future__ import annotations

import json
import struct
import warnings

from canvaslab.api import report as build_report
from canvaslab.reports.html import noise_panel
from canvaslab.reports.noise_study import MAX_TABLE_ROWS, noise_study_table
from canvaslab.reports.readers.noise_study import MAX_EFFECTS

NAN, INF = float("nan"), float("inf")
EFFECT = {"comparison": "unused - rare", "outcome": "first_pass_keeps", "primary": True, "n_pairs": 40, "margin": 0.25,
          "mean_difference": 0.05, "sd": 0.3, "ci": [-0.05, 0.15], "ci_level": 0.95, "p_lower": 0.01, "p_upper": 0.01,
          "tost_p": 0.01, "p_two_sided": 0.4, "verdict": "equivalent"}


def _report(effects: list[dict], per_prompt: dict | None = None) -> dict:
    return {"study": "unused_tokens_noise", "plan_hash": "a" * 64, "conditions_total": 80, "conditions_run": 80,
            "complete": True, "unit": "prompt", "prompts": 2, "effects": effects, "per_prompt": per_prompt or {},
            "conclusion": {"answer": "no", "text": "equivalent on the primary outcome"},
            "safeguard": {"compared": 80, "fired": 0, "by_field": {"tokens": 0}, "outcome_fields_changed": 0,
                          "batch_rows": [4]},
            "environment": {"device": "synthetic CPU"}}


def _many_effects() -> list[dict]:
    verdicts = ("equivalent", "different", "inconclusive")
    return [dict(EFFECT, comparison=f"unused - control {i // 8}", outcome=f"outcome {i % 8}", primary=i % 8 == 0,
                 verdict=verdicts[i % 3]) for i in range(MAX_EFFECTS)]


def _png_size(path) -> tuple[int, int]:
    return struct.unpack(">II", path.read_bytes()[16:24])


def _write(folder, report: dict):
    folder.mkdir()
    (folder / "noise_study.json").write_text(json.dumps(report))  # json.dumps: NaN and Infinity kept as such
    return folder


def test_a_report_of_the_most_effects_read_draws_figures_of_a_bounded_size(tmp_path):
    per_prompt = {f"unused - control {i}": {"p0": 0.1, "p1": -0.1} for i in range(1_000)}
    folder = _write(tmp_path / "large", _report(_many_effects(), per_prompt))
    written = build_report([folder])
    figures = folder / "report-figures"
    for name in ("noise0-forest.png", "noise0-per-prompt.png"):
        width, height = _png_size(figures / name)
        assert width <= 2_000 and height <= 4_500, (name, width, height)  # 11 pt text at least: wider labels
    page = written.html.read_text()
    assert f"draws {noise_panel.MAX_FOREST_ROWS} of the 4,096 effects (8 of 8 outcomes" in page
    assert "the first 24 of 1,000 comparisons" in page
    assert page.count("<td>unused - control ") == MAX_EFFECTS  # the table lists every effect


def test_the_terminal_table_lists_the_first_effects_and_counts_every_verdict():
    table = noise_study_table(_report(_many_effects()))
    assert table.row_count == MAX_TABLE_ROWS
    caption = str(table.caption)
    assert f"the first {MAX_TABLE_ROWS} of 4,096 effects" in caption
    assert "verdicts of all 4,096: equivalent 1,366, different 1,365, inconclusive 1,365" in caption


def test_effects_without_an_interval_or_a_margin_are_drawn_as_such_without_a_warning(tmp_path):
    effects = [dict(EFFECT, comparison="ci NaN", ci=[NAN, NAN]), dict(EFFECT, comparison="ci null", ci=[None, None]),
               dict(EFFECT, comparison="no ci", ci=None), dict(EFFECT, comparison="ci infinite", ci=[-INF, INF]),
               dict(EFFECT, comparison="mean NaN", mean_difference=NAN),
               dict(EFFECT, outcome="final_replaced", primary=False, comparison="margin NaN", margin=NAN),
               dict(EFFECT, outcome="text_changed", primary=False, comparison="margin infinite",
                    margin=INF),
               dict(EFFECT, outcome="first_entropy", primary=False, comparison="margin null", margin=None)]
    folder = _write(tmp_path / "gaps", _report(effects, {"unused - rare": {"p0": NAN, "p1": 0.1, "p2": INF}}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        page = build_report([folder]).html.read_text()
    for said in ("ci NaN (no interval)", "ci null (no interval)", "no ci (no interval)", "ci infinite (no interval)",
                 "mean NaN (no estimate)", "final_replaced (no margin)", "text_changed (no margin)",
                 "first_entropy (no margin)"):
        assert said in page, said
