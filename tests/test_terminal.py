"""Text from outside is shown with its control characters escaped (``canvaslab.terminal.printable``)."""

import pytest

from canvaslab.terminal import printable


@pytest.mark.parametrize("raw, shown", [
    ("\x1b]52;c;aGVsbG8=\x07", "\\x1b]52;c;aGVsbG8=\\x07"),  # OSC 52: write the clipboard
    ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),  # window title
    ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),  # clear the screen
    ("\x9b2J", "\\x9b2J"),  # the one-byte CSI
    ("abc\u202edef", "abc\\u202edef"),  # right-to-left override
    ("two\nlines\ttab", "two\\x0alines\\x09tab"),
])
def test_control_characters_are_escaped(raw, shown):
    assert printable(raw) == shown


def test_ordinary_text_is_unchanged():
    text = "Größe 3 × 4 = 12, «ok» — 日本語 🙂"
    assert printable(text) == text and printable(12) == "12"


def test_an_error_line_escapes_what_it_quotes(capsys):
    from canvaslab.cli.app import print_error

    print_error("prompt id '\x1b]52;c;aGk=\x07' is bad")
    err = capsys.readouterr().err
    assert "\x1b]52" not in err and "\\x1b]52;c;aGk=\\x07" in err


def test_bytes_that_were_not_utf8_are_escaped_not_a_crash(capsys):
    import os

    from canvaslab.cli.app import print_error

    text = os.fsdecode(b"caf\xe9")  # how the system hands over an argument that is not UTF-8
    assert printable(text) == "caf\\udce9"
    print_error(f"--prompt {text}")
    assert "caf\\udce9" in capsys.readouterr().err
