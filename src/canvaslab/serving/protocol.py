"""The OpenAI-compatible request bodies ``canvaslab serve`` accepts, checked field by field, and its error body.

Every refusal is an ``APIError``: an HTTP status and the body OpenAI's API answers with,
``{"error": {"message", "type", "param", "code"}}``, so the official ``openai`` client raises its own typed
errors. A field the server does not know is refused (never silently ignored), and so is a value the sampler
cannot honour (``temperature`` or ``top_p`` other than 1: the model's sampler follows its own temperature
schedule).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Optional

from canvaslab.choices import MAX_SEED, unicode_text
from canvaslab.errors import CanvaslabError
from canvaslab.io import UnreadableFile, parse_json as bounded_json

BODY_LIMIT_BYTES = 1 << 20  # a request body larger than this is refused (413) before it is parsed
MAX_CHOICES = 128  # OpenAI's own limit on ``n``
ROLES = ("system", "user", "assistant")

COMMON_FIELDS = ("model", "max_tokens", "temperature", "top_p", "seed", "n", "stream", "stream_options", "user")
COMPLETION_FIELDS = (*COMMON_FIELDS, "prompt")
CHAT_FIELDS = (*COMMON_FIELDS, "messages", "max_completion_tokens")


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


@dataclass(frozen=True)
class CompletionRequest:
    """A checked request: the prompt (text, token ids, or chat messages) and the sampling fields."""

    kind: str  # "completion" or "chat"
    model: str
    prompt: Any  # completion: str or list[int]; chat: list of {"role", "content"} with string contents
    max_tokens: Optional[int]
    seed: Optional[int]
    n: int
    stream: bool
    include_usage: bool
    max_tokens_param: str = "max_tokens"  # the field the client named it with


def parse_json(body: bytes) -> dict[str, Any]:
    """The body as a JSON object; anything else is a 400."""
    try:
        data = bounded_json(body, source="the request body")  # nesting bounded: no RecursionError, no 500
    except UnreadableFile as error:
        raise APIError(400, str(error), code="invalid_json") from None
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object", code="invalid_json")
    return data


def _whole(data: dict, name: str, minimum: int, maximum: int) -> Optional[int]:
    value = data.get(name)
    if value is None:
        return None
    if type(value) is not int:
        raise invalid(name, f"'{name}' must be an integer, not {type(value).__name__}", "invalid_type")
    if not minimum <= value <= maximum:
        raise invalid(name, f"'{name}' is {value}: it must be from {minimum} to {maximum}")
    return value


def _neutral_number(data: dict, name: str, what: str) -> None:
    """``temperature`` and ``top_p``: accepted when absent, null or 1 (the sampler's own schedule)."""
    value = data.get(name)
    if value is None:
        return
    if type(value) not in (int, float):
        raise invalid(name, f"'{name}' must be a number, not {type(value).__name__}", "invalid_type")
    if not math.isfinite(value) or value != 1:
        raise invalid(name, f"'{name}' {value} is not supported: {what}; leave it out or give 1",
                      "unsupported_value")


def _flag(data: dict, name: str) -> bool:
    value = data.get(name)
    if value is None:
        return False
    if type(value) is not bool:
        raise invalid(name, f"'{name}' must be true or false, not {type(value).__name__}", "invalid_type")
    return value


def _text(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise invalid(param, f"'{param}' must be a string, not {type(value).__name__}", "invalid_type")
    if not value.strip():
        raise invalid(param, f"'{param}' must not be empty")
    try:
        unicode_text(param, value)
    except CanvaslabError as error:  # a lone surrogate escaped in the JSON (\ud800): no tokenizer encodes it
        raise invalid(param, str(error)) from None
    return value


def _completion_prompt(value: Any) -> Any:
    """One prompt: a string, a list of token ids, or a list holding one string."""
    if value is None:
        raise invalid("prompt", "'prompt' is required", "missing_required_parameter")
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        value = value[0]
    if isinstance(value, str):
        return _text(value, "prompt")
    if isinstance(value, list):
        if not value:
            raise invalid("prompt", "'prompt' must not be empty")
        if all(type(token) is int for token in value):
            return list(value)
        raise invalid("prompt", "'prompt' must be a string or a list of token ids; send one prompt per request "
                      "(use 'n' for several completions)", "invalid_type")
    raise invalid("prompt", f"'prompt' must be a string or a list of token ids, not {type(value).__name__}",
                  "invalid_type")


def _messages(value: Any) -> list[dict[str, str]]:
    if value is None:
        raise invalid("messages", "'messages' is required", "missing_required_parameter")
    if not isinstance(value, list) or not value:
        raise invalid("messages", "'messages' must be a non-empty list of {role, content} objects", "invalid_type")
    checked = []
    for i, message in enumerate(value):
        param = f"messages[{i}]"
        if not isinstance(message, dict):
            raise invalid(param, f"'{param}' must be an object with 'role' and 'content'", "invalid_type")
        unknown = sorted(set(message) - {"role", "content"})
        if unknown:
            raise invalid(f"{param}.{unknown[0]}", f"'{param}.{unknown[0]}' is not supported: messages take "
                          "'role' and 'content' only", "unknown_parameter")
        role = message.get("role")
        if role not in ROLES:
            raise invalid(f"{param}.role", f"'{param}.role' is {role!r}: it must be one of {', '.join(ROLES)}")
        content = message.get("content")
        if isinstance(content, list):  # content parts: text parts only
            parts = []
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") != "text" or set(part) != {"type", "text"}:
                    raise invalid(f"{param}.content[{j}]", "only text content parts ({\"type\": \"text\", "
                                  "\"text\": ...}) are supported", "invalid_type")
                parts.append(_text(part["text"], f"{param}.content[{j}].text"))
            content = "".join(parts)
        checked.append({"role": role, "content": _text(content, f"{param}.content")})
    return checked


def parse_request(data: dict[str, Any], kind: str) -> CompletionRequest:
    """A completion (``kind="completion"``) or chat completion (``"chat"``) request, checked."""
    allowed = COMPLETION_FIELDS if kind == "completion" else CHAT_FIELDS
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise invalid(unknown[0], f"unknown or unsupported field '{unknown[0]}'; this server takes "
                      f"{', '.join(allowed)}", "unknown_parameter")
    model = data.get("model")
    if model is None:
        raise invalid("model", "'model' is required", "missing_required_parameter")
    if not isinstance(model, str):
        raise invalid("model", f"'model' must be a string, not {type(model).__name__}", "invalid_type")
    max_tokens = _whole(data, "max_tokens", 1, 2**31)
    if kind == "chat":
        newer = _whole(data, "max_completion_tokens", 1, 2**31)
        if newer is not None and max_tokens is not None and newer != max_tokens:
            raise invalid("max_completion_tokens", "give 'max_tokens' or 'max_completion_tokens', not two values")
        max_tokens = newer if newer is not None else max_tokens
        name = "max_completion_tokens" if newer is not None else "max_tokens"
    else:
        name = "max_tokens"
    _neutral_number(data, "temperature", "the model's sampler follows its own temperature schedule")
    _neutral_number(data, "top_p", "the model's sampler draws from the whole distribution")
    seed = _whole(data, "seed", 0, MAX_SEED)
    n = _whole(data, "n", 1, MAX_CHOICES) or 1
    stream = _flag(data, "stream")
    options = data.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict) or set(options) - {"include_usage"}:
            raise invalid("stream_options", "'stream_options' takes only {\"include_usage\": true|false}")
        if not stream:
            raise invalid("stream_options", "'stream_options' needs 'stream': true")
        include_usage = _flag(options, "include_usage")
    user = data.get("user")
    if user is not None and not isinstance(user, str):
        raise invalid("user", f"'user' must be a string, not {type(user).__name__}", "invalid_type")
    prompt = _completion_prompt(data.get("prompt")) if kind == "completion" else _messages(data.get("messages"))
    return CompletionRequest(kind, model, prompt, max_tokens, seed, n, stream, include_usage, name)
