"""The documentation site builds with ``mkdocs build --strict``: a broken link or anchor, a page missing from the
navigation or a missing included file (CHANGELOG.md) fails the build, and so this test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from docs_sources import DOCS, ROOT

ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    # snippets' base_path is relative to the working folder: the repository root, as for `mkdocs serve`
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site),
                           "--config-file", str(root / "mkdocs.yml")],
                          cwd=root, env=ENV, capture_output=True, text=True, timeout=300)


def nav_pages(nav) -> list[str]:
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_the_site_builds_strictly(tmp_path):
    result = build(ROOT, tmp_path / "site")
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    assert "WARNING" not in result.stderr, result.stderr
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
    assert config["strict"] == "true" and config["theme"]["name"] == "material"
    for page in nav_pages(config["nav"]):
        built = tmp_path / "site" / ("index.html" if page == "index.md" else Path(page).with_suffix("") / "index.html")
        assert built.is_file(), f"{page} was not built"
    pages = sorted(str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md"))
    assert sorted(nav_pages(config["nav"])) == pages, "every page under docs/ is in the nav, and no other"


def test_a_broken_link_fails_the_build(tmp_path):
    """Strict mode is really on: the same site with one broken link does not build."""
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(DOCS, tmp_path / "docs")
    (tmp_path / "CHANGELOG.md").write_text("# Changelog\n", encoding="utf-8")
    with open(tmp_path / "docs" / "index.md", "a", encoding="utf-8") as page:
        page.write("\nSee [a page that is not there](no-such-page.md).\n")
    result = build(tmp_path, tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stdout + result.stderr
