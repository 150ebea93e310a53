"""The suite collects on a clean clone: pytest's default import mode needs unique basenames outside packages."""

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).parent


def _module_name(path: Path) -> str:
    # A test file inside a package (a folder with __init__.py) is imported under its dotted package name.
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").exists():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts)


def test_every_test_module_has_a_unique_import_name():
    seen = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        seen[_module_name(path)].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"test modules that pytest would import under one name: {clashes}"


def test_no_test_module_imports_a_conftest_by_name():
    # several folders have a conftest.py: imported by name, the first one collected wins, and the others' tests
    # fail to collect when those folders run together
    importers = [str(path.relative_to(TESTS)) for path in TESTS.rglob("*.py")
                 if any(line.split()[:2] in (["from", "conftest"], ["import", "conftest"])
                        for line in path.read_text().splitlines())]
    assert not importers, importers
