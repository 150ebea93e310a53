"""The HTTP side of ``canvaslab serve``: an OpenAI-compatible FastAPI app around an ``Engine``.

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions``, ``GET /v1/models`` (and ``/v1/models/{id}``),
``POST /tokenize`` and ``/detokenize`` (vLLM's shapes), ``GET /version``, ``GET /health``, ``GET /metrics``
(Prometheus text) and ``GET /openapi.json``. Every refusal carries OpenAI's error body; nothing a client sends is
answered with a traceback. Given an API key, the ``/v1`` routes and the tokenizer's answer only requests bearing
it (``Authorization: Bearer KEY``).

A streamed answer (``"stream": true``) is server-sent events, one ``data:`` line per chunk, ending with
``data: [DONE]``. A chunk is one of three events of one choice (``docs/serving.md``):

- *draft*: the choice's canvas after a denoising pass changed it (``text`` empty; the canvas under
  ``draft``: ``canvas``, ``pass``, ``text``, ``token_ids``);
- *commit*: a canvas was committed (``text``: the text it adds);
- *final*: the rest of the text, ``finish_reason``, ``token_ids`` and ``stop_point``.

The ``text`` (chat: ``delta.content``) of a choice's chunks, concatenated, is its whole completion.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import logging
import secrets
import time
import uuid
from typing import Any, AsyncIterator, Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from canvaslab.serving.engine import Engine, RowOutcome, Submission, TokenLogprob
from canvaslab.serving.protocol import (BODY_LIMIT_BYTES, APIError, ChatBody, CompletionBody, CompletionRequest,
                                        error_body, invalid, parse_json, parse_request, refusal)

ENDPOINTS = ("/v1/completions", "/v1/chat/completions", "/v1/models", "/tokenize", "/detokenize", "/version",
             "/health", "/metrics")
GENERATING = ("/v1/completions", "/v1/chat/completions")
GUARDED = ("/v1/", "/tokenize", "/detokenize")  # what an API key protects
CLIENT_GONE = 499  # nginx's status for a client that closed the connection first (nobody reads it)
IGNORED_HEADER = "X-Canvaslab-Ignored-Fields"

log = logging.getLogger("canvaslab.serving")


class TokenizeBody(BaseModel):
    """vLLM's ``POST /tokenize``: a prompt, or chat messages through the model's template."""

    model_config = ConfigDict(extra="ignore", strict=True)
    model: Optional[StrictStr] = None
    prompt: Optional[StrictStr] = None
    messages: Optional[list[dict[str, Any]]] = None
    add_special_tokens: StrictBool = True


class DetokenizeBody(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    model: Optional[StrictStr] = None
    tokens: list[StrictInt] = Field(min_length=0)


def _version() -> str:
    try:
        return importlib.metadata.version("canvaslab")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class _Guarded:
    """ASGI middleware: with an API key, the guarded routes answer 401 (OpenAI's body) without ``Bearer KEY``."""

    def __init__(self, app, api_key: Optional[str]):
        self.app, self.expected = app, f"Bearer {api_key}".encode() if api_key else None

    async def __call__(self, scope, receive, send):
        if self.expected is None or scope["type"] != "http" or not scope["path"].startswith(GUARDED):
            return await self.app(scope, receive, send)
        given = dict(scope["headers"]).get(b"authorization", b"")
        if secrets.compare_digest(given, self.expected):
            return await self.app(scope, receive, send)
        response = JSONResponse(error_body("a valid API key is needed: send 'Authorization: Bearer KEY'",
                                           "invalid_request_error", None, "invalid_api_key"), status_code=401,
                                headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


class _Measured:
    """ASGI middleware: each request's status and, for the generating endpoints, its latency to the last byte."""

    def __init__(self, app, metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        endpoint = "/v1/models" if path.startswith("/v1/models/") else path if path in ENDPOINTS else "other"
        started, status = time.perf_counter(), [500]

        async def measured_send(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, measured_send)
        finally:
            self.metrics.requests.labels(endpoint, str(status[0])).inc()
            if endpoint in GENERATING:
                self.metrics.latency.labels(endpoint).observe(time.perf_counter() - started)


def _error_response(error: APIError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


async def _read_body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > BODY_LIMIT_BYTES:
        raise APIError(413, f"the request body is over {BODY_LIMIT_BYTES} bytes", code="body_too_large")
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > BODY_LIMIT_BYTES:
                raise APIError(413, f"the request body is over {BODY_LIMIT_BYTES} bytes", code="body_too_large")
    except ClientDisconnect:  # gone, or cut off by the read deadline: nobody reads the answer, and no traceback
        raise APIError(CLIENT_GONE, "the client closed the connection before its request was whole",
                       code="client_gone") from None
    return bytes(body)


async def _gone(request: Request) -> None:
    """Returns when the client disconnects (the body is already read, so only that message is left)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def _sse(payload: Any) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"


class _Answers:
    """Builds the response bodies of one server (its model name and fingerprint)."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.fingerprint = f"canvaslab-{_version()}-{engine.settings.mode}"

    def head(self, kind: str, chunk: bool, seed: int) -> dict[str, Any]:
        prefix = "chatcmpl" if kind == "chat" else "cmpl"
        obj = ("chat.completion.chunk" if chunk else "chat.completion") if kind == "chat" else "text_completion"
        return {"id": f"{prefix}-{uuid.uuid4().hex}", "object": obj, "created": int(time.time()),
                "model": self.engine.settings.model, "system_fingerprint": self.fingerprint, "seed": seed}

    @staticmethod
    def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens}

    def token_text(self, token: int) -> str:
        return self.engine.loaded.tokenizer.decode([token])

    def logprobs(self, kind: str, entries: Optional[list[TokenLogprob]], offset: int = 0) -> Optional[dict]:
        """OpenAI's ``logprobs`` object of a choice: completions' four lists, or chat's ``content`` list."""
        if entries is None:
            return None
        if kind == "chat":
            def item(token, logprob):
                text = self.token_text(token)
                return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

            return {"content": [{**item(e.token, e.logprob), "top_logprobs": [item(t, lp) for t, lp in e.top]}
                                for e in entries]}
        tokens = [self.token_text(e.token) for e in entries]
        offsets = [offset + sum(map(len, tokens[:i])) for i in range(len(tokens))]
        return {"tokens": tokens, "token_logprobs": [e.logprob for e in entries],
                "top_logprobs": [{self.token_text(t): lp for t, lp in e.top} for e in entries],
                "text_offset": offsets}

    def echoed(self, request: CompletionRequest, submission: Submission, index: int) -> str:
        """The prompt a completions choice echoes (its prompt as text), or "" without ``echo``."""
        if not request.echo:
            return ""
        prompt = request.prompts[index // request.n]
        return prompt if isinstance(prompt, str) else self.engine.detokenize(prompt)

    def body(self, request: CompletionRequest, submission: Submission, outcomes: list[RowOutcome]) -> dict[str, Any]:
        kind, choices = request.kind, []
        for row, outcome in zip(submission.rows, outcomes):
            choice: dict[str, Any] = {"index": row.index}
            echo = self.echoed(request, submission, row.index)
            if kind == "chat":
                choice["message"] = {"role": "assistant", "content": outcome.text}
            else:
                choice["text"] = echo + outcome.text
            choice.update(finish_reason=outcome.finish_reason, stop_reason=outcome.stop_reason,
                          logprobs=self.logprobs(kind, outcome.logprobs, len(echo)), token_ids=outcome.token_ids,
                          stop_point=outcome.stop_point)
            choices.append(choice)
        completion_tokens = sum(len(outcome.token_ids) for outcome in outcomes)
        return {**self.head(kind, False, submission.seed), "choices": choices,
                "usage": self.usage(submission.prompt_tokens, completion_tokens)}

    @staticmethod
    def chunk_choice(kind: str, index: int, text: str, finish_reason: Optional[str] = None,
                     **extra: Any) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": index}
        if kind == "chat":
            choice["delta"] = {"content": text}
        else:
            choice["text"] = text
        return {**choice, "logprobs": None, "finish_reason": finish_reason, **extra}


def _openapi(app: FastAPI):
    """``/openapi.json`` with the request models of the generating routes (their bodies are parsed by hand, so
    that every refusal keeps OpenAI's shape)."""
    from fastapi.openapi.utils import get_openapi

    def schema() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version, routes=app.routes)
            components = document.setdefault("components", {}).setdefault("schemas", {})
            for path, model in (("/v1/completions", CompletionBody), ("/v1/chat/completions", ChatBody)):
                found = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(found.pop("$defs", {}))
                components[model.__name__] = found
                document["paths"][path]["post"]["requestBody"] = {
                    "required": True, "content": {"application/json": {
                        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}
            app.openapi_schema = document
        return app.openapi_schema

    return schema


def create_app(engine: Engine, api_key: Optional[str] = None) -> FastAPI:
    """The app; its lifespan starts the engine and, on shutdown, lets it finish every queued row first."""

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await engine.start()
        try:
            yield
        finally:
            await engine.stop()

    app = FastAPI(title="canvaslab serve", version=_version(), lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url="/openapi.json")
    app.openapi = _openapi(app)
    app.state.engine = engine
    app.add_middleware(_Guarded, api_key=api_key)
    app.add_middleware(_Measured, metrics=engine.metrics)
    answers = _Answers(engine)

    @app.exception_handler(APIError)
    async def api_error(request: Request, error: APIError):
        return _error_response(error)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code)
        message = f"{request.method} {request.url.path}: {error.detail}"
        return JSONResponse(error_body(message, "invalid_request_error", None, code), status_code=error.status_code,
                            headers=getattr(error, "headers", None))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, error: Exception):
        return JSONResponse(error_body("internal server error (see the server's log)", "server_error", None,
                                       "internal_error"), status_code=500)

    def check_model(model: Optional[str]) -> None:
        if model is not None and model != engine.settings.model:
            raise APIError(404, f"the model '{model}' is not served here; this server serves "
                           f"'{engine.settings.model}'", param="model", code="model_not_found")

    async def generate(request: Request, kind: str):
        arrived = time.perf_counter()
        parsed = parse_request(parse_json(await _read_body(request)), kind)
        check_model(parsed.model)
        ignored = {IGNORED_HEADER: ",".join(parsed.ignored)} if parsed.ignored else {}
        if parsed.ignored:
            log.warning("ignored request fields: %s", ", ".join(parsed.ignored))
        submission = engine.submit(parsed, engine.encode(parsed))
        if parsed.stream:
            return StreamingResponse(_stream(request, parsed, submission, arrived), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **ignored})
        waiting = asyncio.ensure_future(asyncio.gather(*(row.future for row in submission.rows)))
        watcher = asyncio.ensure_future(_gone(request))
        try:
            await asyncio.wait({waiting, watcher}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # cancelled (the server's task for this request went away)
            engine.cancel(submission.rows)
            waiting.cancel()
            raise
        finally:
            watcher.cancel()
        if not waiting.done():
            engine.cancel(submission.rows)
            waiting.cancel()
            return Response(status_code=CLIENT_GONE)
        try:
            outcomes = waiting.result()
        except APIError:
            engine.cancel(submission.rows)
            raise
        first = outcomes[0]
        return JSONResponse(answers.body(parsed, submission, outcomes),
                            headers={"X-Canvaslab-Batch-Rows": str(first.batch_rows),
                                     "X-Canvaslab-Batch-Row": str(first.batch_row), **ignored})

    async def _stream(request: Request, parsed: CompletionRequest, submission: Submission,
                      arrived: float) -> AsyncIterator[str]:
        kind, include_usage = parsed.kind, parsed.include_usage
        head = answers.head(kind, True, submission.seed)
        rows, finished, completion_tokens, first_chunk = len(submission.rows), 0, 0, True
        watcher = asyncio.ensure_future(_gone(request))
        try:
            for row in submission.rows:
                if kind == "chat":
                    yield _sse({**head, "choices": [{"index": row.index, "delta": {"role": "assistant", "content": ""},
                                                     "logprobs": None, "finish_reason": None}]})
                elif parsed.echo:
                    yield _sse({**head, "choices": [answers.chunk_choice(
                        kind, row.index, answers.echoed(parsed, submission, row.index))]})
            while finished < rows:
                getting = asyncio.ensure_future(submission.events.get())
                await asyncio.wait({getting, watcher}, return_when=asyncio.FIRST_COMPLETED)
                if not getting.done():
                    getting.cancel()
                    return  # the client is gone: the finally below drops its rows
                event = getting.result()
                if first_chunk:
                    engine.metrics.first_chunk.labels(request.url.path).observe(time.perf_counter() - arrived)
                    first_chunk = False
                kind_of = event["type"]
                if kind_of == "error":
                    yield _sse(event["error"].body())
                    return
                if kind_of == "draft":
                    draft = {key: event[key] for key in ("canvas", "pass", "text", "token_ids")}
                    choice = answers.chunk_choice(kind, event["index"], "", draft=draft)
                elif kind_of == "commit":
                    choice = answers.chunk_choice(kind, event["index"], event["text"],
                                                  commit={"canvas": event["canvas"]})
                else:
                    outcome: RowOutcome = event["outcome"]
                    finished += 1
                    completion_tokens += len(outcome.token_ids)
                    choice = answers.chunk_choice(kind, event["index"], event["text"], outcome.finish_reason,
                                                  token_ids=outcome.token_ids, stop_point=outcome.stop_point,
                                                  stop_reason=outcome.stop_reason)
                    choice["logprobs"] = answers.logprobs(kind, outcome.logprobs)
                yield _sse({**head, "choices": [choice]})
            if include_usage:
                yield _sse({**head, "choices": [], "usage": answers.usage(submission.prompt_tokens, completion_tokens)})
            yield "data: [DONE]\n\n"
        finally:
            watcher.cancel()
            engine.cancel(submission.rows)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await generate(request, "completion")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await generate(request, "chat")

    def model_card() -> dict[str, Any]:
        return {"id": engine.settings.model, "object": "model", "created": 0, "owned_by": "canvaslab",
                "mode": engine.settings.mode, "max_tokens": engine.budget,
                "max_prompt_tokens": engine.max_prompt_tokens, "chat_template": engine.has_chat_template}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str):
        if model_id != engine.settings.model:
            raise APIError(404, f"the model '{model_id}' is not served here", param="model", code="model_not_found")
        return model_card()

    def model_of(body: type[BaseModel], data: dict[str, Any]):
        try:
            parsed = body.model_validate(data)
        except ValidationError as error:
            raise refusal(error) from None
        check_model(parsed.model)
        return parsed

    @app.post("/tokenize")
    async def tokenize(request: Request):
        body = model_of(TokenizeBody, parse_json(await _read_body(request)))
        if (body.prompt is None) == (body.messages is None):
            raise invalid("prompt", "give 'prompt' or 'messages'", "missing_required_parameter")
        if body.prompt is not None:
            tokens = engine.tokenize(body.prompt) if body.add_special_tokens else \
                list(engine.loaded.tokenizer(body.prompt, add_special_tokens=False)["input_ids"])
        else:
            chat = parse_request({"model": engine.settings.model, "messages": body.messages}, "chat")
            tokens = engine.encode(chat)[0]
        return {"count": len(tokens), "max_model_len": engine.max_model_len, "tokens": tokens}

    @app.post("/detokenize")
    async def detokenize(request: Request):
        body = model_of(DetokenizeBody, parse_json(await _read_body(request)))
        bad = next((token for token in body.tokens if not 0 <= token < engine.vocab_size), None)
        if bad is not None:
            raise invalid("tokens", f"token id {bad} is outside the model's vocabulary (0 to {engine.vocab_size - 1})")
        return {"prompt": engine.detokenize(body.tokens)}

    @app.get("/version")
    async def version():
        return {"version": _version()}

    @app.get("/health")
    async def health():
        body = {"status": "shutting down" if engine.closing else "ok", "model": engine.settings.model,
                "mode": engine.settings.mode, "queued_rows": engine.queued_rows}
        return JSONResponse(body, status_code=503 if engine.closing else 200)

    @app.get("/metrics")
    async def metrics():
        engine.metrics.queue_rows.set(engine.queued_rows)
        return Response(engine.metrics.render(), media_type=engine.metrics.content_type)

    return app
