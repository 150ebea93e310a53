"""Probe-versus-load: fixed probe requests answered alone, then again amid concurrent random traffic.

Each probe is sent alone first (one at a time, nothing else in flight). Then, for each concurrency level C,
C other clients send random requests back to back (random prompts of random lengths, random ``max_tokens``,
seeds and ``n``, completions and chat, a quarter of them streamed), and while they do, the probes are sent again, all at once. A probe
*differs* when its answer's bytes, all but ``id`` and ``created``, differ from its answer alone (for a stream:
the sequence of its chunks). In invariant mode none may differ.

Used by ``tests/serving`` and ``benchmarks/serve_load.py``; needs ``httpx`` (the ``test`` extra).
"""

from __future__ import annotations

import asyncio
import collections
import json
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

WORDS = ("the", "man", "said", "that", "water", "in", "river", "was", "cold", "small", "end", "put", "home", "read",
         "hand", "large", "even", "land", "here", "must", "big", "high", "such", "follow", "act", "why", "ask",
         "change", "went", "light", "kind", "off", "need", "house", "picture", "story", "dog", "boat", "morning",
         "mountain", "year", "plan", "show", "learn", "girl", "move", "beauty", "example", "know", "tell", "sky",
         "blue", "write", "short", "about", "what", "is", "two", "and", "three")
VOLATILE = ("id", "created")  # the only fields of an answer allowed to change between two identical requests


@dataclass(frozen=True)
class Probe:
    name: str
    path: str  # /v1/completions or /v1/chat/completions
    body: dict[str, Any]  # without "model"


def default_probes() -> list[Probe]:
    """Four fixed probes: a completion, a chat turn, two choices of a short completion, and a stream."""
    return [
        Probe("completion", "/v1/completions", {"prompt": "the man said that the water in the river was cold",
                                                "seed": 11}),
        Probe("chat", "/v1/chat/completions", {"messages": [{"role": "user", "content": "write a short story about "
                                                             "a dog and a boat"}], "seed": 12}),
        Probe("two_choices", "/v1/completions", {"prompt": "what is two and three", "seed": 13, "n": 2,
                                                 "max_tokens": 7}),
        Probe("stream", "/v1/completions", {"prompt": "tell me about the blue sky", "seed": 14, "stream": True}),
    ]


def canonical(body: bytes) -> str:
    """An answer without its volatile fields; every other byte as the server wrote it."""
    data = json.loads(body)
    return json.dumps({key: value for key, value in data.items() if key not in VOLATILE}, ensure_ascii=False,
                      separators=(",", ":"))


@dataclass
class Answer:
    status: int
    canonical: str  # the body's (or, for a stream, its chunks') bytes without the volatile fields
    latency_s: float
    completion_tokens: int
    batch_rows: Optional[int]  # the size of the batch its first choice ran in (non-streamed answers)
    canvases: int = 0  # canvases generated for its choices (``stop_point``'s ``passes``, one entry a canvas)
    first_chunk_s: Optional[float] = None  # a stream's time to its first chunk


def _canvases(choice: dict[str, Any]) -> int:
    return len((choice.get("stop_point") or {}).get("passes") or [])


async def send(client, model: str, path: str, body: dict[str, Any]) -> Answer:
    """One request; a stream is read to its end."""
    payload = {"model": model, **body}
    started = time.perf_counter()
    if body.get("stream"):
        chunks, tokens, canvases, first = [], 0, 0, None
        async with client.stream("POST", path, json=payload) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                if first is None:
                    first = time.perf_counter() - started
                data = line[len("data: "):]
                if data == "[DONE]":
                    chunks.append(data)
                    continue
                chunks.append(canonical(data.encode()))
                for choice in json.loads(data).get("choices", []):
                    if choice.get("finish_reason") is not None:
                        tokens += len(choice.get("token_ids", []))
                        canvases += _canvases(choice)
            status = response.status_code
        return Answer(status, "\n".join(chunks), time.perf_counter() - started, tokens, None, canvases, first)
    response = await client.post(path, json=payload)
    rows = response.headers.get("x-canvaslab-batch-rows")
    ok = response.status_code == 200
    tokens = response.json().get("usage", {}).get("completion_tokens", 0) if ok else 0
    canvases = sum(_canvases(choice) for choice in response.json().get("choices", [])) if ok else 0
    return Answer(response.status_code, canonical(response.content) if ok else response.text,
                  time.perf_counter() - started, tokens, int(rows) if rows else None, canvases)


def random_request(rng: random.Random, budget: int) -> tuple[str, dict[str, Any]]:
    """A random completion or chat request: 1 to 40 random words, random max_tokens, seed and n; a quarter
    streamed."""
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40)))
    body: dict[str, Any] = {"max_tokens": rng.randint(1, budget), "seed": rng.randrange(2**31),
                            "n": rng.choice((1, 1, 1, 2))}
    if rng.random() < 0.25:
        body["stream"] = True
    if rng.random() < 0.3:
        return "/v1/chat/completions", {**body, "messages": [{"role": "user", "content": text}]}
    return "/v1/completions", {**body, "prompt": text}


