"""Every malformed request is a 4xx with OpenAI's error body (never a 500 or a traceback); a full queue is a 429
with Retry-After; a client that goes away frees its row; a failing row fails only its own request."""

from __future__ import annotations

import asyncio
import json

import pytest

from canvaslab.serving.loadtest import canonical
from serving_helpers import Gate, error_of, served

OK = {"model": "tiny", "prompt": "the man said"}
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}]}

# (case, path, body: a dict sent as JSON or raw bytes, status, param, code)
CASES = [
    ("not json", "/v1/completions", b"{", 400, None, "invalid_json"),
    ("not utf-8", "/v1/completions", b"\xff\xfe{}", 400, None, "invalid_json"),
    ("an array", "/v1/completions", b"[1, 2]", 400, None, "invalid_json"),
    ("nested 100,000 deep", "/v1/completions", b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, None,
     "invalid_json"),
    ("null", "/v1/completions", b"null", 400, None, "invalid_json"),
    ("no model", "/v1/completions", {"prompt": "x"}, 400, "model", "missing_required_parameter"),
    ("model not a string", "/v1/completions", {**OK, "model": 5}, 400, "model", "invalid_type"),
    ("another model", "/v1/completions", {**OK, "model": "gpt-4"}, 404, "model", "model_not_found"),
    ("no prompt", "/v1/completions", {"model": "tiny"}, 400, "prompt", "missing_required_parameter"),
    ("empty prompt", "/v1/completions", {**OK, "prompt": ""}, 400, "prompt", "invalid_value"),
    ("blank prompt", "/v1/completions", {**OK, "prompt": "  \n"}, 400, "prompt", "invalid_value"),
    ("empty token list", "/v1/completions", {**OK, "prompt": []}, 400, "prompt", "invalid_value"),
    ("prompt a number", "/v1/completions", {**OK, "prompt": 5}, 400, "prompt", "invalid_type"),
    ("float token", "/v1/completions", {**OK, "prompt": [1.5]}, 400, "prompt[0]", "invalid_type"),
    ("token outside vocabulary", "/v1/completions", {**OK, "prompt": [5, 512]}, 400, "prompt", "invalid_value"),
    ("negative token", "/v1/completions", {**OK, "prompt": [-1]}, 400, "prompt", "invalid_value"),
    ("over-long token prompt", "/v1/completions", {**OK, "prompt": [100] * 3841}, 400, "prompt",
     "context_length_exceeded"),
    ("over-long text prompt", "/v1/completions", {**OK, "prompt": "the " * 4000}, 400, "prompt",
     "context_length_exceeded"),
    ("max_tokens a string", "/v1/completions", {**OK, "max_tokens": "5"}, 400, "max_tokens", "invalid_type"),
    ("max_tokens a bool", "/v1/completions", {**OK, "max_tokens": True}, 400, "max_tokens", "invalid_type"),
    ("max_tokens 0", "/v1/completions", {**OK, "max_tokens": 0}, 400, "max_tokens", "invalid_value"),
    ("max_tokens over the budget", "/v1/completions", {**OK, "max_tokens": 257}, 400, "max_tokens", "invalid_value"),
    ("temperature over 2", "/v1/completions", {**OK, "temperature": 2.5}, 400, "temperature", "invalid_value"),
    ("temperature not finite", "/v1/completions", b'{"model": "tiny", "prompt": "x", "temperature": NaN}', 400,
     "temperature", "invalid_value"),
    ("temperature a string", "/v1/completions", {**OK, "temperature": "hot"}, 400, "temperature", "invalid_type"),
    ("top_p 0", "/v1/completions", {**OK, "top_p": 0}, 400, "top_p", "invalid_value"),
    ("a penalty", "/v1/completions", {**OK, "frequency_penalty": 0.5}, 400, "frequency_penalty", "unsupported_value"),
    ("vLLM's top_k", "/v1/completions", {**OK, "top_k": 40}, 400, "top_k", "unsupported_value"),
    ("a logit bias", "/v1/completions", {**OK, "logit_bias": {"5": 3}}, 400, "logit_bias", "unsupported_value"),
    ("json_object", "/v1/completions", {**OK, "response_format": {"type": "json_object"}}, 400, "response_format",
     "unsupported_value"),
    ("json_schema", "/v1/chat/completions", {**CHAT, "response_format": {"type": "json_schema", "json_schema": {}}},
     400, "response_format", "unsupported_value"),
    ("prompt log-likelihoods", "/v1/completions", {**OK, "echo": True, "logprobs": 1, "max_tokens": 1}, 400, "echo",
     "unsupported_value"),
    ("top_logprobs without logprobs", "/v1/chat/completions", {**CHAT, "top_logprobs": 2}, 400, "top_logprobs",
     "invalid_value"),
    ("logprobs over 20", "/v1/completions", {**OK, "logprobs": 21}, 400, "logprobs", "invalid_value"),
    ("an empty stop string", "/v1/completions", {**OK, "stop": ["a", ""]}, 400, "stop", "invalid_value"),
    ("stop a number", "/v1/completions", {**OK, "stop": 5}, 400, "stop", "invalid_type"),
    ("an empty prompt in a list", "/v1/completions", {**OK, "prompt": ["a", " "]}, 400, "prompt[1]", "invalid_value"),
    ("too deep", "/v1/completions", b'{"model": "tiny", "prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400,
     None, "invalid_json"),
    ("a lone surrogate in prompt", "/v1/completions", b'{"model": "tiny", "prompt": "a\\ud800"}', 400, None,
     "invalid_json"),
    ("a lone surrogate in model", "/v1/completions", b'{"model": "\\udfff", "prompt": "a"}', 400, None,
     "invalid_json"),
    ("a lone surrogate in chat content", "/v1/chat/completions",
     b'{"model": "tiny", "messages": [{"role": "user", "content": "\\ud800"}]}', 400, None, "invalid_json"),
    ("a lone surrogate in a key", "/v1/completions", b'{"model": "tiny", "prompt": "a", "\\ud800": 1}', 400, None,
     "invalid_json"),
    ("negative seed", "/v1/completions", {**OK, "seed": -1}, 400, "seed", "invalid_value"),
    ("seed a float", "/v1/completions", {**OK, "seed": 1.5}, 400, "seed", "invalid_type"),
    ("n 0", "/v1/completions", {**OK, "n": 0}, 400, "n", "invalid_value"),
    ("n a string", "/v1/completions", {**OK, "n": "2"}, 400, "n", "invalid_type"),
    ("stream a string", "/v1/completions", {**OK, "stream": "yes"}, 400, "stream", "invalid_type"),
    ("stream_options without stream", "/v1/completions", {**OK, "stream_options": {"include_usage": True}}, 400,
     "stream_options", "invalid_value"),
    ("chat without messages", "/v1/chat/completions", {"model": "tiny"}, 400, "messages",
     "missing_required_parameter"),
    ("chat empty messages", "/v1/chat/completions", {**CHAT, "messages": []}, 400, "messages", "invalid_value"),
    ("chat messages a string", "/v1/chat/completions", {**CHAT, "messages": "hi"}, 400, "messages", "invalid_type"),
    ("chat unknown role", "/v1/chat/completions", {**CHAT, "messages": [{"role": "robot", "content": "x"}]}, 400,
     "messages[0].role", "invalid_value"),
    ("chat empty content", "/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": ""}]}, 400,
     "messages[0].content", "invalid_value"),
    ("chat unknown message field", "/v1/chat/completions",
     {**CHAT, "messages": [{"role": "user", "content": "x", "tool_calls": []}]}, 400, "messages[0].tool_calls",
     "unknown_parameter"),
    ("chat image part", "/v1/chat/completions",
     {**CHAT, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 400,
     "messages[0].content[0].type", "invalid_value"),
    ("chat max_completion_tokens over the budget", "/v1/chat/completions", {**CHAT, "max_completion_tokens": 999},
     400, "max_completion_tokens", "invalid_value"),
    ("body over 1 MiB", "/v1/completions", b'{"model": "tiny", "prompt": "' + b"a" * (1 << 20) + b'"}', 413, None,
     "body_too_large"),
]


