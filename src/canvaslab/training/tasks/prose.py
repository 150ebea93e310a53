"""Open-ended prose: continue a passage of real English, from the offline assets corpus.

``prepare_passages`` cuts the corpus that ``canvaslab assets corpus`` builds (registry packages only)
into passages of a few sentences: Jane Austen's paragraphs and State of the Union sentences, grouped.
Those two sources are narrative and rhetorical English; the dictionary sources of the corpus are lists,
not prose. The passage file (one passage per line) travels with the training run, so the GPU machine
needs no network. The held-out key is the passage's text.

A prose answers file (``canvaslab mini distill``, ``canvaslab.training.distill``) replaces the training answers:
each training passage's continuation as a teacher wrote it, keyed by the passage's held-out key. Prompts, keys and
the held-out references stay the passages' own.
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


def passage_key(passage: str) -> str:
    """The held-out key of a passage (``base.split_of`` decides its split)."""
    return "prose:" + hashlib.sha256(passage.encode("utf-8")).hexdigest()[:16]


def opening_and_rest(passage: str) -> tuple[str, str]:
    """The passage's first sentence (the prompt's text) and the rest (its continuation)."""
    sents = sentences(passage)
    return sents[0], " ".join(sents[1:])


ANSWERS_FORMAT = "canvaslab-prose-answers/1"


@lru_cache(maxsize=2)
def load_answers(path: str, passages_sha256: str) -> dict[str, str]:
    """The continuations of a prose answers file, by passage key; refused unless written for these passages."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CanvaslabError(f"prose answers {path}: not readable as JSON ({error})") from None
    if not isinstance(data, dict) or data.get("format") != ANSWERS_FORMAT or not isinstance(data.get("answers"), dict):
        raise CanvaslabError(f"prose answers {path}: not a {ANSWERS_FORMAT} file (write one with `canvaslab mini distill`)")
    if data.get("passages_sha256") != passages_sha256:
        raise CanvaslabError(f"prose answers {path} were written for other passages (sha256 "
                             f"{str(data.get('passages_sha256'))[:12]}..., these: {passages_sha256[:12]}...)")
    return data["answers"]


def checked_answers_file(path: Path | None, passages: Path | None) -> str | None:
    """``path`` as ``AnswerStyle.prose_answers`` takes it, once it is known to be a prose answers file for
    ``passages`` (a clear error otherwise, before any work)."""
    if path is None:
        return None
    if passages is None:
        raise CanvaslabError(f"--prose-answers {path} needs --passages (the passages it was written for)")
    if not path.is_file():
        raise CanvaslabError(f"--prose-answers {path}: no such file (write one with `canvaslab mini distill`)")
    load_answers(str(path), hashlib.sha256(passages.read_bytes()).hexdigest())
    return str(path)


def continuation(rng: random.Random, passages: tuple[str, ...], answers: dict[str, str] | None = None) -> Example:
    """The passage's first sentence as the prompt, the rest as the answer (``answers``: the teacher's instead,
    for a training passage; held-out passages have none and keep their own)."""
    passage = rng.choice(passages)
    opening, rest = opening_and_rest(passage)
    prompt, _ = phrase(rng, rng.choice(CORES).format(s=opening), lowercase=False)
    key = passage_key(passage)
    answer = rest if answers is None else answers.get(key, rest)
    return Example("prose", "open_ended", key, prompt, answer, {"reference_continuation": rest})
