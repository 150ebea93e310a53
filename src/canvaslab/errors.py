"""One error type for everything a user can get wrong.

The CLI prints a ``CanvaslabError`` as a single line (no traceback): the message must name the problem
and, where there is one, the fix. Anything else that escapes is a bug and keeps its traceback.
"""


class CanvaslabError(Exception):
    """A user-facing problem: bad input, missing file, impossible setting (exit code 2)."""

    exit_code = 2


class RunFailed(CanvaslabError):
    """A run that started and could not go on (the disk full, a device lost): one line, exit code 1; what was
    finished is kept, and the message says how to resume."""

    exit_code = 1
