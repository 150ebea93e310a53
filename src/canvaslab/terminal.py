"""Text from outside (a prompt file, a model, a study folder) made safe to show on a terminal.

Such text may hold escape sequences: OSC 52 writes the clipboard, others set the window title, clear the screen
or move the cursor. ``printable`` shows every control character (C0, DEL, C1) and the bidirectional overrides as
a visible escape (``\\x1b``, ``\\u202e``), so what a table, a progress line or an error shows is the text, never a
command to the terminal.
"""

from __future__ import annotations

import re

# C0 controls (tab and newline included: one value stays on one line), DEL, C1 controls, and the Unicode
# bidirectional controls that reorder what is displayed; and lone surrogates (bytes that were not UTF-8, decoded
# with ``surrogateescape``), which no terminal encoding can write.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object) -> str:
    """``text`` as a string with every control character escaped (``str(text)`` for other values)."""
    return _CONTROL.sub(_escape, str(text))
