"""Sequence-level distillation of the prose answers (Kim and Rush, 2016): a teacher continues every training
passage's opening, and those continuations become the training answers (``AnswerStyle.prose_answers``).

Why: a denoiser that writes all positions of a canvas at once mixes several plausible continuations into one
("the multimodality problem" of non-autoregressive generation, Gu et al., 2018); trained on one teacher's
continuations, which are far more predictable than the passages' own, it has fewer to mix. The teacher is the
autoregressive sibling (``mini-ar``), greedy. Held-out passages are never shown to the teacher, and their
references stay the passages' own, so the evaluation is unchanged.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from canvaslab.io import write_json_atomic
from canvaslab.training.evaluate import answer_causal
from canvaslab.training.tasks.base import Example, split_of
from canvaslab.training.tasks.prose import ANSWERS_FORMAT, CORES, load_passages, opening_and_rest, passage_key

# the teacher's prompt: the first phrasing of the prose task, bare (answers hardly depend on the wrapping)
TEACHER_CORE = CORES[0]


def training_passages(passages: Path) -> list[tuple[str, str, str]]:
    """(key, opening, own continuation) of each distinct training passage, in file order."""
    rows, seen = [], set()
    for passage in load_passages(str(passages)):
        key = passage_key(passage)
        if split_of(key) == "train" and key not in seen:
            seen.add(key)
            rows.append((key, *opening_and_rest(passage)))
    return rows


def distill_prose(passages: Path, teacher: Path, tokenizer, out: Path, *, teacher_name: str | None = None,
                  device: str = "cpu", batch_size: int = 64, max_new_tokens: int = 128, limit: int | None = None,
                  log=print) -> dict:
    """Write ``out``: the teacher's (a checkpoint folder; ``teacher_name``: what the file calls it) greedy
    continuation of every training passage (the first ``limit``); a passage whose continuation comes back empty
    keeps its own (counted). Returns the file's summary."""
    rows = training_passages(passages)[:limit]
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    model = AutoModelForCausalLM.from_pretrained(teacher, dtype=dtype).to(device).eval()
    examples = [Example("prose", "open_ended", key, TEACHER_CORE.format(s=opening), rest) for key, opening, rest in rows]
    started = time.perf_counter()
    texts = [" ".join(a["text"].split()) for a in answer_causal(model, tokenizer, examples, max_new_tokens=max_new_tokens,
                                                                 batch_size=batch_size)]
    answers = {key: text or rest for (key, _, rest), text in zip(rows, texts)}
    summary = {"format": ANSWERS_FORMAT, "passages_sha256": hashlib.sha256(passages.read_bytes()).hexdigest(),
               "teacher": teacher_name or str(teacher), "decoding": "greedy", "prompt_core": TEACHER_CORE,
               "max_new_tokens": max_new_tokens, "passages": len(rows), "kept_own": sum(not t for t in texts),
               "seconds": round(time.perf_counter() - started, 1), "device": device}
    write_json_atomic(out, {**summary, "answers": answers})
    log(f"distilled {len(rows):,} training passages in {summary['seconds']} s ({summary['kept_own']} kept their own)")
    return summary
