"""One error type for everything a user can get wrong.

The CLI prints a ``CanvaslabError`` as a single line (no traceback): the message must name the problem
and, where there is one, the fix. Anything else that escapes is a bug and keeps its traceback.
"""


class CanvaslabError(Exception):
    """A user-facing problem: bad input, missing file, impossible setting."""
