"""The OpenAI-compatible request bodies ``canvaslab serve`` accepts, as pydantic models, and its error body.

Every refusal is an ``APIError``: an HTTP status and the body OpenAI's API answers with,
``{"error": {"message", "type", "param", "code"}}``, so the official ``openai`` client raises its own typed
errors. A pydantic validation error becomes one of these (``param`` the field's path, ``code``
``missing_required_parameter``, ``invalid_type`` or ``invalid_value``).

Fields fall in three groups (``docs/serving.md`` lists them):

- honoured: the fields of the models below;
- *neutral*: fields the sampler has no counterpart for (``presence_penalty``, ``logit_bias``, vLLM's ``top_k``,
  ``repetition_penalty``...), accepted at the value that changes nothing and refused at any other, with the
  reason (``NEUTRAL``);
- anything else: ignored, as vLLM ignores it, logged and listed in the ``X-Canvaslab-Ignored-Fields`` header.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError, field_validator

from canvaslab.choices import MAX_SEED
from canvaslab.errors import CanvaslabError
from canvaslab.io import UnreadableFile, parse_json as bounded_json

BODY_LIMIT_BYTES = 1 << 20  # a request body larger than this is refused (413) before it is parsed
MAX_CHOICES = 128  # OpenAI's own limit on ``n``
MAX_PROMPTS = 128  # prompts in one completions request
MAX_STOPS = 16
MAX_TOP_LOGPROBS = 20  # OpenAI's limit
ROLES = ("system", "user", "assistant")

_NO_PENALTY = "the sampler has no penalties"
# field: (the values that change nothing, why others are refused)
NEUTRAL: dict[str, tuple[tuple[Any, ...], str]] = {
    "presence_penalty": ((0, 0.0), _NO_PENALTY),
    "frequency_penalty": ((0, 0.0), _NO_PENALTY),
    "repetition_penalty": ((1, 1.0), _NO_PENALTY),
    "logit_bias": (({},), "the sampler takes no logit bias"),
    "top_k": ((-1, 0), "the sampler draws from the whole vocabulary (or top_p's nucleus)"),
    "min_p": ((0, 0.0), "the sampler has no min_p cut"),
    "min_tokens": ((0,), "a diffusion canvas cannot forbid the end-of-sequence token"),
    "best_of": ((1,), "every choice is returned; use 'n'"),
    "ignore_eos": ((False,), "the end-of-sequence token always ends the text"),
    "stop_token_ids": (([],), "give stop strings in 'stop'"),
    "skip_special_tokens": ((True,), "text is always decoded without special tokens"),
    "spaces_between_special_tokens": ((True,), "text is always decoded without special tokens"),
    "suffix": (("",), "a canvas is generated after the prompt only"),
    "tools": (([],), "this server has no tool calling"),
    "tool_choice": (("none",), "this server has no tool calling"),
    "parallel_tool_calls": ((False, True), ""),
    "add_generation_prompt": ((True,), "the assistant's turn is always opened"),
    "continue_final_message": ((False,), "the assistant's turn is always a new one"),
}


class APIError(Exception):
    """A refusal with OpenAI's error body."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", param: Optional[str] = None,
                 code: Optional[str] = None, headers: Optional[dict[str, str]] = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type: str, param: Optional[str] = None, code: Optional[str] = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def invalid(param: Optional[str], message: str, code: str = "invalid_value") -> APIError:
    return APIError(400, message, param=param, code=code)


def _non_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


class _Body(BaseModel):
    """What both endpoints take. Unknown fields are kept aside (``model_extra``) to be ignored and listed."""

    model_config = ConfigDict(extra="allow", strict=True)

    model: StrictStr
    max_tokens: Optional[StrictInt] = Field(None, ge=1, le=2**31)
    temperature: Optional[float] = Field(None, ge=0, le=2, description="0: greedy draws; otherwise a factor on the "
                                         "model's own temperature schedule (docs/serving.md)")
    top_p: Optional[float] = Field(None, gt=0, le=1, description="each draw from the pass's top-p nucleus")
    seed: Optional[StrictInt] = Field(None, ge=0, le=MAX_SEED)
    n: Optional[StrictInt] = Field(None, ge=1, le=MAX_CHOICES)
    stream: Optional[StrictBool] = None
    stream_options: Optional[StreamOptions] = None
    stop: Union[StrictStr, list[StrictStr], None] = Field(None, description="strings checked on the committed text; "
                                                          "the text ends before the first one")
    include_stop_str_in_output: StrictBool = False
    response_format: Optional[ResponseFormat] = None
    user: Optional[StrictStr] = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, value):
        stops = [value] if isinstance(value, str) else value or []
        if len(stops) > MAX_STOPS:
            raise ValueError(f"at most {MAX_STOPS} stop strings")
        if any(not stop for stop in stops):
            raise ValueError("a stop string must not be empty")
        return stops


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    include_usage: Optional[StrictBool] = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    type: Literal["text", "json_object", "json_schema"]


