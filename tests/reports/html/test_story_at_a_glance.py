"""The page tells the batch-size study's effect in words: answers beside B=1 with the changed words marked, a
sentence when no answer changed (with the largest numeric difference), no flat figure without a sentence; runs
compared in a table first; the commit-order page's drill-down and autoregressive baseline."""

from __future__ import annotations

import json
import re

from canvaslab.api import report as build_report
from canvaslab.reports.html.answers import answer_rows, marked_words, verdict_sentence
from canvaslab.reports.html.markup import plural
from canvaslab.reports.readers import batch_study


def test_changed_words_are_marked_and_markup_in_answers_is_text():
    assert marked_words("The capital is Taistos.", "The capital is Vouzor.") == "The capital is <mark>Taistos.</mark>"
    assert marked_words("same text", "same text") == "same text"
    assert marked_words("<b>x</b> y", "z y") == "<mark>&lt;b&gt;x&lt;/b&gt;</mark> y"


def test_plural():
    assert plural(1, "generation") == "1 generation" and plural(2, "generation") == "2 generations"
    assert plural(1, "pass", "passes") == "1 pass" and plural(0, "pass", "passes") == "0 passes"


def test_answers_name_the_pass_where_the_canvas_parted(study_folders):
    study = batch_study.read(study_folders["folders"]["stock"])
    rows = {row[0]: row for row in answer_rows(study, "builtin-0")}
    assert rows["1 (reference)"][2] == "reference"
    assert rows["2"][2] == "same text" and rows["2"][3] == "never: identical to B=1"
    # B=4 commits other tokens from pass 2 on (0-based): the third denoising pass; its text changed a -> b
    assert rows["4"][2] == "changed" and rows["4"][3] == "denoising pass 3 (canvas 0, pass 3)"
    assert "<mark>b</mark>" in rows["4"][1]
    assert verdict_sentence(study).startswith("Batching changed the answer in 1 of 3 runs: 1 prompt (builtin-0)")


def test_without_a_changed_answer_the_page_says_so_and_gives_the_largest_difference(tmp_path, writers):
    writers.batch_study(tmp_path)
    path = tmp_path / "batch_study.json"
    data = json.loads(path.read_text())
    for run in data["runs"]:
        run["text_changed"], run["run"]["text"] = False, run["reference"]["text"]
    data["runs"][-1]["first_divergence"]["max_abs_diff"] = 3e-6
    path.write_text(json.dumps(data))
    sentence = verdict_sentence(batch_study.read(tmp_path))
    assert sentence.startswith("No answer changed on this machine: all 3 runs give B=1's text; 2 of them differ")
    assert "largest numeric difference: 3e-06 (prompt builtin-0, B=4, at canvas 0 pass 1)" in sentence


def test_a_figure_whose_cells_are_all_equal_becomes_a_sentence(tmp_path, writers):
    """Every layer differing at every position from the first pass on drew a solid heatmap."""
    writers.batch_study(tmp_path)
    path = tmp_path / "batch_study.json"
    data = json.loads(path.read_text())
    for run in data["runs"]:
        for entry in run["spread_per_pass"]:
            entry["layers"] = {name: entry["canvas_positions"] for name in entry["layers"]}
    path.write_text(json.dumps(data))
    html = build_report([tmp_path], tmp_path / "r.html").html.read_text()
    assert "every position differs from B=1, so its figure would be one flat colour" in html
    assert 'data-figure="batch0-0-spread-heatmap' not in html and 'data-figure="batch0-0-spread-overview' not in html


def test_every_prompt_has_its_block_and_dataset(tmp_path, writers):
    writers.batch_study(tmp_path, prompts=3)
    html = build_report([tmp_path], tmp_path / "r.html").html.read_text()
    blocks = re.findall(r'<div class="per-prompt"( hidden)? data-prompt="([^"]+)"', html)
    assert [name for _, name in blocks] == ["builtin-0", "builtin-1", "builtin-2"]
    assert [bool(hidden) for hidden, _ in blocks] == [False, True, True]
    data = json.loads(re.search(r'id="canvas-data">(.*?)</script>', html, re.S).group(1))
    assert [d["prompt"] for d in data] == ["builtin-0", "builtin-1", "builtin-2"]


def test_two_folders_open_with_a_table_of_their_differences(study_folders, tmp_path):
    folders = study_folders["folders"]
    html = build_report([folders["stock"], folders["invariant"]], tmp_path / "r.html").html.read_text()
    assert html.index('<section id="compare"') < html.index('<section id="batch"')
    table = html[html.index('<section id="compare"'):html.index('<section id="batch"')]
    rows = {re.sub(r"<[^>]+>", "", m.group(2)).replace(" ≠ differs", ""): m.group(1)
            for m in re.finditer(r'<tr class="(\w+)"><th scope="row">(.*?)</th>', table)}
    assert rows["mode"] == "differs" and rows["Batch-size study: final texts that changed"] == "same"
    assert "1 measure of" in table


def test_commit_order_page_has_the_baseline_and_every_generation(study_folders, tmp_path):
    html = build_report([study_folders["folders"]["order"]], tmp_path / "r.html").html.read_text()
    assert "autoregressive baseline&#x27;s accuracy" in html and "0.75 (n=4)" in html
    assert "every generation: 24 generations" in html
    assert "question math-0" in html and "baseline says math-0" in html
    assert "simpson_prone" not in html
