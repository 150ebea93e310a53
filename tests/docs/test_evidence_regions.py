"""The docs' evidence regions are the numbers of their result files: a page that drifts from its file fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from canvaslab.errors import CanvaslabError
from canvaslab.reports import evidence

ROOT = Path(__file__).resolve().parents[2]


def test_every_page_s_evidence_regions_match_their_files():
    assert evidence.stale_regions(ROOT) == []


def test_every_renderer_has_a_region_on_some_page():
    used = {m["name"] for page in evidence.PAGES for m in evidence.REGION.finditer((ROOT / page).read_text())}
    assert used == set(evidence.RENDERERS)


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


def test_the_generated_tables_print_what_the_validity_rules_allow():
    findings = evidence.order_mini_1_1(ROOT)
    math = next(line for line in findings.splitlines() if line.startswith("| math"))
    assert "split share 18/19" in math and "1.00 (1 wrong answer)" in math and "[1.00, 1.00]" not in math
    assert "0.96 (3 right answers)" in findings and "[0.83" not in findings
    assert "0.37" in math  # the token-level block tau at bins of 64
    assert "(no CI: 7 generations of 2 prompts)" in evidence.order_mini_1_0(ROOT)
    assert "two-sided p = 0.0045" in evidence.noise_mini_1_1(ROOT)


def test_the_targets_label_the_split_each_prose_score_comes_from():
    targets = evidence.targets_mini_1_1(ROOT)
    assert "word pairs ≥ 0.90, in-template prompts | 0.877 (held-out 0.850)" in targets
    assert "held-out: not computed" in targets


def test_an_unknown_region_or_a_missing_file_is_one_clear_error(tmp_path, capsys):
    with pytest.raises(CanvaslabError, match="no renderer named 'nope'"):
        evidence.render_page("<!-- evidence:nope -->\n<!-- /evidence -->", ROOT)
    (tmp_path / "README.md").write_text("<!-- evidence:order-mini-1.1 -->\n<!-- /evidence -->")
    assert evidence.main(["--root", str(tmp_path), "--check"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: evidence:") and len(error.strip().splitlines()) == 1