TokenIds = list[StrictInt]


class CompletionBody(_Body):
    """``POST /v1/completions``: one prompt or a list (text or token ids); choices are indexed prompt-major."""

    prompt: Union[StrictStr, list[StrictStr], TokenIds, list[TokenIds]]
    echo: StrictBool = False
    logprobs: Optional[StrictInt] = Field(None, ge=0, le=MAX_TOP_LOGPROBS)


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["text"]
    text: StrictStr


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    role: Literal["system", "user", "assistant"]
    content: Union[StrictStr, list[TextPart]]
    name: Optional[StrictStr] = None

    @property
    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(part.text for part in self.content)


class ChatBody(_Body):
    """``POST /v1/chat/completions``: messages through the model's chat template."""

    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: Optional[StrictInt] = Field(None, ge=1, le=2**31)
    logprobs: StrictBool = False
    top_logprobs: Optional[StrictInt] = Field(None, ge=0, le=MAX_TOP_LOGPROBS)


_Body.model_rebuild()
CompletionBody.model_rebuild()
ChatBody.model_rebuild()


@dataclass(frozen=True)
class CompletionRequest:
    """A checked request: its prompts (text, token ids, or one chat conversation) and the sampling fields."""

    kind: str  # "completion" or "chat"
    model: str
    prompts: tuple[Any, ...]  # completion: str or list[int] each; chat: one list of {"role", "content"}
    max_tokens: Optional[int]
    seed: Optional[int]
    n: int
    stream: bool
    include_usage: bool
    max_tokens_param: str = "max_tokens"  # the field the client named it with
    temperature: float = 1.0  # 0: greedy draws
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    include_stop: bool = False
    logprobs: Optional[int] = None  # how many top alternatives per token (0: the token's own only); None: none
    echo: bool = False
    ignored: tuple[str, ...] = ()  # unknown fields, ignored

    @property
    def prompt(self) -> Any:
        return self.prompts[0]


def parse_json(body: bytes) -> dict[str, Any]:
    """The body as a JSON object; anything the parser cannot take (too deep, not UTF-8, lone surrogates) is a 400."""
    try:
        data = bounded_json(body, source="the request body")  # nesting bounded: no RecursionError, no 500
        json.dumps(data, ensure_ascii=False).encode("utf-8")  # a lone surrogate ("\ud800") has no UTF-8 form
    except UnreadableFile as error:
        raise APIError(400, str(error), code="invalid_json") from None
    except UnicodeEncodeError:
        raise APIError(400, "the request body holds a lone surrogate (\\ud800-\\udfff) that is not text",
                       code="invalid_json") from None
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object", code="invalid_json")
    return data


def _param(loc: tuple) -> Optional[str]:
    """A pydantic error location as OpenAI names a parameter: ``messages[0].content``; union members left out."""
    param = ""
    for part in loc:
        if isinstance(part, int):
            param += f"[{part}]"
        elif "[" in part or part in ("str", "int", "float", "bool", "list", "dict", "none"):
            continue  # the union member tried
        else:
            param += f".{part}" if param else part
    return param or None


_TYPE_ERRORS = ("_type", "_parsing")


def refusal(error: ValidationError) -> APIError:
    first = max(error.errors(), key=lambda e: len(e["loc"]))  # the deepest: inside the union member meant
    param = _param(first["loc"])
    if first["type"] == "missing":
        return invalid(param, f"'{param}' is required", "missing_required_parameter")
    if first["type"] == "extra_forbidden":
        return invalid(param, f"'{param}' is not supported here", "unknown_parameter")
    code = "invalid_type" if first["type"].endswith(_TYPE_ERRORS) else "invalid_value"
    message = first["msg"].removeprefix("Value error, ")
    return invalid(param, f"'{param}': {message}", code)


