"""The README and the docs cite only what exists, and read as a user's document, not a diary.

- Every repository path they name in code (``benchmarks/results/h200-invariant/``, ``src/...``, ``models/...``)
  exists in the tree; a path followed by "at commit C" exists in that commit instead (skipped where the clone
  lacks the commit). Relative links of the README point at files that exist.
- The README is at most 250 lines.
- No "session N", "run N" or "issue N" narrative, in the README or anywhere under docs/.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from docs_sources import DOCS, README, ROOT, code_spans, documents, name

PATH = re.compile(r"(?<![\w./-])(?:\./)?((?:benchmarks|src|tests|models|docs|\.ci)/[\w.*/-]*|"
                  r"(?:pyproject\.toml|constraints-cpu\.txt|mkdocs\.yml|CHANGELOG\.md)(?![\w.-]))")
AT_COMMIT = re.compile(r"^[^`\n]{0,20}?\bat commit\s+([0-9a-f]{7,40})\b")
DIARY = re.compile(r"session [0-9]|\brun [0-9]+\b|\bissue #?[0-9]+", re.I)


def cited_paths() -> list[tuple[str, str, str | None]]:
    """(document, path, commit or None) for every repository path named in a code span or block."""
    found = []
    for document in documents():
        for content, after in code_spans(document.read_text(encoding="utf-8")):
            at_commit = AT_COMMIT.match(after)
            for match in PATH.finditer(content):
                path = match.group(1).rstrip(".,:;")
                found.append((name(document), path, at_commit.group(1) if at_commit else None))
    return sorted(set(found), key=lambda item: (item[0], item[1], item[2] or ""))


CITED = cited_paths()


def _exists_in_tree(path: str) -> bool:
    return any(ROOT.glob(path.rstrip("/"))) if "*" in path else (ROOT / path).exists()


def _commit_available(commit: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True).returncode == 0


def test_the_documents_cite_paths():
    assert len(CITED) > 30
    assert any(path.startswith("benchmarks/results/") for _, path, _ in CITED)
    assert any(commit for _, _, commit in CITED)


@pytest.mark.parametrize("document, path, commit", CITED,
                         ids=[f"{doc}: {path}" + (f" at {commit}" if commit else "") for doc, path, commit in CITED])
def test_cited_paths_exist(document, path, commit):
    if commit is None:
        assert _exists_in_tree(path), f"{document} cites {path}, which is not in the tree"
        return
    if not _commit_available(commit):
        pytest.skip(f"this clone has no commit {commit}")
    listed = subprocess.run(["git", "ls-tree", commit, "--", path.rstrip("/")], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout
    assert listed, f"{document} cites {path} at commit {commit}, which that commit does not have"


def test_readme_links_point_at_files():
    text = README.read_text(encoding="utf-8")
    targets = [t for t in re.findall(r"\]\(([^)\s#]+)", text) if not re.match(r"[a-z]+:", t)]
    assert targets
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_the_readme_is_short():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= 250, f"README.md has {lines} lines; keep it at most 250 and move detail to docs/"


def test_no_development_diary():
    found = []
    for path in [README, *sorted(p for p in DOCS.rglob("*") if p.is_file())]:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # images
        found += [f"{name(path)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}" for m in DIARY.finditer(text)]
    assert not found, "development-diary wording in the user documentation:\n" + "\n".join(found)