async def _other_client(client, model: str, rng: random.Random, budget: int, stop: asyncio.Event,
                        max_requests: int) -> list[Answer]:
    answers = []
    for _ in range(max_requests):
        if stop.is_set():
            break
        path, body = random_request(rng, budget)
        answers.append(await send(client, model, path, body))
    return answers


def _percentile(values: Sequence[float], q: float) -> Optional[float]:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def probe_under_load(client, model: str, levels: Sequence[int], *, budget: int,
                           probes: Optional[Sequence[Probe]] = None, repeats: int = 2, seed: int = 0,
                           max_requests: int = 1000, canvas_length: Optional[int] = None,
                           batch_sizes: Optional[Callable[[], collections.Counter]] = None) -> dict[str, Any]:
    """The probes alone, then amid each level's traffic. ``client``: an ``httpx.AsyncClient`` whose base URL is
    the server; ``budget``: the largest ``max_tokens`` the other clients ask for; ``repeats``: how many times each
    probe is sent, back to back, at each level; ``canvas_length``: the model's, for canvas tokens per second;
    ``batch_sizes``: the server's count of batches (or, batching continuously, passes) per size
    (``Engine.batch_sizes``), when it runs in this process.

    At each level the other clients and the probes start together, in a shuffled order, so the probes' first
    answers come from batches shared with the others' first requests, and their repeats from later ones."""
    probes = list(probes if probes is not None else default_probes())
    alone = [await send(client, model, probe.path, probe.body) for probe in probes]
    bad = [(probe.name, answer.status, answer.canonical[:300]) for probe, answer in zip(probes, alone)
           if answer.status != 200]
    if bad:
        raise RuntimeError(f"a probe failed alone: {bad}")
    result: dict[str, Any] = {"probes": [probe.name for probe in probes], "repeats": repeats, "levels": []}
    for level, clients in enumerate(levels):
        before = collections.Counter(batch_sizes()) if batch_sizes else None
        stop = asyncio.Event()

        async def probe_task(probe: Probe) -> list[Answer]:
            return [await send(client, model, probe.path, probe.body) for _ in range(repeats)]

        starts: list[tuple[str, int]] = [("other", i) for i in range(clients)] + \
            [("probe", i) for i in range(len(probes))]
        random.Random(f"{seed}-{level}-order").shuffle(starts)
        started = time.perf_counter()
        tasks = {start: asyncio.ensure_future(
            _other_client(client, model, random.Random(f"{seed}-{level}-{start[1]}"), budget, stop, max_requests)
            if start[0] == "other" else probe_task(probes[start[1]])) for start in starts}
        loaded = [await tasks[("probe", i)] for i in range(len(probes))]
        stop.set()
        other_answers = [answer for i in range(clients) for answer in await tasks[("other", i)]]
        seconds = time.perf_counter() - started
        probe_answers = [answer for answers in loaded for answer in answers]
        answers = [*probe_answers, *other_answers]
        ok = [answer for answer in answers if answer.status == 200]
        latencies = [answer.latency_s for answer in ok]
        first_chunks = [answer.first_chunk_s for answer in ok if answer.first_chunk_s is not None]
        entry = {
            "concurrency": clients,
            "probe_answers": len(probe_answers),
            "differing": [f"{probe.name}#{k}" for probe, a, answers in zip(probes, alone, loaded)
                          for k, b in enumerate(answers) if a.canonical != b.canonical],
            "probe_batch_rows": {probe.name: [answer.batch_rows for answer in answers]
                                 for probe, answers in zip(probes, loaded)},
            "requests": len(answers),
            "errors": dict(collections.Counter(str(answer.status) for answer in answers if answer.status != 200)),
            "seconds": seconds,
            "requests_per_s": len(ok) / seconds,
            "tokens_per_s": sum(answer.completion_tokens for answer in ok) / seconds,
            "latency_p50_s": _percentile(latencies, 0.5),
            "latency_p99_s": _percentile(latencies, 0.99),
            "streams": len(first_chunks),
            "first_chunk_p50_s": _percentile(first_chunks, 0.5),
            "first_chunk_p99_s": _percentile(first_chunks, 0.99),
        }
        if canvas_length:
            entry["canvas_tokens_per_s"] = sum(answer.canvases for answer in ok) * canvas_length / seconds
        if batch_sizes:
            formed = collections.Counter(batch_sizes()) - before
            entry["batch_sizes"] = {str(size): formed[size] for size in sorted(formed)}
        result["levels"].append(entry)
    result["differing"] = sum(len(entry["differing"]) for entry in result["levels"])
    result["probe_answers"] = sum(entry["probe_answers"] for entry in result["levels"])
    return result
