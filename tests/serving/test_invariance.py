"""The proof on the CPU: in invariant mode a probe's answer is the same bytes alone and amid 1, 4 and 16 other
clients' random traffic (random prompts of random lengths, max_tokens, seeds, n; completions, chat, a stream),
whatever batch it lands in and whatever its row; on the random-weight ``tiny``, and amid 1 and 4 other clients on
the trained ``mini``."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from canvaslab.models import load_model
from canvaslab.serving.loadtest import default_probes, probe_under_load
from serving_helpers import served

LEVELS = (1, 4, 16)
MINI_LEVELS = (1, 4)
MINI_BUDGET = 32  # one of mini's 128-token canvases


@pytest.mark.parametrize("batching", ["static", "continuous"])
def test_every_probe_is_byte_identical_to_its_answer_alone(tiny, batching):
    async def main():
        async with served(tiny, mode="invariant", max_batch=8, batching=batching) as (engine, client):
            return await probe_under_load(client, "tiny", LEVELS, budget=engine.budget,
                                          batch_sizes=lambda: engine.batch_sizes), engine

    result, engine = asyncio.run(main())
    probe_rows = sum(probe.body.get("n", 1) for probe in default_probes())
    assert result["probe_answers"] == len(LEVELS) * len(default_probes()) * 2
    assert result["differing"] == 0, [level["differing"] for level in result["levels"]]
    for level in result["levels"]:
        assert level["errors"] == {} and level["requests"] > level["probe_answers"]
        seen = [rows for answers in level["probe_batch_rows"].values() for rows in answers if rows is not None]
        # the probes shared their batches with other clients' rows: batches larger than all probes together
        assert max(seen) > probe_rows, level
    assert max(engine.batch_sizes) == 8  # the 16 clients filled batches (continuous: passes)


@pytest.mark.parametrize("batching", ["static", "continuous"])
def test_several_canvases_are_batched_and_answered_the_same(tiny_short_canvas, batching):
    """A 32-token canvas: answers of 1 to 3 canvases, batched by the canvases they need (continuously: rows of any
    canvases share passes, joining while others are on later canvases); the probes' stop points keep only their own
    canvases."""
    async def main():
        async with served(tiny_short_canvas, name="short", mode="invariant", max_batch=6, batching=batching) as (
                engine, client):
            return await probe_under_load(client, "short", (4,), budget=96, repeats=1)

    result = asyncio.run(main())
    assert result["differing"] == 0 and result["levels"][0]["errors"] == {}


def test_the_proof_sees_a_row_keyed_by_its_place_in_the_batch(tiny):
    """The negative control of the comparison: rows keyed by their position instead of their request draw other
    random numbers in a batch than alone, and the probes' answers differ."""
    from canvaslab.generation import generate

    def keyed_by_position(loaded, prompts, **kwargs):
        return generate(loaded, prompts, **{**kwargs, "requests": [f"row {i}" for i in range(len(prompts))]})

    async def main():
        async with served(tiny, mode="invariant", generate=keyed_by_position) as (engine, client):
            return await probe_under_load(client, "tiny", (4,), budget=engine.budget, repeats=1)

    assert asyncio.run(main())["differing"] > 0


@pytest.fixture(scope="module")
def mini():
    return load_model("mini", dtype="float32")


@pytest.mark.slow
def test_mini_probes_are_byte_identical_to_their_answers_alone(mini):
    """The trained ``mini`` (real text, a chat template, early stops): the same proof at 1 and 4 other clients,
    each probe once per level; a 200 ms batch window makes the probes share their batches with the others'."""
    probes = [dataclasses.replace(probe, body={"max_tokens": MINI_BUDGET, **probe.body}) for probe in default_probes()]

    async def main():
        async with served(mini, name="mini", mode="invariant", max_batch=8, batch_window_ms=200) as (engine, client):
            return await probe_under_load(client, "mini", MINI_LEVELS, budget=MINI_BUDGET, probes=probes, repeats=1,
                                          batch_sizes=lambda: engine.batch_sizes)

    result = asyncio.run(main())
    probe_rows = sum(probe.body.get("n", 1) for probe in probes)
    assert result["probe_answers"] == len(MINI_LEVELS) * len(probes)
    assert result["differing"] == 0, [level["differing"] for level in result["levels"]]
    for level in result["levels"]:
        assert level["errors"] == {} and level["requests"] > level["probe_answers"]
        seen = [rows for answers in level["probe_batch_rows"].values() for rows in answers if rows is not None]
        assert max(seen) > probe_rows, level
