"""From examples to tensors: a tokenized pool of training examples and the two models' batches.

The pool is generated in shards (one seeded generator each, run in worker processes) so that half a
million examples take seconds on a many-core machine and are the same for any number of workers.
"""

from __future__ import annotations

import os
import random
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from canvaslab.training import chat
from canvaslab.training.tasks import AnswerStyle, Mixture

SHARD = 4096


def _shard_texts(args: tuple[str | None, int, int, int, AnswerStyle, dict | None, str]) -> list[tuple[str, str, str]]:
    passages, seed, shard, count, style, shares, data = args
    mixture, rng = Mixture(passages, style, shares, data), random.Random(f"mini-train/{seed}/{shard}")
    return [(e.task, chat.prompt_text(e.prompt), chat.answer_text(e.answer))
            for e in (mixture.sample(rng, "train") for _ in range(count))]


def generate_texts(passages: Path | None, count: int, seed: int, workers: int = 1,
                   style: AnswerStyle = AnswerStyle(), shares: dict | None = None,
                   data: str = "shipped") -> list[tuple[str, str, str]]:
    """``count`` chat-formatted training exchanges (task, prompt text, answer text), deterministic in ``seed``;
    ``shares``: overrides of the tasks' shares (``tasks.mixture_shares``); ``data``: the data version
    (``choices.DATA_VERSIONS``)."""
    jobs = [(str(passages) if passages else None, seed, shard, min(SHARD, count - shard * SHARD), style, shares, data)
            for shard in range((count + SHARD - 1) // SHARD)]
    if workers <= 1:
        return [row for job in jobs for row in _shard_texts(job)]
    with ProcessPoolExecutor(workers) as pool:
        return [row for rows in pool.map(_shard_texts, jobs) for row in rows]


@dataclass
class Pool:
    """Token ids of every example: prompt ids and answer ids (the answer ends with ``<end_of_turn>``)."""

    tasks: list[str]
    prompts: list[list[int]]
    answers: list[list[int]]

    @classmethod
    def build(cls, tokenizer, rows: list[tuple[str, str, str]], max_answer_tokens: int) -> "Pool":
        tasks = [task for task, _, _ in rows]
        prompts = tokenizer([p for _, p, _ in rows], add_special_tokens=False)["input_ids"]
        answers = tokenizer([a for _, _, a in rows], add_special_tokens=False)["input_ids"]
        return cls(tasks, prompts, [a[:max_answer_tokens] for a in answers])

    def save(self, path: Path) -> None:
        """Write the pool to one file, atomically (a resumed run reloads it instead of generating it again)."""
        def flat(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.tensor([t for row in rows for t in row], dtype=torch.int32), torch.tensor(list(map(len, rows)))
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        torch.save({"tasks": self.tasks, "prompts": flat(self.prompts), "answers": flat(self.answers)}, partial)
        os.replace(partial, path)

    @classmethod
    def load(cls, path: Path) -> "Pool":
        data = torch.load(path, weights_only=True)

        def rows(flat: tuple[torch.Tensor, torch.Tensor]) -> list[list[int]]:
            return [part.tolist() for part in flat[0].split(flat[1].tolist())]
        return cls(data["tasks"], rows(data["prompts"]), rows(data["answers"]))

    def __len__(self) -> int:
        return len(self.prompts)

    def tokens(self) -> int:
        return sum(map(len, self.prompts)) + sum(map(len, self.answers))


PAD_MULTIPLE = 16  # few distinct shapes: GPU kernels are chosen and cached per shape


def _left_pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = -(-max(map(len, rows)) // PAD_MULTIPLE) * PAD_MULTIPLE
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(row)
        mask[i, width - len(row):] = True
    return ids, mask


def diffusion_rows(pool: Pool, indices: list[int], canvas_length: int, rng: random.Random, pad: int = 0):
    """Encoder input (prompt + earlier canvases) and target canvas for each example; for answers longer
    than one canvas, which canvas is trained is drawn uniformly (generate makes them one after another)."""
    prefixes, canvas = [], torch.full((len(indices), canvas_length), pad, dtype=torch.long)
    for row, index in enumerate(indices):
        answer = pool.answers[index]
        block = rng.randrange(max(1, -(-len(answer) // canvas_length)))
        prefixes.append(pool.prompts[index] + answer[: block * canvas_length])
        target = answer[block * canvas_length:(block + 1) * canvas_length]
        canvas[row, : len(target)] = torch.tensor(target)
    encoder_ids, encoder_mask = _left_pad(prefixes, pad)
    return encoder_ids, encoder_mask, canvas


def causal_rows(pool: Pool, indices: list[int], pad: int = 0):
    """Right-padded prompt + answer, labels only on the answer (as in supervised chat fine-tuning)."""
    sequences = [pool.prompts[i] + pool.answers[i] for i in indices]
    width = max(map(len, sequences))
    ids = torch.full((len(indices), width), pad, dtype=torch.long)
    labels = torch.full((len(indices), width), -100, dtype=torch.long)
    mask = torch.zeros((len(indices), width), dtype=torch.long)
    for row, index in enumerate(indices):
        prompt, answer = pool.prompts[index], pool.answers[index]
        ids[row, : len(prompt) + len(answer)] = torch.tensor(prompt + answer)
        labels[row, len(prompt): len(prompt) + len(answer)] = torch.tensor(answer)
        mask[row, : len(prompt) + len(answer)] = 1
    return ids, mask, labels
