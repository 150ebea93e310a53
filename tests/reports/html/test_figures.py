"""Figures as files: every SVG canvaslab writes is well-formed XML, whatever text the data put in it."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import matplotlib.pyplot as plt

from canvaslab.reports.html.figures import FigureSet


def test_control_characters_in_figure_text_become_visible_symbols_and_the_svg_stays_xml(tmp_path):
    # a prompt id or token text can hold any character; XML 1.0 forbids most below 0x20
    fig, axis = plt.subplots()
    axis.set_title("row\x00 id\x1b[31m\x7f end\tok")
    inline = FigureSet(tmp_path).save(fig, "fig", alt="a figure")
    svg = (tmp_path / "fig.svg").read_text(encoding="utf-8")
    ET.fromstring(svg)  # raises on a NUL or ESC character
    assert "row\u2400 id\u241b[31m\u2421 end" in svg and "\x00" not in inline and "\x1b" not in inline