@pytest.mark.parametrize("case, path, body, status, param, code", CASES, ids=[case[0] for case in CASES])
def test_a_malformed_request_is_a_4xx_with_an_openai_error_body(tiny, case, path, body, status, param, code):
    async def main():
        async with served(tiny) as (engine, client):
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            response = await client.post(path, content=content, headers={"content-type": "application/json"})
            return response, engine.queued_rows

    response, queued = asyncio.run(main())
    assert response.status_code == status, response.text
    error = error_of(response)
    assert (error["param"], error["code"]) == (param, code)
    assert error["type"] == "invalid_request_error" and queued == 0


@pytest.mark.parametrize("method, path, status", [("GET", "/v1/completions", 405), ("POST", "/v1/nothing", 404),
                                                  ("GET", "/v1/models/gpt-4", 404)])
def test_unknown_routes_and_methods_answer_with_the_same_error_body(tiny, method, path, status):
    async def main():
        async with served(tiny) as (_, client):
            return await client.request(method, path)

    response = asyncio.run(main())
    assert response.status_code == status
    error_of(response)


def test_a_full_queue_is_429_with_retry_after(tiny, gate):
    async def main():
        async with served(tiny, generate=gate, max_batch=1, batch_window_ms=0, max_queue=2) as (engine, client):
            running = asyncio.ensure_future(client.post("/v1/completions", json={**OK, "seed": 1}))
            await asyncio.to_thread(gate.entered.wait, 60)  # the first request holds the model thread
            queued = asyncio.ensure_future(client.post("/v1/completions", json={**OK, "seed": 2, "n": 2}))
            while engine.queued_rows < 2:
                await asyncio.sleep(0.01)
            refused = await client.post("/v1/completions", json={**OK, "seed": 3})
            too_many = await client.post("/v1/completions", json={**OK, "n": 2})
            never = await client.post("/v1/completions", json={**OK, "n": 3})
            gate.release.set()
            return refused, too_many, never, await running, await queued

    refused, too_many, never, running, queued = asyncio.run(main())
    assert never.status_code == 400 and error_of(never)["param"] == "n"  # more rows than the queue ever holds
    for response in (refused, too_many):
        assert response.status_code == 429
        assert int(response.headers["retry-after"]) >= 1
        error = error_of(response)
        assert (error["type"], error["code"]) == ("rate_limit_error", "queue_full")
    assert running.status_code == queued.status_code == 200 and len(queued.json()["choices"]) == 2


