"""Neutralising text before it reaches a terminal or a web page.

Thread ids, model messages, tool names and arguments come from outside the process:
printed raw, an escape sequence in them can set the window title or clear the screen,
a newline can forge a table row, and a bidirectional override can make a page show
other text than is stored. :func:`printable` renders every character that
could do so as a visible escape (``\\x1b``, ``\\n``), so a line stays one line and
shows what is stored. JSON text needs the same: msgspec escapes only the C0 controls
and leaves a bidirectional override, a C1 control or a line separator raw, so
:func:`json_printable` writes those as JSON escapes, which decode to the same value.
"""

from __future__ import annotations

import unicodedata

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Control characters (C0, DEL, C1), format characters (bidirectional overrides that
reorder what the terminal shows), lone surrogates and the Unicode line separators."""


def printable(text: str) -> str:
    """``text`` with every control, format and line-separating character shown as an
    escape (``\\x1b``, ``\\n``, ``\\u202e``); plain text comes back unchanged."""
    if text.isprintable():
        return text  # the common case, checked in C
    return "".join(_escaped(char) for char in text)


def _escaped(char: str) -> str:
    if unicodedata.category(char) not in _UNSAFE_CATEGORIES:
        return char
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def json_printable(text: str) -> str:
    """JSON ``text`` with every character :func:`printable` escapes written as a JSON
    escape (``\\u202e``): the same JSON value, one line that shows what it holds on a
    terminal and that no reader splits (``str.splitlines`` splits at U+2028 and U+0085).

    Such a character can only stand inside a JSON string (JSON's whitespace is ASCII),
    where its escape means the character itself.
    """
    if text.isprintable():
        return text
    return "".join(_json_escaped(char) for char in text)


def _json_escaped(char: str) -> str:
    if unicodedata.category(char) not in _UNSAFE_CATEGORIES:
        return char
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    high, low = divmod(code - 0x10000, 0x400)  # JSON escapes the rest as a UTF-16 pair
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"


def encodable(text: str) -> str:
    """``text`` as UTF-8 can carry it, to a front end or an exporter: a lone surrogate
    (a ``"\\ud800"`` escape a model's JSON held, decoded) made U+FFFD. Plain text comes
    back unchanged."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def whole_number(text: str, *, most_digits: int) -> int | None:
    """The whole number ``text`` writes in at most ``most_digits`` ASCII digits; None
    for any other text. ``str.isdigit`` alone also takes other scripts' digits and
    superscripts (``"²"``), which ``int`` refuses with a ValueError, and ``int`` refuses
    a number of more than 4,300 digits: every number read from outside (a header, a
    query, a URL, a stored row) is read here."""
    if not (text.isascii() and text.isdigit()) or len(text) > most_digits:
        return None
    return int(text)
