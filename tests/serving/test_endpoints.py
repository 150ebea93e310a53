"""The read-only endpoints, the seed rules, and the Prometheus metrics."""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families

from serving_helpers import served

BODY = {"model": "tiny", "prompt": "the man said", "max_tokens": 12}


def test_models_and_health(tiny):
    async def main():
        async with served(tiny) as (_, client):
            return [await client.get(path) for path in ("/v1/models", "/v1/models/tiny", "/health")]

    models, model, health = asyncio.run(main())
    assert models.json()["object"] == "list" and [m["id"] for m in models.json()["data"]] == ["tiny"]
    assert model.json()["id"] == "tiny" and model.json()["max_tokens"] == 256 and model.json()["mode"] == "invariant"
    assert health.status_code == 200 and health.json()["status"] == "ok"


def test_a_drawn_seed_is_returned_and_reproduces_the_answer(tiny):
    """Without a seed the server draws one and returns it; choice i of n is the same whatever n is."""
    async def main():
        async with served(tiny) as (_, client):
            drawn = (await client.post("/v1/completions", json=BODY)).json()
            again = (await client.post("/v1/completions", json={**BODY, "seed": drawn["seed"], "n": 2})).json()
            return drawn, again

    drawn, again = asyncio.run(main())
    assert isinstance(drawn["seed"], int) and again["seed"] == drawn["seed"]
    assert again["choices"][0]["text"] == drawn["choices"][0]["text"]
    assert again["choices"][0]["token_ids"] == drawn["choices"][0]["token_ids"]
    assert again["choices"][1]["token_ids"] != drawn["choices"][0]["token_ids"]
    assert drawn["usage"]["completion_tokens"] == len(drawn["choices"][0]["token_ids"]) <= 12
    assert drawn["choices"][0]["finish_reason"] in ("stop", "length")


def test_metrics_count_requests_batches_passes_tokens_and_latency(tiny):
    async def main():
        async with served(tiny, batch_window_ms=200) as (_, client):
            answers = await asyncio.gather(*(client.post("/v1/completions", json={**BODY, "seed": s}) for s in range(3)))
            await client.post("/v1/completions", json={**BODY, "temperature": 2.5})
            return answers, await client.get("/metrics")

    answers, response = asyncio.run(main())
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    samples = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
               for family in text_string_to_metric_families(response.text) for sample in family.samples}
    tokens = sum(answer.json()["usage"]["completion_tokens"] for answer in answers)
    assert samples[("canvaslab_requests_total", (("endpoint", "/v1/completions"), ("status", "200")))] == 3
    assert samples[("canvaslab_requests_total", (("endpoint", "/v1/completions"), ("status", "400")))] == 1
    assert samples[("canvaslab_queue_rows", ())] == 0
    assert samples[("canvaslab_batch_rows_count", ())] == 1 and samples[("canvaslab_batch_rows_sum", ())] == 3
    assert samples[("canvaslab_decoder_passes_total", ())] >= 1
    assert samples[("canvaslab_generated_tokens_total", ())] == tokens
    assert samples[("canvaslab_request_latency_seconds_count", (("endpoint", "/v1/completions"),))] == 4
    assert samples[("canvaslab_last_batch_tokens_per_second", ())] > 0