def test_a_client_that_goes_away_frees_its_row(tiny, gate):
    """Cancelled while queued: its rows leave the queue. Cancelled while running: its result is dropped and
    the next request is answered."""
    async def main():
        async with served(tiny, generate=gate, max_batch=1, batch_window_ms=0) as (engine, client):
            running = asyncio.ensure_future(client.post("/v1/completions", json={**OK, "seed": 1}))
            await asyncio.to_thread(gate.entered.wait, 60)
            queued = asyncio.ensure_future(client.post("/v1/completions", json={**OK, "seed": 2, "n": 3}))
            while engine.queued_rows < 3:
                await asyncio.sleep(0.01)
            queued.cancel()
            running.cancel()
            await asyncio.gather(queued, running, return_exceptions=True)
            freed = engine.queued_rows
            gate.release.set()
            after = await client.post("/v1/completions", json={**OK, "seed": 3})
            return freed, engine, after

    freed, engine, after = asyncio.run(main())
    assert freed == 0
    assert engine.metrics.cancelled_rows._value.get() == 4
    assert after.status_code == 200 and gate.calls == [1, 1]  # the queued rows never ran


def test_a_failing_row_fails_only_its_own_request(tiny):
    """The batch raises; its rows are rerun one by one; the bad one gets a 500 with an error body, the others the
    bytes they get alone."""
    poison = [9, 9, 9, 9]
    gate = Gate(hold=False, fails=lambda prompt: prompt == poison)
    bodies = [{**OK, "seed": 5}, {"model": "tiny", "prompt": poison, "seed": 6}, {**OK, "prompt": "why is the sky blue",
                                                                                  "seed": 7, "n": 2}]

    async def main():
        async with served(tiny, generate=gate, batch_window_ms=300) as (engine, client):
            together = await asyncio.gather(*(client.post("/v1/completions", json=body) for body in bodies))
            alone = [await client.post("/v1/completions", json=bodies[i]) for i in (0, 2)]
            return together, alone, engine

    together, alone, engine = asyncio.run(main())
    assert gate.calls[0] == 4  # one batch of all four rows, then each row alone
    assert together[1].status_code == 500
    error = error_of(together[1])
    assert (error["type"], error["code"]) == ("server_error", "generation_failed")
    for batched, single in zip((together[0], together[2]), alone):
        assert batched.status_code == single.status_code == 200
        assert canonical(batched.content) == canonical(single.content)
    assert engine.metrics.batch_retries._value.get() == 1 and engine.metrics.failed_rows._value.get() == 1
