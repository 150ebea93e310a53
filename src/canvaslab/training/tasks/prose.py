"""Open-ended prose: continue a passage of real English, from the offline assets corpus.

``prepare_passages`` cuts the corpus that ``canvaslab assets corpus`` builds (registry packages only)
into passages of a few sentences: Jane Austen's paragraphs and State of the Union sentences, grouped.
Those two sources are narrative and rhetorical English; the dictionary sources of the corpus are lists,
not prose. The passage file (one passage per line) travels with the training run, so the GPU machine
needs no network. The held-out key is the passage's text.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from functools import lru_cache
from pathlib import Path

from canvaslab.errors import CanvaslabError
from canvaslab.training.tasks.base import Example, phrase

PROSE_SOURCES = ("janeausten", "sotu")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")
MIN_CHARS, MAX_CHARS = 160, 700
CORES = ("Continue this text: {s}", "Write what comes next: {s}", "Keep going: {s}",
         "Continue the passage.\n{s}", "Finish this paragraph: {s}", "What comes after this? {s}")


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def _group(sents: list[str]) -> list[str]:
    """Consecutive sentences grouped into passages of MIN_CHARS..MAX_CHARS characters."""
    passages, current = [], []
    for sentence in sents:
        if len(sentence) > MAX_CHARS // 2:
            current = []
            continue
        current.append(sentence)
        text = " ".join(current)
        if len(text) >= MIN_CHARS and len(current) >= 2:
            if len(text) <= MAX_CHARS:
                passages.append(text)
            current = []
    return passages


def _documents_by_source(corpus: Path) -> dict[str, list[str]]:
    manifest_file = corpus.with_name(f"{corpus.stem}.manifest.json")
    if not corpus.is_file() or not manifest_file.is_file():
        raise CanvaslabError(f"{corpus}: no corpus with manifest (build one with `canvaslab assets corpus --out FILE`)")
    manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
    documents = corpus.read_text(encoding="utf-8").split(manifest["document_separator"])
    by_source, start = {}, 0
    for source in manifest["sources"]:
        by_source[source["name"]] = documents[start:start + source["documents"]]
        start += source["documents"]
    return by_source


def prepare_passages(corpus: Path, out: Path) -> int:
    """Write the prose passages (one per line) of the corpus's narrative sources; how many."""
    by_source = _documents_by_source(corpus)
    passages: list[str] = []
    for name in PROSE_SOURCES:
        for document in by_source.get(name, []):
            for paragraph in document.split("\n"):
                passages.extend(_group(sentences(" ".join(paragraph.split()))))
    if not passages:
        raise CanvaslabError(f"{corpus}: no prose passages from sources {', '.join(PROSE_SOURCES)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(passages) + "\n", encoding="utf-8")
    return len(passages)


@lru_cache(maxsize=2)
def load_passages(path: str) -> tuple[str, ...]:
    return tuple(line for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip())


def continuation(rng: random.Random, passages: tuple[str, ...]) -> Example:
    """The passage's first sentence as the prompt, the rest as the answer."""
    passage = rng.choice(passages)
    sents = sentences(passage)
    opening, rest = sents[0], " ".join(sents[1:])
    prompt, _ = phrase(rng, rng.choice(CORES).format(s=opening), lowercase=False)
    key = "prose:" + hashlib.sha256(passage.encode("utf-8")).hexdigest()[:16]
    return Example("prose", "open_ended", key, prompt, rest, {"reference_continuation": rest})
