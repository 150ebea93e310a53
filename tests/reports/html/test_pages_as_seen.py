"""The report pages as a reader sees them in headless Chromium (one browser for the module): a batch study's
page, a comparison of two folders and a commit-order page. Every visible text is at least 11 px at 100% zoom
(figure text scaled as drawn), the prompt and batch-size selectors change the canvas grids, every table's CSV
and JSON downloads hold the table's cells, and each page is screenshotted."""

from __future__ import annotations

import csv
import io
import json
import urllib.parse

import pytest

from canvaslab.api import report as build_report
from canvaslab.reports.html.batch_panel import glance_rows
from canvaslab.reports.readers import batch_study

# Every visible text node's rendered size in CSS px: its computed font size, times the SVG's scale for figure text.
TEXT_SIZES = """(() => {
  const sizes = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode, el = node.parentElement;
    if (!node.textContent.trim() || !el || el.getClientRects().length === 0) continue;
    let size = parseFloat(getComputedStyle(el).fontSize);
    const text = el.closest("svg") && el.closest("text");
    if (text) { const m = text.getScreenCTM(); size *= Math.hypot(m.a, m.b); }
    sizes.push([Math.round(size * 100) / 100, node.textContent.trim().slice(0, 40)]);
  }
  return sizes;
})()"""
SHOWN_GRIDS = """[...document.querySelectorAll('.grids')].filter(g => g.offsetParent !== null)
  .map(g => [g.dataset.dataset, [...g.querySelectorAll('.grid-box')].filter(b => !b.hidden).map(b => Number(b.dataset.batch))])"""


@pytest.fixture(scope="module")
def browser(module_chromium):
    return module_chromium


@pytest.fixture(scope="module")
def pages(tmp_path_factory, writers, study_folders):
    root = tmp_path_factory.mktemp("pages")
    main = root / "main"
    main.mkdir()
    writers.batch_study(main, prompts=2)
    folders = study_folders["folders"]
    return {"main": build_report([main], root / "main.html").html,
            "compare": build_report([folders["stock"], folders["invariant"]], root / "compare.html").html,
            "order": build_report([folders["order"]], root / "order.html").html,
            "study": batch_study.read(main)}


@pytest.mark.parametrize("name", ["main", "compare", "order"])
def test_every_visible_text_is_at_least_11_px_and_the_page_is_screenshotted(browser, pages, name, tmp_path):
    browser.open(pages[name].as_uri())
    browser.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    sizes = browser.evaluate(TEXT_SIZES)
    assert len(sizes) > 50
    small = [s for s in sizes if s[0] < 10.95]
    assert small == []
    assert browser.errors() == []
    assert browser.screenshot(tmp_path / f"{name}.png").stat().st_size > 20_000


def test_prompt_and_batch_size_selectors_change_the_grids(browser, pages):
    browser.open(pages["main"].as_uri())
    assert browser.evaluate(SHOWN_GRIDS) == [["batch0-0", [1, 2, 3, 4]]]
    options = browser.evaluate("[...document.getElementById('prompt-select').options].map(o => o.value)")
    assert options == ["builtin-0", "builtin-1"]
    browser.evaluate("const p = document.getElementById('prompt-select'); p.value = 'builtin-1';"
                     "p.dispatchEvent(new Event('change'))")
    assert browser.evaluate(SHOWN_GRIDS) == [["batch0-1", [1, 2, 3, 4]]]
    browser.evaluate("const b = document.getElementById('batch-select'); b.value = '3';"
                     "b.dispatchEvent(new Event('change'))")
    assert browser.evaluate(SHOWN_GRIDS) == [["batch0-1", [1, 3]]]
    rows = browser.evaluate("[...document.querySelectorAll('.per-prompt:not([hidden]) table.data tbody tr')]"
                            ".filter(r => !r.hidden).map(r => r.cells[0].textContent)")
    assert rows == ["1 (reference)", "3"]
    figures = browser.evaluate("[...document.querySelectorAll('.per-prompt:not([hidden]) figure[data-batch]')]"
                               ".filter(f => f.offsetParent !== null).map(f => f.dataset.batch)")
    assert figures == ["3"]


def _download(browser, index: int, kind: str) -> str:
    href = browser.evaluate(f"[...document.querySelectorAll('.downloads')][{index}]"
                            f".querySelector('a[download$=\".{kind}\"]').href")
    prefix, _, data = href.partition(",")
    assert prefix.startswith("data:")
    return urllib.parse.unquote(data)


def test_csv_and_json_downloads_hold_the_tables_cells(browser, pages):
    browser.open(pages["main"].as_uri())
    expected = [["measurement", "result"], *map(list, glance_rows(pages["study"]))]
    assert list(csv.reader(io.StringIO(_download(browser, 0, "csv")))) == expected
    assert json.loads(_download(browser, 0, "json")) == [dict(zip(expected[0], row)) for row in expected[1:]]
    tables = browser.evaluate("document.querySelectorAll('table.data').length")
    assert browser.evaluate("document.querySelectorAll('.downloads').length") == tables


def test_a_comparison_opens_with_its_table_of_differences(browser, pages):
    browser.open(pages["compare"].as_uri())
    first = browser.evaluate("document.querySelector('main section').id")
    assert first == "compare"
    marked = browser.evaluate("[...document.querySelectorAll('#compare tr.differs th')].map(t => t.textContent)")
    assert marked == ["mode ≠ differs"]


def test_the_commit_order_page_lists_every_generation_beside_the_baseline(browser, pages):
    browser.open(pages["order"].as_uri())
    browser.evaluate("document.querySelector('details.drill').open = true")
    rows = browser.evaluate("[...document.querySelectorAll('details.drill tbody tr')].map(r => "
                            "[...r.cells].map(c => c.textContent))")
    assert len(rows) == 24
    assert rows[0][2] == f"question {rows[0][0].split('#')[0]}" and rows[0][4] in ("correct", "wrong")
    assert rows[0][6].startswith("baseline says ")
