"""Continuous batching in the server: rows join the running batch at a pass boundary and leave when they finish, a
freed place is taken by a waiting row at the next pass, and every answer (streamed chunks included) is the bytes of
the request alone; the per-pass metrics."""

from __future__ import annotations

import asyncio
import threading

import pytest
from prometheus_client.parser import text_string_to_metric_families

from canvaslab.errors import CanvaslabError
from canvaslab.serving import Engine, ServeSettings
from canvaslab.serving.loadtest import canonical
from serving_helpers import served

BODY = {"model": "tiny", "prompt": "the man said", "max_tokens": 12}


class HeldPasses:
    """The stepper's passes, recorded (rows per pass), the next one held once ``hold`` is set until ``release``."""

    def __init__(self, stepper):
        self.rows: list[int] = []
        self.hold, self.held, self.release = threading.Event(), threading.Event(), threading.Event()
        original = stepper.step

        def step(rows):
            if self.hold.is_set() and not self.release.is_set():
                self.held.set()
                assert self.release.wait(120), "the test never released the pass"
            self.rows.append(len(rows))
            return original(rows)

        stepper.step = step


async def _answers(client, bodies):
    return [canonical((await client.post("/v1/completions", json=body)).content) for body in bodies]


async def _until(condition):
    while not condition():
        await asyncio.sleep(0.01)


def test_a_late_request_joins_the_running_batch_and_answers_the_bytes_it_has_alone(tiny):
    """The second request arrives while the first's second pass is held: it joins at that pass boundary (a pass
    of two rows follows), and both answers are their answers alone."""
    first_body, late_body = {**BODY, "seed": 1}, {**BODY, "seed": 2, "prompt": "why is the sky blue"}

    async def main():
        async with served(tiny, steps=4, batching="continuous") as (engine, client):
            alone = await _answers(client, [first_body, late_body])
            passes = HeldPasses(engine.continuous.stepper)
            first = asyncio.ensure_future(client.post("/v1/completions", json=first_body))
            await _until(lambda: passes.rows)  # the first row's first pass ran
            passes.hold.set()
            await _until(passes.held.is_set)
            late = asyncio.ensure_future(client.post("/v1/completions", json=late_body))
            await _until(lambda: engine.queued_rows == 1)
            passes.release.set()
            answers = [canonical((await first).content), canonical((await late).content)]
            return alone, answers, passes.rows

    alone, answers, rows = asyncio.run(main())
    assert answers == alone
    assert rows[:2] == [1, 1] and 2 in rows[2:]  # joined the running batch at the pass after the held one


def test_freed_places_are_refilled_and_every_answer_is_its_own(tiny):
    """max_batch 2, five requests with different budgets and a stream at once: never more than 2 rows a pass, the
    waiting rows take freed places; the answers and the stream's chunks are alone's; the per-pass metrics add up."""
    bodies = [{**BODY, "seed": seed, "max_tokens": tokens} for seed, tokens in enumerate((3, 12, 7, 12, 1))]
    stream_body = {**BODY, "seed": 9, "stream": True}

    async def read_stream(client):
        async with client.stream("POST", "/v1/completions", json=stream_body) as response:
            return [canonical(line[len("data: "):].encode()) async for line in response.aiter_lines()
                    if line.startswith("data: {")]

    async def main():
        async with served(tiny, steps=3, max_batch=2, batching="continuous") as (engine, client):
            alone = await _answers(client, bodies)
            stream_alone = await read_stream(client)
            engine.batch_sizes.clear()
            results = await asyncio.gather(*(client.post("/v1/completions", json=body) for body in bodies),
                                           read_stream(client))
            return alone, stream_alone, results, engine.batch_sizes, await client.get("/metrics")

    alone, stream_alone, results, sizes, metrics = asyncio.run(main())
    assert [canonical(response.content) for response in results[:-1]] == alone
    assert results[-1] == stream_alone and len(stream_alone) > 1
    assert max(sizes) == 2 and sum(sizes.values()) >= 3 * 3  # 6 rows of 3 passes, 2 at a time
    samples = {sample.name: sample.value for family in text_string_to_metric_families(metrics.text)
               for sample in family.samples if "le" not in sample.labels}
    assert samples["canvaslab_pass_rows_count"] == samples["canvaslab_decoder_passes_total"]
    assert samples["canvaslab_pass_rows_sum"] == 12 * 3  # 6 rows alone, then together; 3 passes each (one canvas)
    assert samples["canvaslab_pass_seconds_count"] == samples["canvaslab_pass_rows_count"]
    assert samples["canvaslab_running_rows"] == 0 and samples["canvaslab_queue_rows"] == 0


def test_an_unknown_batching_is_refused_before_serving(tiny):
    with pytest.raises(CanvaslabError, match="batching 'dynamic'"):
        Engine(tiny, ServeSettings("tiny", batching="dynamic"))


@pytest.mark.parametrize("fields, param", [({"temperature": 0}, "temperature"), ({"top_p": 0.5}, "top_p"),
                                           ({"logprobs": 2}, "logprobs")])
def test_sampling_of_its_own_is_refused_with_the_batching_that_serves_it(tiny, fields, param):
    """The stepper draws with the model's own schedule: a row's own temperature, top_p or log-probabilities would be
    ignored silently, so continuous batching refuses them and names --batching static."""

    async def main():
        async with served(tiny, batching="continuous") as (engine, client):
            refused = await client.post("/v1/completions", json={**BODY, **fields})
            plain = await client.post("/v1/completions", json={**BODY, "temperature": 1})
            return refused, plain

    refused, plain = asyncio.run(main())
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["param"] == param and "--batching static" in error["message"]
    assert plain.status_code == 200, plain.text


def test_a_full_batch_runs_its_passes_without_returning_while_rows_wait(tiny):
    """max_batch 1 and a second request waiting: the running row's passes follow one another on the model thread
    (one scheduling round for its whole generation), and the waiting row takes the place when it is freed."""
    first_body, waiting_body = {**BODY, "seed": 1}, {**BODY, "seed": 2}

    async def main():
        async with served(tiny, steps=4, max_batch=1, batching="continuous") as (engine, client):
            continuous = engine.continuous
            rounds, original = [], continuous._pass
            continuous._pass = lambda joining, loop: rounds.append(len(joining)) or original(joining, loop)
            passes = HeldPasses(continuous.stepper)
            passes.hold.set()
            first = asyncio.ensure_future(client.post("/v1/completions", json=first_body))
            await _until(passes.held.is_set)
            waiting = asyncio.ensure_future(client.post("/v1/completions", json=waiting_body))
            await _until(lambda: engine.queued_rows == 1)
            passes.release.set()
            statuses = [(await first).status_code, (await waiting).status_code]
            return statuses, rounds, passes.rows

    statuses, rounds, rows = asyncio.run(main())
    assert statuses == [200, 200]
    assert rows == [1] * 8  # two rows of 4 passes, one at a time
    assert rounds == [1, 1]  # one round per row: its 4 passes without a return to the event loop in between
