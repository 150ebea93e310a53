"""The docs' evidence regions are the numbers of their result files: a page that drifts from its file fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from canvaslab.errors import CanvaslabError
from canvaslab.reports import evidence
from canvaslab.reports.evidence import tables

ROOT = Path(__file__).resolve().parents[2]


def test_every_page_s_evidence_regions_match_their_files():
    assert evidence.stale_regions(ROOT) == []


def test_every_renderer_has_a_region_on_some_page():
    used = {m["name"] for page in evidence.PAGES for m in evidence.REGION.finditer((ROOT / page).read_text())}
    assert used == set(tables.RENDERERS)


def _copy_with(tmp_path: Path, page: str, old: str, new: str) -> Path:
    (tmp_path / "benchmarks").symlink_to(ROOT / "benchmarks")
    for name in evidence.PAGES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((ROOT / name).read_text())
    text = (tmp_path / page).read_text()
    assert old in text
    (tmp_path / page).write_text(text.replace(old, new, 1))
    return tmp_path


def test_a_number_that_differs_from_its_file_is_found(tmp_path, capsys):
    root = _copy_with(tmp_path, "docs/mini-model.md", "| 81% | yes |", "| 82% | yes |")
    assert evidence.stale_regions(root) == ["docs/mini-model.md: targets-mini-1.1"]
    assert evidence.main(["--root", str(root), "--check"]) == 1
    assert "docs/mini-model.md: targets-mini-1.1" in capsys.readouterr().out
    assert evidence.main(["--root", str(root)]) == 0  # rewriting restores the file's number
    assert evidence.stale_regions(root) == []


def _row(table: str, first_cell: str) -> str:
    return next(line for line in table.splitlines() if line.startswith(f"| {first_cell} |"))


def test_the_generated_tables_print_what_the_validity_rules_allow():
    findings = tables.order_mini_1_1(ROOT)
    math = _row(findings, "math")
    assert "split share 18/19" in math and "1.00 (1 wrong answer)" in math and "[1.00, 1.00]" not in math
    assert "0.96 (3 right answers)" in findings and "[0.83" not in findings
    assert "0.37" in math  # the token-level block tau at bins of 64
    assert "7 generations of 2 prompts | 0.135, no CI" in tables.tau_mini_1_0(ROOT)
    assert "two-sided p = 0.0045" in tables.noise_mini_1_1(ROOT)


def test_a_block_tau_over_answers_that_span_two_bins_is_a_split_share_whatever_the_canvas():
    """Code answers span 2 bins of 16 of the 128-position canvas (8 bins): +1 or -1 each, not a block tau."""
    code = _row(tables.order_mini_1_1(ROOT), "code_synthesis")
    assert "0.32 / 0.23 / split share 14/20 / - / -" in code
    open_ended = _row(tables.order_mini_1_0(ROOT), "open_ended")
    assert "-0.28 (11 of 93 over 2 bins)" in open_ended


def test_an_auroc_whose_minority_comes_from_few_prompts_prints_no_interval():
    math = _row(tables.auroc_mini_1_0(ROOT), "math")
    assert "0.985, no CI" in math and "from 3 prompts" in math and "[0.957" not in math
    assert "0.98 (7 wrong answers from 3 prompts)" in _row(tables.order_mini_1_0(ROOT), "math")


def test_no_generated_table_sets_a_mini_value_beside_the_paper_s():
    for name, render in tables.RENDERERS.items():
        assert "paper" not in render(ROOT).lower() or name == "readme-mini-1.1", name


@pytest.mark.parametrize(("page", "old", "new", "region"), [
    ("docs/findings-mini.md", "| math | 12.1 | 0.94 |", "| math | 12.2 | 0.94 |", "commit-mini-1.0"),
    ("docs/findings-mini.md", "| math | 40.8 | 0.56 |", "| math | 40.9 | 0.56 |", "commit-mini-1.1"),
    ("docs/findings-mini.md", "| 0.549, 8.15 |", "| 0.549, 8.16 |", "sibling-mini-1.0"),
    ("docs/mini.md", "| 3-digit sums | 0.54 (n=50) |", "| 3-digit sums | 0.55 (n=50) |", "heldout-mini-1.0"),
    ("docs/mini-model.md", "| 0.85 | 48 | 0.52 (n=10) |", "| 0.85 | 48 | 0.53 (n=10) |", "evaluation-mini-1.1"),
    ("docs/mini-model.md", "| 0.871 | 0.549 | 8.15 |", "| 0.871 | 0.549 | 8.14 |", "prose-judge"),
    ("docs/commit-order-study.md", "| -0.034 [-0.053, -0.016] |", "| -0.034 [-0.053, -0.015] |", "order-mini-1.0"),
    ("README.md", "0.36 s median", "0.35 s median", "readme-earlier"),
])
def test_each_generated_table_names_the_cell_that_drifted(tmp_path, page, old, new, region):
    assert evidence.stale_regions(_copy_with(tmp_path, page, old, new)) == [f"{page}: {region}"]


def test_the_targets_label_the_split_each_prose_score_comes_from():
    targets = tables.targets_mini_1_1(ROOT)
    assert "word pairs ≥ 0.90, in-template prompts | 0.877 (held-out 0.850)" in targets
    assert "held-out: not computed" in targets


def test_a_figure_in_a_sentence_that_differs_from_its_file_is_named(tmp_path):
    old = "<!-- value:mini-1.1.heldout.fact -->81%<!-- /value -->"
    root = _copy_with(tmp_path, "docs/mini-model.md", old, old.replace("81%", "82%"))
    assert evidence.stale_regions(root) == ["docs/mini-model.md: value mini-1.1.heldout.fact (82%, the files say 81%)"]
    assert evidence.main(["--root", str(root)]) == 0
    assert old in (root / "docs/mini-model.md").read_text()


def test_no_line_of_a_page_starts_with_a_figure_s_mark():
    """A line that opens with an HTML comment starts an HTML block: it would cut its sentence in two on the site."""
    for page in evidence.PAGES:
        for number, line in enumerate((ROOT / page).read_text().splitlines(), 1):
            assert not line.lstrip().startswith("<!-- value:"), f"{page}:{number}"


def test_an_unknown_figure_is_one_clear_error():
    with pytest.raises(CanvaslabError, match="no figure named 'nope'"):
        evidence.render_page("<!-- value:nope -->1<!-- /value -->", ROOT)


def test_an_unknown_region_or_a_missing_file_is_one_clear_error(tmp_path, capsys):
    with pytest.raises(CanvaslabError, match="no renderer named 'nope'"):
        evidence.render_page("<!-- evidence:nope -->\n<!-- /evidence -->", ROOT)
    (tmp_path / "README.md").write_text("<!-- evidence:order-mini-1.1 -->\n<!-- /evidence -->")
    assert evidence.main(["--root", str(tmp_path), "--check"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: evidence:") and len(error.strip().splitlines()) == 1