def _neutral(data: dict[str, Any]) -> None:
    for name, (neutral, why) in NEUTRAL.items():
        value = data.get(name)
        if value is None or (value in neutral and type(value) in {type(v) for v in neutral}):
            continue
        shown = " or ".join(json.dumps(v) for v in neutral)
        raise invalid(name, f"'{name}' {json.dumps(value)} is not supported: {why}; leave it out or give {shown}",
                      "unsupported_value")


def _text_prompts(prompt: Any) -> tuple[Any, ...]:
    """The prompts of a completions body: a string, a list of strings, a list of ids, a list of lists of ids."""
    if isinstance(prompt, str):
        prompts: list[Any] = [prompt]
    elif prompt and isinstance(prompt[0], list):
        prompts = list(prompt)
    elif prompt and isinstance(prompt[0], str):
        prompts = list(prompt)
    else:
        prompts = [prompt]
    if len(prompts) > MAX_PROMPTS:
        raise invalid("prompt", f"'prompt' has {len(prompts)} prompts: at most {MAX_PROMPTS} per request")
    for i, one in enumerate(prompts):
        param = "prompt" if len(prompts) == 1 else f"prompt[{i}]"
        if not one or (isinstance(one, str) and not one.strip()):
            raise invalid(param, f"'{param}' must not be empty")
    return tuple(prompts)


def _messages(body: ChatBody) -> tuple[Any, ...]:
    for i, message in enumerate(body.messages):
        if not message.text.strip():
            raise invalid(f"messages[{i}].content", f"'messages[{i}].content' must not be empty")
    return ([{"role": m.role, "content": m.text} for m in body.messages],)


def _response_format(body: _Body) -> None:
    kind = body.response_format.type if body.response_format else "text"
    if kind != "text":
        raise invalid("response_format", f"'response_format' {kind!r} is not supported: a diffusion canvas is "
                      "denoised all at once, so no grammar can constrain the tokens as they are drawn; give "
                      "{\"type\": \"text\"}", "unsupported_value")


def _logprobs(body: _Body, kind: str) -> Optional[int]:
    if kind == "completion":
        if body.logprobs is not None and body.echo:
            raise invalid("echo", "'echo' with 'logprobs' asks for the prompt's log-probabilities: a diffusion model "
                          "has no left-to-right likelihood of a prompt to give; drop one of them", "unsupported_value")
        return body.logprobs
    if body.top_logprobs is not None and not body.logprobs:
        raise invalid("top_logprobs", "'top_logprobs' needs 'logprobs': true")
    return (body.top_logprobs or 0) if body.logprobs else None


def request_model(kind: str) -> type[_Body]:
    return CompletionBody if kind == "completion" else ChatBody


def parse_request(data: dict[str, Any], kind: str) -> CompletionRequest:
    """A completion (``kind="completion"``) or chat completion (``"chat"``) request, checked."""
    _neutral(data)
    try:
        body = request_model(kind).model_validate({k: v for k, v in data.items() if k not in NEUTRAL})
    except ValidationError as error:
        raise refusal(error) from None
    max_tokens, name = body.max_tokens, "max_tokens"
    if kind == "chat" and body.max_completion_tokens is not None:
        if max_tokens is not None and body.max_completion_tokens != max_tokens:
            raise invalid("max_completion_tokens", "give 'max_tokens' or 'max_completion_tokens', not two values")
        max_tokens, name = body.max_completion_tokens, "max_completion_tokens"
    stream = bool(body.stream)
    if body.stream_options is not None and not stream:
        raise invalid("stream_options", "'stream_options' needs 'stream': true")
    _response_format(body)
    logprobs = _logprobs(body, kind)
    prompts = _text_prompts(body.prompt) if kind == "completion" else _messages(body)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    return CompletionRequest(
        kind, body.model, prompts, max_tokens, body.seed, body.n or 1, stream, include_usage, name,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p, stop=tuple(body.stop or ()),
        include_stop=body.include_stop_str_in_output,
        logprobs=logprobs, echo=kind == "completion" and body.echo, ignored=tuple(sorted(body.model_extra or {})))
