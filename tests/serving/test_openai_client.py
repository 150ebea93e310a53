"""The official ``openai`` client, unchanged, against the server under uvicorn on a free localhost port."""

from __future__ import annotations

import threading
import time

import httpx
import openai
import pytest

from canvaslab.serving import Engine, ServeSettings, create_app, running_server
from serving_helpers import STEPS, Gate


@pytest.fixture(scope="module")
def server(tiny):
    gate = Gate(hold=False)
    engine = Engine(tiny, ServeSettings("tiny", steps=STEPS), generate=gate)
    with running_server(create_app(engine)) as url:
        yield url, engine, gate
    gate.release.set()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(api_key="unused", base_url=f"{server[0]}/v1", max_retries=0)


def test_completion_chat_and_models(client):
    completion = client.completions.create(model="tiny", prompt="the man said", max_tokens=10, seed=4)
    assert completion.object == "text_completion" and completion.model == "tiny"
    assert completion.usage.completion_tokens == len(completion.choices[0].model_extra["token_ids"]) <= 10
    assert completion.model_extra["seed"] == 4 and completion.system_fingerprint.endswith("invariant")
    again = client.completions.create(model="tiny", prompt="the man said", max_tokens=10, seed=4)
    assert again.choices[0].text == completion.choices[0].text
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "system", "content": "be brief"},
                                                                  {"role": "user", "content": "hello"}], seed=4, n=2)
    assert [choice.message.role for choice in chat.choices] == ["assistant", "assistant"]
    assert chat.choices[0].finish_reason in ("stop", "length")
    assert [model.id for model in client.models.list()] == ["tiny"]


def test_streams_concatenate_to_the_answer(client):
    whole = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], seed=9,
                                           max_tokens=30)
    text, finish, usage = "", None, None
    for chunk in client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], seed=9,
                                                max_tokens=30, stream=True, stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert text == whole.choices[0].message.content and finish == whole.choices[0].finish_reason
    assert usage.completion_tokens == whole.usage.completion_tokens
    streamed = "".join(chunk.choices[0].text for chunk in client.completions.create(
        model="tiny", prompt="the river", seed=2, max_tokens=20, stream=True))
    assert streamed == client.completions.create(model="tiny", prompt="the river", seed=2, max_tokens=20).choices[0].text


def test_refusals_are_the_clients_typed_errors(client):
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model="tiny", prompt="x", presence_penalty=0.3)
    assert bad.value.code == "unsupported_value" and bad.value.param == "presence_penalty"
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-4", prompt="x")
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt="x", max_tokens=10_000)


def test_a_disconnected_client_frees_its_queued_row(server, client):
    """Over a real connection: the client gives up while its request waits; the server sees the disconnect,
    drops the row, and goes on answering."""
    url, engine, gate = server
    gate.release.clear()
    gate.entered.clear()
    cancelled = engine.metrics.cancelled_rows._value.get()
    try:
        holder = threading.Thread(target=lambda: httpx.post(f"{url}/v1/completions", timeout=120,
                                                            json={"model": "tiny", "prompt": "a", "seed": 1}))
        holder.start()
        assert gate.entered.wait(60)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/v1/completions", json={"model": "tiny", "prompt": "b", "seed": 2, "n": 2}, timeout=1)
        deadline = time.monotonic() + 30
        while engine.metrics.cancelled_rows._value.get() < cancelled + 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert engine.metrics.cancelled_rows._value.get() == cancelled + 2 and engine.queued_rows == 0
    finally:
        gate.release.set()
        holder.join(60)
    assert client.completions.create(model="tiny", prompt="c", max_tokens=5).usage.completion_tokens <= 5


def test_the_async_client_with_the_fields_evaluation_tools_send(server):
    """temperature 0, stop, logprobs and a list of prompts through ``openai.AsyncOpenAI``, streamed and not."""
    import asyncio

    async def main():
        client = openai.AsyncOpenAI(api_key="unused", base_url=f"{server[0]}/v1", max_retries=0)
        fields = dict(model="tiny", max_tokens=30, seed=5, temperature=0, stop=["\n", "the"], logprobs=1)
        whole = await client.completions.create(prompt=["the man said", "hello"], **fields)
        streamed = ""
        async for chunk in await client.completions.create(prompt="the man said", stream=True, **fields):
            streamed += chunk.choices[0].text if chunk.choices else ""
        chat = await client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=20, seed=5, temperature=0,
            logprobs=True, top_logprobs=2, extra_body={"top_k": -1, "repetition_penalty": 1.0})
        await client.close()
        return whole, streamed, chat

    whole, streamed, chat = asyncio.run(main())
    assert [choice.index for choice in whole.choices] == [0, 1]
    first = whole.choices[0]
    assert streamed == first.text and "the" not in first.text and "\n" not in first.text
    assert len(first.logprobs.token_logprobs) == len(first.model_extra["token_ids"])
    assert len(chat.choices[0].logprobs.content[0].top_logprobs) == 2
