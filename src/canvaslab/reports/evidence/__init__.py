"""The docs' evidence, rendered from the result files under ``benchmarks/results/``.

A page marks each generated table ``<!-- evidence:NAME -->`` ... ``<!-- /evidence -->`` and each figure inside a
sentence ``<!-- value:NAME -->FIGURE<!-- /value -->``; ``render_page`` refills both from their files, so a number
on the page is the number in its file, printed through the validity rules (``canvaslab.analysis.validity``). The
marks are HTML comments, invisible on the site and on GitHub, and the committed pages hold plain Markdown; a test
renders them again and fails on any difference.

    python -m canvaslab.reports.evidence            # rewrite the regions and figures of every page
    python -m canvaslab.reports.evidence --check    # exit 1 and name the regions and figures that differ
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from canvaslab.errors import CanvaslabError
from canvaslab.reports.evidence.figures import figures
from canvaslab.reports.evidence.tables import RENDERERS

PAGES = ("README.md", "docs/findings-mini.md", "docs/mini-model.md", "docs/mini.md", "docs/evidence.md",
         "docs/commit-order-study.md", "docs/noise-study.md", "docs/serving.md",
         "docs/invariant-generation.md")
REGION = re.compile(r"(<!-- evidence:(?P<name>[a-z0-9._-]+) -->\n)(?P<body>.*?)(<!-- /evidence -->)", re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
VALUE = re.compile(r"(<!-- value:(?P<name>[a-z0-9._-]+) -->)(?P<body>.*?)(<!-- /value -->)")


def render_page(text: str, root: Path) -> str:
    """The page with every evidence region and every figure in a sentence refilled from its result files."""
    def fill(match: re.Match) -> str:
        name = match["name"]
        if name not in RENDERERS:
            raise CanvaslabError(f"evidence: no renderer named {name!r} (known: {', '.join(RENDERERS)})")
        return f"{match[1]}{RENDERERS[name](root)}\n{match[4]}"
    prose = CODE_SPAN.sub("", text)  # a page may show a mark as code: `<!-- value:NAME -->`
    for mark, pattern in (("<!-- evidence:", REGION), ("<!-- value:", VALUE)):
        if prose.count(mark) != len(pattern.findall(prose)):  # a mark the patterns skip would go unchecked
            raise CanvaslabError(f"evidence: a {mark!r} mark whose name is not a-z, 0-9, '.', '_', '-', or that is "
                                 "not closed")
    text = REGION.sub(fill, text)
    if not VALUE.search(text):
        return text
    known = figures(root)

    def value(match: re.Match) -> str:
        if match["name"] not in known:
            raise CanvaslabError(f"evidence: no figure named {match['name']!r}")
        return f"{match[1]}{known[match['name']]}{match[4]}"
    return VALUE.sub(value, text)


def _page(root: Path, page: str) -> str:
    path = root / page
    if not path.is_file():
        raise CanvaslabError(f"evidence: the page {path} is missing")
    return path.read_text(encoding="utf-8")


def stale_regions(root: Path, pages: tuple[str, ...] = PAGES) -> list[str]:
    """``page: region`` for every region whose text differs from its files."""
    stale = []
    for page in pages:
        text = _page(root, page)
        rendered = render_page(text, root)
        fresh = {m["name"]: m["body"] for m in REGION.finditer(rendered)}
        stale += [f"{page}: {m['name']}" for m in REGION.finditer(text) if fresh[m["name"]] != m["body"]]
        stale += [f"{page}: value {old['name']} ({old['body']}, the files say {new['body']})"
                  for old, new in zip(VALUE.finditer(text), VALUE.finditer(rendered)) if old["body"] != new["body"]]
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m canvaslab.reports.evidence", description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository root (default: .)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a region differs")
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = stale_regions(args.root)
            print("\n".join(stale) or "every evidence region matches its files")
            return 1 if stale else 0
        for page in PAGES:
            (args.root / page).write_text(render_page(_page(args.root, page), args.root), encoding="utf-8")
    except CanvaslabError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
