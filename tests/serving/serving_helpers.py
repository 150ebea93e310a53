"""Helpers of the server's tests: the app in-process (httpx's ASGI transport, lifespan run by hand) on the session's
``tiny`` model with two denoising steps, and a generate that can be held or made to fail. (A module of its own:
imported as ``conftest``, it would clash with the other folders' conftest files when they are collected together.)"""

from __future__ import annotations

import contextlib
import threading

import httpx

from canvaslab.generation import generate as canvaslab_generate
from canvaslab.serving import Engine, ServeSettings, create_app

STEPS = 2


@contextlib.asynccontextmanager
async def served(loaded, name: str = "tiny", generate=None, **settings):
    """``(engine, client)``: the app on ``loaded`` with its lifespan running, and a client talking to it. A
    ``generate`` stand-in is what static batching (the default) calls."""
    engine = Engine(loaded, ServeSettings(name, **{"steps": STEPS, **settings}), generate=generate)
    app = create_app(engine)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve.test",
                                     timeout=300) as client:
            yield engine, client


class Gate:
    """A generate that waits until ``release`` (the model thread is then busy), optionally failing for prompts
    that ``fails`` picks."""

    def __init__(self, hold: bool = True, fails=lambda prompt_ids: False):
        self.entered, self.release = threading.Event(), threading.Event()
        if not hold:
            self.release.set()
        self.fails = fails
        self.calls: list[int] = []  # the batch size of every call

    def __call__(self, loaded, prompts, **kwargs):
        self.calls.append(len(prompts))
        self.entered.set()
        assert self.release.wait(120), "the test never released the model thread"
        if any(self.fails(list(prompt)) for prompt in prompts):
            raise RuntimeError("this prompt breaks the model")
        return canvaslab_generate(loaded, prompts, **kwargs)


def error_of(response) -> dict:
    """The OpenAI error body of a refused request, checked for its shape."""
    assert "Traceback" not in response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["message"]
    return body["error"]
