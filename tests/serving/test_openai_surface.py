"""The OpenAI fields evaluation tools send: temperature (0: greedy draws), top_p, stop, logprobs, lists of prompts,
echo, the fields vLLM ignores, usage without padding; and vLLM's operability: API key, /tokenize, /detokenize,
/version, /openapi.json, the time to the first chunk."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

from canvaslab.cli.serve import loopback
from canvaslab.generation.row_randomness import RowRandomness, RowSampling, nucleus
from canvaslab.generation.runner import RowResult
from canvaslab.serving.loadtest import canonical
from serving_helpers import error_of, served

BODY = {"model": "tiny", "prompt": "the man said", "max_tokens": 40, "seed": 3}


def _sse(response) -> list[dict]:
    lines = [line[len("data: "):] for line in response.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def test_greedy_and_top_p_draws_are_the_rows_own():
    """temperature 0 draws the argmax; a top_p nucleus of one token too; a row's draw is the same beside rows that
    sample otherwise."""
    probs = torch.softmax(torch.randn(2 * 5, 50, generator=torch.Generator().manual_seed(0)), dim=-1)
    argmax = probs.view(2, 5, 50).argmax(-1)
    mixed = RowRandomness(0, ["a", "b"], sampling=[RowSampling(0.0), RowSampling(1.0, 1e-6)])
    mixed.start_canvas()
    assert torch.equal(mixed.categorical(probs).view(2, 5), argmax)
    for row, sampling in enumerate([RowSampling(0.0), RowSampling(0.7, 0.5)]):
        alone = RowRandomness(0, ["ab"[row]], sampling=[sampling])
        beside = RowRandomness(0, ["a", "b"], sampling=[sampling, RowSampling(1.3)] if row == 0
                               else [RowSampling(0.0), sampling])
        alone.start_canvas()
        beside.start_canvas()
        assert torch.equal(alone.categorical(probs.view(2, 5, 50)[row]).view(-1),
                           beside.categorical(probs).view(2, 5)[row])
    kept = nucleus(torch.tensor([[0.5, 0.3, 0.2]]), 0.7)
    assert (kept > 0).tolist() == [[True, True, False]]


def test_a_row_is_the_same_beside_rows_with_other_temperatures_and_stops(tiny):
    probe = {**BODY, "temperature": 0.5, "top_p": 0.9}
    others = [{**BODY, "prompt": "why is the sky blue", "temperature": 0.0, "stop": ["e"]},
              {**BODY, "prompt": "once upon a time", "temperature": 1.7, "seed": 9}]

    async def main():
        async with served(tiny, mode="invariant", batch_window_ms=300) as (_, client):
            alone = await client.post("/v1/completions", json=probe)
            together = await asyncio.gather(*(client.post("/v1/completions", json=body) for body in [probe, *others]))
            plain_alone = await client.post("/v1/completions", json=BODY)
            plain_beside = await asyncio.gather(client.post("/v1/completions", json=BODY),
                                                client.post("/v1/completions", json={**BODY, "stop": ["a"],
                                                                                     "prompt": "hello"}))
            return alone, together, plain_alone, plain_beside

    alone, together, plain_alone, plain_beside = asyncio.run(main())
    assert together[0].headers["x-canvaslab-batch-rows"] == "3"
    assert canonical(alone.content) == canonical(together[0].content)
    assert plain_beside[0].headers["x-canvaslab-batch-rows"] == "2"
    assert canonical(plain_alone.content) == canonical(plain_beside[0].content)


def test_stop_cuts_the_text_before_the_stop_string_streamed_or_not(tiny):
    async def main():
        async with served(tiny) as (_, client):
            whole = (await client.post("/v1/completions", json=BODY)).json()["choices"][0]
            stop = whole["text"].split()[3]
            cut = (await client.post("/v1/completions", json={**BODY, "stop": ["zzzz", stop]})).json()
            kept = (await client.post("/v1/completions", json={**BODY, "stop": stop,
                                                               "include_stop_str_in_output": True})).json()
            streamed = await client.post("/v1/completions", json={**BODY, "stop": [stop], "stream": True,
                                                                  "stream_options": {"include_usage": True}})
            return whole, stop, cut, kept, _sse(streamed)

    whole, stop, cut, kept, chunks = asyncio.run(main())
    at = whole["text"].find(stop)
    choice = cut["choices"][0]
    assert choice["text"] == whole["text"][:at] and kept["choices"][0]["text"] == whole["text"][:at + len(stop)]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", stop)
    assert choice["token_ids"] == whole["token_ids"][:len(choice["token_ids"])]
    assert cut["usage"]["completion_tokens"] == len(choice["token_ids"]) < len(whole["token_ids"])
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == choice["text"]
    assert chunks[-1]["usage"]["completion_tokens"] == len(choice["token_ids"])


def test_logprobs_are_those_of_the_committed_argmax(tiny):
    async def main():
        async with served(tiny) as (_, client):
            completion = (await client.post("/v1/completions", json={**BODY, "logprobs": 2})).json()
            chat = (await client.post("/v1/chat/completions", json={
                "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20, "seed": 1,
                "logprobs": True, "top_logprobs": 1})).json()
            streamed = _sse(await client.post("/v1/completions", json={**BODY, "logprobs": 2, "stream": True}))
            return completion, chat, streamed

    completion, chat, streamed = asyncio.run(main())
    choice = completion["choices"][0]
    logprobs = choice["logprobs"]
    assert len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == len(choice["token_ids"]) > 0
    assert "".join(logprobs["tokens"]) == choice["text"] or len(logprobs["tokens"]) == len(choice["token_ids"])
    for logprob, top in zip(logprobs["token_logprobs"], logprobs["top_logprobs"]):
        assert len(top) == 2 and logprob <= 0
        assert logprob == pytest.approx(max(top.values()))  # the committed token is the pass's argmax
    content = chat["choices"][0]["logprobs"]["content"]
    assert len(content) == len(chat["choices"][0]["token_ids"])
    assert all(item["logprob"] == pytest.approx(item["top_logprobs"][0]["logprob"]) for item in content)
    assert streamed[-1]["choices"][0]["logprobs"] == logprobs


def test_a_list_of_prompts_is_answered_prompt_major_and_echo_prepends_the_prompt(tiny):
    async def main():
        async with served(tiny) as (_, client):
            both = (await client.post("/v1/completions", json={**BODY, "prompt": ["the man said", "hello"],
                                                               "n": 2})).json()
            first = (await client.post("/v1/completions", json={**BODY, "n": 2})).json()
            second = (await client.post("/v1/completions", json={**BODY, "prompt": "hello"})).json()
            echoed = (await client.post("/v1/completions", json={**BODY, "echo": True})).json()
            return both, first, second, echoed

    both, first, second, echoed = asyncio.run(main())
    assert [choice["index"] for choice in both["choices"]] == [0, 1, 2, 3]
    assert [c["token_ids"] for c in both["choices"][:2]] == [c["token_ids"] for c in first["choices"]]
    assert both["choices"][2]["token_ids"] == second["choices"][0]["token_ids"]
    assert both["usage"]["prompt_tokens"] == first["usage"]["prompt_tokens"] + second["usage"]["prompt_tokens"]
    assert echoed["choices"][0]["text"] == "the man said" + first["choices"][0]["text"]


def test_padding_the_model_draws_ends_the_text_and_is_never_counted(tiny):
    """A canvas the model fills with padding (no end-of-sequence token) is an empty answer that stopped, not 16
    tokens of length."""
    async def main():
        async with served(tiny) as (engine, _):
            pad = tiny.generation_defaults["pad_token_id"]
            row = engine.submit(*_request(engine, 16)).rows[0]
            engine.cancel([row])
            result = RowResult([5], [pad] * 16 + [7] * 240, "", [1], [1], None)
            return engine._outcome(row, result, 1, 0)

    outcome = asyncio.run(main())
    assert (outcome.text, outcome.token_ids, outcome.finish_reason) == ("", [], "stop")


def _request(engine, max_tokens):
    from canvaslab.serving.protocol import parse_request

    request = parse_request({"model": "tiny", "prompt": "x", "max_tokens": max_tokens}, "completion")
    return request, engine.encode(request)


def test_fields_vllm_ignores_are_ignored_and_listed(tiny):
    async def main():
        async with served(tiny) as (_, client):
            return await client.post("/v1/completions", json={
                **BODY, "user": "u", "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}, "top_k": -1,
                "repetition_penalty": 1, "min_tokens": 0, "skip_special_tokens": True, "best_of": 1,
                "response_format": {"type": "text"}, "guided_whatever": 1, "priority": 0})

    response = asyncio.run(main())
    assert response.status_code == 200, response.text
    assert response.headers["x-canvaslab-ignored-fields"] == "guided_whatever,priority"


def test_the_api_key_guards_v1_and_the_tokenizer(tiny):
    from canvaslab.serving import Engine, ServeSettings, create_app

    async def main():
        import httpx

        engine = Engine(tiny, ServeSettings("tiny", steps=2))
        app = create_app(engine, api_key="s3cret")
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
                return [await client.get("/v1/models"),
                        await client.get("/v1/models", headers={"Authorization": "Bearer wrong"}),
                        await client.post("/tokenize", json={"prompt": "x"}),
                        await client.get("/v1/models", headers={"Authorization": "Bearer s3cret"}),
                        await client.get("/health"), await client.get("/version")]

    missing, wrong, tokenizer, right, health, version = asyncio.run(main())
    for refused in (missing, wrong, tokenizer):
        assert refused.status_code == 401 and error_of(refused)["code"] == "invalid_api_key"
    assert right.status_code == health.status_code == version.status_code == 200


def test_tokenize_detokenize_version_openapi_and_first_chunk_metrics(tiny):
    async def main():
        async with served(tiny) as (_, client):
            tokens = (await client.post("/tokenize", json={"model": "tiny", "prompt": "the man said"})).json()
            chat = (await client.post("/tokenize", json={"messages": [{"role": "user", "content": "hi"}]})).json()
            text = (await client.post("/detokenize", json={"tokens": tokens["tokens"]})).json()
            bad = await client.post("/detokenize", json={"tokens": [10**9]})
            version = (await client.get("/version")).json()
            schema = (await client.get("/openapi.json")).json()
            await client.post("/v1/completions", json={**BODY, "stream": True})
            metrics = (await client.get("/metrics")).text
            return tokens, chat, text, bad, version, schema, metrics

    tokens, chat, text, bad, version, schema, metrics = asyncio.run(main())
    assert tokens["count"] == len(tokens["tokens"]) > 0 and tokens["max_model_len"] > 0 and chat["count"] > 0
    assert text == {"prompt": "the man said"}
    assert bad.status_code == 400 and error_of(bad)["param"] == "tokens"
    assert version["version"]
    body = schema["paths"]["/v1/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["$ref"].endswith("/CompletionBody")
    assert {"temperature", "top_p", "stop", "logprobs", "echo"} <= set(schema["components"]["schemas"]
                                                                       ["CompletionBody"]["properties"])
    assert 'canvaslab_time_to_first_chunk_seconds_count{endpoint="/v1/completions"} 1.0' in metrics
    assert "_created" not in metrics


@pytest.mark.parametrize("host, local", [("127.0.0.1", True), ("localhost", True), ("::1", True),
                                         ("0.0.0.0", False), ("192.168.1.4", False), ("example.org", False)])
def test_loopback_hosts(host, local):
    assert loopback(host) is local
