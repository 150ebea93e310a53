"""The README's GPU rows and the model card's failure counts are their files' numbers: a typed or stale figure
fails, a changed file changes the page."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from canvaslab.errors import CanvaslabError
from canvaslab.reports import evidence
from canvaslab.reports.evidence import gpu
from canvaslab.reports.evidence.figures import figures

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def _root_with(tmp_path: Path, page: str = "", old: str = "", new: str = "") -> Path:
    """A repository root of links to the real results and copies of the pages, ``old`` replaced in ``page``."""
    (tmp_path / "benchmarks").symlink_to(ROOT / "benchmarks")
    for name in evidence.PAGES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((ROOT / name).read_text())
    if page:
        text = (tmp_path / page).read_text()
        assert old in text
        (tmp_path / page).write_text(text.replace(old, new, 1))
    return tmp_path


def _results_with(tmp_path: Path, relative: str, change) -> Path:
    """A root whose results link to the real folders but for one file, a changed copy."""
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    folder = Path(relative).parts[0]
    for entry in RESULTS.iterdir():
        if entry.name != folder:
            (results / entry.name).symlink_to(entry)
    shutil.copytree(RESULTS / folder, results / folder, symlinks=True)
    data = json.loads((RESULTS / relative).read_text())
    change(data)
    (results / relative).write_text(json.dumps(data))
    return tmp_path


@pytest.mark.parametrize(("old", "new"), [
    ("B=1 7.11 / 27.48", "B=1 7.10 / 27.48"),
    ("B=1 28.54 (1.72x the weight-read limit) / 76.77", "B=1 28.54 (1.70x the weight-read limit) / 76.77"),
    ("peak 62.2 GiB of 79.2", "peak 62.0 GiB of 79.2"),
    ("18/18 passes identical (3.9 GB compared)", "18/18 passes identical (4.0 GB compared)"),
    ("invariant 0 of 8 continuous", "invariant 1 of 8 continuous"),
    ("0.70/2.51/3.15/3.31 requests/s", "0.70/2.51/3.15/3.30 requests/s"),
    ("0/9 runs diverged, 27/27 passes identical", "0/9 runs diverged, 26/27 passes identical"),
])
def test_a_gpu_figure_typed_differently_from_its_file_is_found(tmp_path, old, new):
    assert evidence.stale_regions(_root_with(tmp_path, "README.md", old, new)) == ["README.md: readme-gpu"]


def test_the_readme_gpu_rows_include_the_h100_s_speed_memory_proofs_and_continuous_serving():
    rows = gpu.readme_gpu(ROOT)
    assert "30 layers: B=1 28.54 (1.72x the weight-read limit) / 76.77" in rows
    assert "B=32 2.78 (3.14x the compute limit) / 9.39" in rows
    assert "47.03 GiB of weights, device peak 47.14 GiB" in rows and "1,024-token prompts: finished" in rows
    assert "`benchmarks/results/h100-gpu-run-proofs/`" in rows and "GPU tests 91 passed" in rows
    assert "`benchmarks/results/h100-serve-continuous-fused-6l/`" in rows  # the run of the current stepper


def test_where_the_batch_study_first_differs_is_counted_from_its_runs():
    """The first difference is an encoder RMSNorm's mean in every run, but in layer 0's input norm in only 3."""
    row = gpu.batch_study_row(ROOT)[1]
    assert "in an encoder RMSNorm's `mean` in 24 of 24 runs (layers 0-4)" in row
    assert "first RMSNorm" not in row


def test_a_stock_run_missing_from_the_file_is_printed_as_not_run():
    """Stock at 6 layers and B=64 was never timed: the row says so instead of asserting it does not fit."""
    assert "B=64 2.67 / not run" in gpu.h200_speed_row(ROOT)[1]


def test_a_changed_result_file_changes_its_row(tmp_path):
    def slower(limits):
        entry = next(e for e in limits["speed"] if (e["mode"], e["layers"], e["batch"]) == ("invariant", 30, 1))
        entry["steady_ms_per_row_pass"], entry["vs_weight_read_limit"] = 33.0, 1.99
    root = _results_with(tmp_path, "h100-gpu-run/limits.json", slower)
    assert "B=1 33.00 (1.99x the weight-read limit) / 76.77" in gpu.h100_speed_row(root)[1]


def test_a_proof_that_diverged_is_printed_as_diverged(tmp_path):
    def diverged(study):
        study["summary"].update(diverged=1, passes_matching=17)
    root = _results_with(tmp_path, "h100-gpu-run-proofs/proof/invariant_6l_mixed/batch_study.json", diverged)
    assert gpu.h100_proof_row(root)[1].startswith("1/6 diverged")


@pytest.mark.parametrize(("sizes", "text"), [
    ([1, 2, 3, 4, 5, 6, 7, 8, 32, 64], "1-8, 32, 64"), ([1, 8, 32], "1, 8, 32"), ([1, 2], "1, 2"),
    ([64, 1, 2, 3], "1-3, 64"),
])
def test_batch_sizes_are_written_as_ranges_of_three_or_more(sizes, text):
    assert gpu.sizes_text(sizes) == text


@pytest.mark.parametrize(("old", "new", "name"), [
    ("wrong operation in <!-- value:mini-1.1.heldout.word.wrong-operation -->34 of 100",
     "wrong operation in <!-- value:mini-1.1.heldout.word.wrong-operation -->33 of 100", "wrong-operation"),
    ("<!-- value:mini-1.1.heldout.json.parsed -->63 of 100", "<!-- value:mini-1.1.heldout.json.parsed -->60 of 100",
     "json.parsed"),
])
def test_a_failure_count_typed_differently_from_the_answers_is_named(tmp_path, old, new, name):
    stale = evidence.stale_regions(_root_with(tmp_path, "docs/mini-model.md", old, new))
    assert len(stale) == 1 and name in stale[0] and "the files say" in stale[0]


def test_the_failure_counts_are_counted_from_the_stored_held_out_answers():
    known = figures(ROOT)
    assert known["mini-1.1.heldout.word.wrong-operation"] == "34 of 100"
    assert known["mini-1.1.heldout.json.parsed"] == "63 of 100"
    assert known["mini-1.1.heldout.json.requested-keys"] == "0"
    assert known["mini-1.1.heldout.code.requested-name"] == "0 of 100"
    assert known["mini-1.1.heldout-right.add_mixed"] == "1 of 100"
    assert "mini-1.1.heldout-right.prose" not in known  # a share, not right or wrong


def test_a_word_problem_answered_with_the_right_operation_leaves_the_wrong_count(tmp_path):
    def mend(quality):
        answers = quality["heldout_template"]["answers"]["diffusion"]
        wrong = next(a for a in answers
                     if a["task"] == "word" and "We subtract" in a["text"] and " + " in a["expected"])
        wrong["text"] = wrong["text"].replace(" - ", " + ", 1)
    root = _results_with(tmp_path, "mini-grammar/quality_gpu.json", mend)
    assert figures(root)["mini-1.1.heldout.word.wrong-operation"] == "33 of 100"


def test_what_the_commit_order_statistics_rest_on_is_read_from_the_traces():
    known = figures(ROOT)
    assert known["order.mini-1.1.math.tau-defined"] == "20 generations of 20 prompts"
    assert known["order.mini-1.1.math.content-in-2-calls"] == "18 of 20"  # two commit waves
    assert (known["order.mini-1.1.math.block-64.later"], known["order.mini-1.1.math.block-64.defined"]) == ("18", "19")
    assert known["order.mini-1.1.math.auroc-minority"] == "1 wrong answer of 20"
    assert known["order.mini-1.0.math.tau-defined"] == "15 generations of 6 prompts"
    assert known["order.mini-1.0.wrong-answers"] == "9, from 5 prompts"
    assert known["mini-1.0.in.word.subtractions"] == "3 of 48" and known["mini-1.0.in.prose.to-budget"] == "91 of 100"


@pytest.mark.parametrize(("old", "new"), [
    ("-->1 wrong answer of 20<", "-->2 wrong answers of 20<"),
    ("-->15 generations of 6 prompts<", "-->15 generations of 7 prompts<"),
    ("-->9, from 5 prompts<", "-->9, from 4 prompts<"),
    ("-->18.1M<", "-->18.2M<"),
    ("-->568<", "-->500<"),
    ("-->768<", "-->786<"),
])
def test_a_findings_count_typed_differently_from_its_file_is_named(tmp_path, old, new):
    stale = evidence.stale_regions(_root_with(tmp_path, "docs/findings-mini.md", old, new))
    assert len(stale) == 1 and stale[0].startswith("docs/findings-mini.md: value ")


def test_the_noise_studies_counts_are_read_from_their_reports_and_plans():
    known = figures(ROOT)
    default = (known["noise.mini-1.0-default.conditions"], known["noise.mini-1.0-default.random.pairs"])
    assert default == ("2,304", "768")
    assert (known["noise.mini-1.1.conditions"], known["noise.mini-1.1.class-conditions"]) == ("1,356", "452")
    assert known["noise.graded.prompts-needed"] == "568" and known["noise.graded.safeguard"] == "0/720"
    assert (known["noise.graded.content.common-less"], known["noise.graded.later.common-less"]) == ("1.55", "2.02")


@pytest.mark.parametrize("page", [
    "<!-- value:training.mini-1.1.share.add_widths -->7%<!-- /value -->",  # an underscore in the name is read
    "a <!-- value:mini-1.1.heldout.add3 -->91%<!-- /value\n--> mark broken over two lines",
    "<!-- value:Mini -->1<!-- /value -->",
])
def test_a_mark_the_generator_cannot_check_is_an_error_or_checked(page):
    if "7%" in page:
        assert evidence.render_page(page, ROOT) == page.replace("7%", "6%")
    else:
        with pytest.raises(CanvaslabError, match="mark whose name"):
            evidence.render_page(page, ROOT)


def test_a_mark_shown_as_code_is_left_alone():
    page = "regions are marked `<!-- value:NAME -->`"
    assert evidence.render_page(page, ROOT) == page


def test_the_model_card_s_training_and_failure_counts_are_read_from_their_files():
    known = figures(ROOT)
    assert known["training.mini-1.1.share.add_widths"] == "6%" and known["training.mini-1.0.share.add3"] == "27%"
    assert (known["training.mini-1.0.skipped"], known["training.mini-1.1.skipped"]) == ("0", "31")
    assert known["mini-1.0.in.word.subtractions-wrong"] == "45 of 48"
    assert known["mini-ar.in.word.subtractions-wrong"] == "6 of 48"
    assert (known["mini-1.0.in.word.additions-wrong"], known["mini-1.0.in.sums-wrong"]) == ("8 of 52", "3 of 200")
    assert (known["pool.mini-1.1.vocabulary"], known["pool.mini-1.1.unused-ids"]) == ("16,384", "355")


@pytest.mark.parametrize(("old", "new", "region"), [
    ("| invariant | 64 | 0 / 4 | 125 | 0.438 |", "| invariant | 64 | 0 / 4 | 125 | 0.44 |", "serve-cpu-mini"),
    ("| stock/static | 16 | 4 / 4 | 36 | 7.56 |", "| stock/static | 16 | 0 / 4 | 36 | 7.56 |",
     "serve-h100-6l-continuous"),
    ("| stock | 64 | 4 / 4 | 132 |", "| stock | 64 | 4 / 4 | 131 |", "serve-h200-30l"),
])
def test_a_serving_table_cell_that_differs_from_its_run_is_found(tmp_path, old, new, region):
    assert evidence.stale_regions(_root_with(tmp_path, "docs/serving.md", old, new)) == [f"docs/serving.md: {region}"]


def test_a_serving_table_holds_a_row_per_mode_and_level_of_its_run():
    rows = [line for line in gpu.serve_levels(ROOT, "h100-6l-continuous").splitlines()[2:]]
    assert [row.split(" | ")[0:2] for row in rows] == [[f"| {run}", level] for run in
                                                       ("invariant/continuous", "invariant/static", "stock/continuous",
                                                        "stock/static") for level in ("1", "16")]


@pytest.mark.parametrize(("old", "new"), [
    ("| 6 | 32 | 7.79 | 2.53 | 18.7 / 70.6 |", "| 6 | 32 | 7.79 | 2.50 | 18.7 / 70.6 |"),
    ("| 6 | 64 | not run | 2.67 | 26.7 / - |", "| 6 | 64 | does not fit | 2.67 | 26.7 / - |"),
])
def test_the_h200_speed_table_is_its_files(tmp_path, old, new):
    stale = evidence.stale_regions(_root_with(tmp_path, "docs/invariant-generation.md", old, new))
    assert stale == ["docs/invariant-generation.md: speed-h200"]


@pytest.mark.parametrize(("old", "new"), [
    ("-->28.54<", "-->28.45<"), ("-->3.14x<", "-->1.30x<"), ("-->91 passed<", "-->92 passed<"),
    ("-->62.2 GiB<", "-->60.0 GiB<"), ("-->15/15 passes identical (3.3 GB compared)<", "-->15/15 passes identical<"),
])
def test_a_figure_of_the_gpu_runs_on_the_invariant_page_that_differs_from_its_file_is_named(tmp_path, old, new):
    stale = evidence.stale_regions(_root_with(tmp_path, "docs/invariant-generation.md", old, new))
    assert len(stale) == 1 and stale[0].startswith("docs/invariant-generation.md: value ")


def test_the_graded_noise_study_s_design_figures_are_read_from_its_plan_and_reports():
    known = figures(ROOT)
    assert (known["noise.graded.planning-sd"], known["noise.graded.power"]) == ("1.81", "0.00")
    assert (known["noise.graded.pilot.prompts"], known["noise.graded.pilot.safeguard"]) == ("10", "0/120")
    assert known["noise.graded.ids.never_seen"] == "1,757" and known["noise.graded.conditions"] == "720/720"


@pytest.mark.parametrize(("page", "old", "new"), [
    ("docs/serving.md", "-->17.9<", "-->18.0<"),  # 17.95 requests/s once typed as 18.0
    ("docs/serving.md", "-->1.7 to 1.8<", "-->1.7 to 1.9<"),
    ("docs/evidence.md", "-->0.21-0.42<", "-->0.21-0.43<"),
    ("docs/evidence.md", "opscan.h200.stock-split -->5<", "opscan.h200.stock-split -->4<"),
    ("docs/invariant-generation.md", "h200-limits.30l.b1.invariant -->48.26<", "h200-limits.30l.b1.invariant -->48.3<"),
    ("docs/invariant-generation.md", "30l-one-repeat.b1.stock -->79.4<", "30l-one-repeat.b1.stock -->79.0<"),
    ("docs/evidence.md", "h200-limits.gpu-tests -->82 passed<", "h200-limits.gpu-tests -->81 passed<"),
])
def test_a_serving_op_scan_or_pass_limits_figure_that_differs_from_its_file_is_named(tmp_path, page, old, new):
    stale = evidence.stale_regions(_root_with(tmp_path, page, old, new))
    assert len(stale) == 1 and stale[0].startswith(f"{page}: value ")


def test_kernels_per_pass_and_per_layer_are_read_from_the_profiles():
    values = figures(ROOT)
    profile = gpu.profile_batches(ROOT, gpu.H100_ROUTING / "profile_30l_steady.txt")
    assert values["h100-routing.profile.30l.b1.launches"] == f"{profile[1]['launches']:,}"
    six = gpu.profile_batches(ROOT, gpu.H100_ROUTING / "profile_6l_steady.txt")[1]["launches"]
    assert values["h100-routing.profile.per-layer.b1"] == f"{(profile[1]['launches'] - six) / 24:.1f}"
    assert values["h100-routing.profile.30l.b1.router"].endswith("in 30 launches")


@pytest.mark.parametrize(("page", "old", "new", "name"), [
    ("docs/invariant-generation.md", "launches -->1,263<", "launches -->1,200<", "h100-routing.profile.30l.b1.launches"),
    ("docs/noise-study.md", "later.sd -->1.1e-05<", "later.sd -->1e-06<", "noise.v4-gpu.later.sd"),
    ("docs/noise-study.md", "same-answers -->10 of 10<", "same-answers -->9 of 10<", "noise.v4-gpu.same-answers"),
])
def test_a_routing_or_device_agreement_figure_typed_differently_is_named(tmp_path, page, old, new, name):
    assert any(name in stale for stale in evidence.stale_regions(_root_with(tmp_path, page, old, new)))


def test_stratum_answers_that_differ_between_devices_are_counted(tmp_path):
    def flip(data):
        data["conclusion"]["per_stratum"]["content"]["never_seen"]["verdict"] = "undecided"

    root = _results_with(tmp_path, "mini-noise-v4/confirmatory-gpu/noise_study.json", flip)
    assert figures(root)["noise.v4-gpu.same-answers"] == "9 of 10"
