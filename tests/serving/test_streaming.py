"""A streamed answer: server-sent events, a chunk per denoising pass that changed the canvas (a draft), per
committed canvas and per finished choice, then ``data: [DONE]``; its texts concatenated are the answer's text."""

from __future__ import annotations

import asyncio
import json

from serving_helpers import served


async def _events(client, body) -> list:
    lines = []
    async with client.stream("POST", "/v1/completions" if "prompt" in body else "/v1/chat/completions",
                             json=body) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line:
                assert line.startswith("data: ")
                lines.append(line[len("data: "):])
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def _text(choice) -> str:
    return choice["delta"].get("content") or "" if "delta" in choice else choice["text"]


def test_a_completion_stream_is_drafts_then_the_final_text(tiny):
    body = {"model": "tiny", "prompt": "the man said", "seed": 3, "max_tokens": 40}

    async def main():
        async with served(tiny) as (_, client):
            return await _events(client, {**body, "stream": True}), (await client.post("/v1/completions",
                                                                                       json=body)).json()

    chunks, whole = asyncio.run(main())
    assert {chunk["object"] for chunk in chunks} == {"text_completion"}
    assert {chunk["seed"] for chunk in chunks} == {3} and len({chunk["id"] for chunk in chunks}) == 1
    choices = [chunk["choices"][0] for chunk in chunks]
    drafts = [choice for choice in choices if "draft" in choice]
    assert drafts and all(choice["text"] == "" and choice["finish_reason"] is None for choice in drafts)
    assert [d["draft"]["pass"] for d in drafts] == sorted(d["draft"]["pass"] for d in drafts)
    assert all(len(d["draft"]["token_ids"]) == tiny.model.config.canvas_length for d in drafts)
    final = choices[-1]
    assert final["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert "".join(_text(choice) for choice in choices) == whole["choices"][0]["text"]
    assert final["token_ids"] == whole["choices"][0]["token_ids"] and final["stop_point"] == whole["choices"][0][
        "stop_point"]


def test_a_chat_stream_of_two_choices_with_usage(tiny):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "tell a story"}], "seed": 8, "n": 2}

    async def main():
        async with served(tiny) as (_, client):
            streamed = await _events(client, {**body, "stream": True, "stream_options": {"include_usage": True}})
            return streamed, (await client.post("/v1/chat/completions", json=body)).json()

    chunks, whole = asyncio.run(main())
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    roles = [chunk["choices"][0] for chunk in chunks[:2]]
    assert [(r["index"], r["delta"]) for r in roles] == [(0, {"role": "assistant", "content": ""}),
                                                          (1, {"role": "assistant", "content": ""})]
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"] == whole["usage"]
    for index in (0, 1):
        mine = [chunk["choices"][0] for chunk in chunks[:-1] if chunk["choices"][0]["index"] == index]
        assert "".join(_text(choice) for choice in mine) == whole["choices"][index]["message"]["content"]
        assert mine[-1]["finish_reason"] == whole["choices"][index]["finish_reason"]


def test_committed_canvases_stream_their_text(tiny_short_canvas):
    """A 32-token canvas and 80 tokens: up to three canvases, each committed as a chunk of text."""
    body = {"model": "short", "prompt": "the water in the river", "seed": 21, "max_tokens": 80}

    async def main():
        async with served(tiny_short_canvas, name="short") as (_, client):
            return await _events(client, {**body, "stream": True}), (await client.post("/v1/completions",
                                                                                       json=body)).json()

    chunks, whole = asyncio.run(main())
    choices = [chunk["choices"][0] for chunk in chunks]
    answer = whole["choices"][0]
    canvases = len(answer["stop_point"]["passes"])
    commits = [choice for choice in choices if "commit" in choice]
    assert canvases >= 2 and len(commits) >= canvases - 1
    assert [c["commit"]["canvas"] for c in commits] == list(range(len(commits)))
    assert {d["draft"]["canvas"] for d in choices if "draft" in d} == set(range(canvases))
    assert "".join(choice["text"] for choice in choices) == answer["text"]
