"""The op count the README and the op-scan page give is the scan's own: one case per op in ``OPS``."""

from __future__ import annotations

import re

from canvaslab.studies.op_scan import OPS
from docs_sources import DOCS, README


def _section(text: str, heading: str) -> str:
    return text.split(heading, 1)[1].split("\n#", 1)[0]


def test_the_readme_and_the_page_count_the_scans_ops():
    readme = _section(README.read_text(encoding="utf-8"), "### Op scan")
    assert [int(n) for n in re.findall(r"\((\d+) of them", readme)] == [len(OPS)], readme
    page = (DOCS / "op-scan.md").read_text(encoding="utf-8")
    assert f"## The {len(OPS)} ops" in page
