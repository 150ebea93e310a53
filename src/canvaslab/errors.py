"""One error type for everything a user can get wrong.

The CLI prints a ``CanvaslabError`` as a single line (no traceback): the message must name the problem
and, where there is one, the fix. Anything else that escapes is a bug and keeps its traceback. ``one_line`` is
how every such line is made from text canvaslab does not control (a third party's exception, a path).
"""

LINE_LIMIT = 1000  # characters of one error line: a whole message, not a dump of what a third party raised


def one_line(message: object, limit: int = LINE_LIMIT) -> str:
    """``message`` as one line of at most ``limit`` characters: its lines joined by spaces, the middle of an
    over-long one replaced by `` ... `` (its start names the problem, its end often the fix)."""
    text = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    if len(text) <= limit:
        return text
    head = (limit - 5) * 2 // 3
    return f"{text[:head]} ... {text[len(text) - (limit - 5 - head):]}"


class CanvaslabError(Exception):
    """A user-facing problem: bad input, missing file, impossible setting (exit code 2)."""

    exit_code = 2


class RunFailed(CanvaslabError):
    """A run that started and could not go on (the disk full, a device lost): one line, exit code 1; what was
    finished is kept, and the message says how to resume."""

    exit_code = 1
