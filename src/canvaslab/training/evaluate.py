"""Quality of the `mini` models on held-out prompts, scored by the commit-order study's scorers.

The diffusion model answers through canvaslab's generate (transformers' own loop, per-row randomness)
with the checkpoint's default sampler settings; the autoregressive sibling answers greedily. Math,
factual, JSON and code answers are scored exactly as the commit-order study scores them; prose has
no right answer, so it gets a readability proxy: the share of its words that occur in the training
passages' vocabulary (random tokens score near 0, English near 1), the stricter share of its adjacent word
pairs that occur in the passages (English words in a random order score low on it), and the share of its words
among the passages' most frequent, beside the references' (runs of frequent words pass both shares, not this).
"""

from __future__ import annotations

import collections
import re
import statistics
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import torch

from canvaslab.generation import generate
from canvaslab.scoring.probes import score
from canvaslab.scoring.probes.probe import make_probe
from canvaslab.scoring.prompting import encode_prompt
from canvaslab.training.tasks import Example

_WORD = re.compile(r"[A-Za-z]+")


def split_words(text: str) -> list[str]:
    """The text's words, lower-cased (runs of ASCII letters): what every prose measure here counts."""
    return [w.lower() for w in _WORD.findall(text)]


@lru_cache(maxsize=2)
def _vocabulary(passages: str) -> frozenset[str]:
    return frozenset(split_words(Path(passages).read_text(encoding="utf-8")))


@lru_cache(maxsize=2)
def _bigrams(passages: str) -> frozenset[tuple[str, str]]:
    words = split_words(Path(passages).read_text(encoding="utf-8"))
    return frozenset(zip(words, words[1:]))


def english_fraction(text: str, passages: Path | str) -> float:
    """Share of the text's words found in the passages' vocabulary (0 when there are no words)."""
    words = split_words(text)
    vocabulary = _vocabulary(str(passages))
    return sum(w in vocabulary for w in words) / len(words) if words else 0.0


def english_bigram_fraction(text: str, passages: Path | str) -> float:
    """Share of the text's adjacent word pairs that occur in the passages (0 with fewer than two words): a
    stricter proxy than the word share, which English words in a random order pass."""
    words = split_words(text)
    bigrams = _bigrams(str(passages))
    pairs = list(zip(words, words[1:]))
    return sum(pair in bigrams for pair in pairs) / len(pairs) if pairs else 0.0


@lru_cache(maxsize=2)
def frequent_words(passages: str, count: int = 20) -> frozenset[str]:
    """The passages' ``count`` most frequent words ("the", "of", "and", ...)."""
    counts = collections.Counter(split_words(Path(passages).read_text(encoding="utf-8")))
    return frozenset(word for word, _ in counts.most_common(count))


def frequent_word_fraction(text: str, passages: Path | str) -> float | None:
    """Share of the text's words among the passages' 20 most frequent (None without words). Both shares above
    pass runs of frequent words ("the the, of the, to to of"); English sits near its references' value here."""
    words = split_words(text)
    frequent = frequent_words(str(passages))
    return sum(w in frequent for w in words) / len(words) if words else None


def judge(example: Example, text: str) -> bool | None:
    probe = make_probe(example.regime, example.key, example.prompt, example.reference)
    return score(probe, text)


def _chunks(items: Sequence, size: int):
    for start in range(0, len(items), size):
        yield items[start:start + size]


def answer_diffusion(loaded, examples: Sequence[Example], *, batch_size: int = 64, seed: int = 0,
                     generation: dict | None = None) -> list[dict]:
    """Generate every example's answer with the model's defaults (``generation`` overrides some of them); text,
    decoder passes (accept calls) and where the answer's end-of-sequence token stands (None: it never ended)."""
    rows = []
    for chunk in _chunks(examples, batch_size):
        prompts = [encode_prompt(loaded.tokenizer, e.prompt) for e in chunk]
        output = generate(loaded, prompts, seed=seed, generation=generation)
        rows += [{"text": r.text, "passes": sum(r.passes), "canvases": len(r.passes), "eos_position": r.eos_position}
                 for r in output.rows]
    return rows


@torch.no_grad()
def answer_causal(model, tokenizer, examples: Sequence[Example], *, max_new_tokens: int, batch_size: int = 64,
                  eos_ids: Sequence[int] = (1, 106), temperature: float | None = None) -> list[dict]:
    """Greedy answers of the autoregressive sibling (left-padded batches); sampled from its full distribution
    at ``temperature`` instead when given (seed with ``torch.manual_seed`` first)."""
    sampling = {"do_sample": False} if temperature is None else {
        "do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    rows, pad = [], tokenizer.pad_token_id
    for chunk in _chunks(examples, batch_size):
        prompts = [encode_prompt(tokenizer, e.prompt) for e in chunk]
        width = max(map(len, prompts))
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=model.device)
        mask = (torch.arange(width, device=model.device)[None] >= torch.tensor(
            [width - len(p) for p in prompts], device=model.device)[:, None]).long()
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                             eos_token_id=list(eos_ids), pad_token_id=pad, **sampling)
        rows += [{"text": tokenizer.decode(_until_eos(seq[width:].tolist(), eos_ids), skip_special_tokens=True)}
                 for seq in out]
    return rows


def _until_eos(tokens: list[int], eos_ids: Sequence[int]) -> list[int]:
    end = next((i for i, t in enumerate(tokens) if t in eos_ids), len(tokens))
    return tokens[:end]


def summarize(examples: Sequence[Example], answers: Sequence[dict], passages: Path | str | None) -> dict:
    """Per task: n, accuracy (or the English share for prose), median accept calls where known."""
    by_task: dict[str, dict] = {}
    for example, answer in zip(examples, answers):
        entry = by_task.setdefault(example.task, {"n": 0, "scores": [], "passes": [], "bigrams": [],
                                                         "frequent": [], "reference_frequent": []})
        entry["n"] += 1
        if example.task == "prose":
            value = english_fraction(answer["text"], passages) if passages else None
            if passages:
                answer["bigram_score"] = english_bigram_fraction(answer["text"], passages)
                entry["bigrams"].append(answer["bigram_score"])
                answer["frequent_word_share"] = frequent_word_fraction(answer["text"], passages)
                entry["frequent"].append(answer["frequent_word_share"])
                entry["reference_frequent"].append(frequent_word_fraction(example.answer, passages))
        else:
            value = judge(example, answer["text"])
        answer["score"] = value
        if value is not None:
            entry["scores"].append(float(value))
        if "passes" in answer:
            entry["passes"].append(answer["passes"])
    summary = {}
    for task, entry in by_task.items():
        metric = "english_word_share" if task == "prose" else "accuracy"
        summary[task] = {"n": entry["n"], metric: statistics.fmean(entry["scores"]) if entry["scores"] else None}
        if entry["bigrams"]:
            summary[task]["english_bigram_share"] = statistics.fmean(entry["bigrams"])
        for key, values in (("frequent_word_share", entry["frequent"]),
                            ("reference_frequent_word_share", entry["reference_frequent"])):
            if any(v is not None for v in values):
                summary[task][key] = statistics.fmean(v for v in values if v is not None)
        if entry["passes"]:
            summary[task]["median_accept_calls"] = statistics.median(entry["passes"])
    return summary
