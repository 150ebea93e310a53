"""The report in a real headless Chromium: it loads without console errors and requests nothing, the
pass slider (keyboard and input event) changes the shown pass and every cell's state as the study
recorded it, play/pause toggles, hover shows token text and entropy, the figures render, and a
screenshot is written."""

from __future__ import annotations

import pytest

from canvaslab.api import report as build_report
from canvaslab.reports.html.canvas_grid import canvas_dataset
from canvaslab.reports.readers import batch_study

GRIDS = """[...document.querySelectorAll('.grids[data-dataset="batch0-0"] .grid-box')].map(b => ({
  batch: Number(b.dataset.batch), shown: b.dataset.shownPass,
  cells: [...b.querySelectorAll('.cells span')].map(s => s.className.slice(1)).join('')}))"""


@pytest.fixture(scope="module")
def page(study_folders, tmp_path_factory):
    folders = study_folders["folders"]
    out = tmp_path_factory.mktemp("page") / "report.html"
    build_report([folders[n] for n in ("stock", "invariant", "order", "noise", "ops")], out)
    study = batch_study.read(folders["stock"])
    return out, canvas_dataset(study, "builtin-0", "batch0-0", "stock")


def _expected(dataset, k):
    return [{"batch": size["B"], "shown": f"0:{k}", "cells": size["passes"][k]["state"]} for size in dataset["sizes"]]


def test_page_loads_quietly_and_requests_nothing(chromium, page, tmp_path):
    path, _ = page
    chromium.open(path.as_uri())
    assert chromium.errors() == []
    # The document itself is the only load; data: URIs (the SVGs' embedded rasters) are not requests.
    assert [url for url in chromium.requests() if not url.startswith("data:")] == [path.as_uri()]
    sizes = chromium.evaluate("[...document.querySelectorAll('figure svg, img')].map(e => "
                              "[e.getBoundingClientRect().width, e.getBoundingClientRect().height])")
    assert len(sizes) >= 10 and all(w > 50 and h > 50 for w, h in sizes)
    shot = chromium.screenshot(tmp_path / "report.png", full_page=True)
    assert shot.stat().st_size > 20_000


def test_slider_moves_every_grid_by_keyboard_and_input_event(chromium, page):
    path, dataset = page
    chromium.open(path.as_uri())
    passes = len(dataset["sizes"][0]["passes"])
    assert chromium.evaluate(GRIDS) == _expected(dataset, passes - 1)  # opens on the last pass
    assert chromium.evaluate("document.getElementById('pass-slider').labels.length") == 1
    chromium.evaluate("document.getElementById('pass-slider').focus()")
    assert chromium.evaluate("document.activeElement.id") == "pass-slider"
    chromium.press("Home")
    assert chromium.evaluate(GRIDS) == _expected(dataset, 0)
    chromium.press("ArrowRight")
    chromium.press("ArrowRight")
    shown = chromium.evaluate(GRIDS)
    assert shown == _expected(dataset, 2) and "2" in shown[2]["cells"]  # B=3's planted difference shows
    assert "denoising pass 3 of 5" in chromium.evaluate("document.getElementById('pass-label').textContent")
    chromium.evaluate("const s = document.getElementById('pass-slider'); s.value = '1';"
                      "s.dispatchEvent(new Event('input', {bubbles: true}))")
    assert chromium.evaluate(GRIDS) == _expected(dataset, 1)
    # both folders' grids follow the one slider
    assert chromium.evaluate("document.querySelector('.grids[data-dataset=\"batch1-0\"] .grid-box').dataset.shownPass") == "0:1"


def test_play_pause_and_hover(chromium, page):
    path, _ = page
    chromium.open(path.as_uri())
    chromium.evaluate("document.getElementById('play').click()")
    assert chromium.evaluate("document.getElementById('play').getAttribute('aria-pressed')") == "true"
    chromium.evaluate("new Promise(r => setTimeout(r, 900))")
    assert chromium.evaluate("document.getElementById('pass-slider').value") != "4"  # it advanced and wrapped
    chromium.evaluate("document.getElementById('play').click()")
    assert chromium.evaluate("document.getElementById('play').getAttribute('aria-pressed')") == "false"
    chromium.evaluate("document.querySelector('.grids[data-dataset=\"batch0-0\"] .cells').scrollIntoView({block: 'center'})")
    x, y = chromium.evaluate("(() => { const r = document.querySelector('.grids[data-dataset=\"batch0-0\"] .cells span')"
                             ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
    chromium.send("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
    tip = chromium.evaluate("document.getElementById('tip').textContent")
    assert "position 0" in tip and '"tok' in tip and "entropy 0.00 nats" in tip
