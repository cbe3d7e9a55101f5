"""Neutralising text before it reaches a terminal or a web page.

Thread ids, model messages, tool names and arguments come from outside the process:
printed raw, an escape sequence in them can set the window title or clear the screen,
a newline can forge a table row, a bidirectional override can make a page show other
text than is stored, and a character that shows nothing (a Hangul filler, the Braille
blank, a variation selector) makes ``"bob\\u3164"`` read as ``"bob"`` and two keys as
one. :func:`printable` renders every character that could do so as a visible escape
(``\\x1b``, ``\\n``, ``\\u3164``), so a line stays one line and shows what is stored.
JSON text needs the same: msgspec escapes only the C0 controls and leaves a
bidirectional override, a C1 control or a line separator raw, so :func:`json_printable`
writes those as JSON escapes, which decode to the same value.

:func:`shows_nothing` is the one rule of what shows nothing: these escapes use it, and
:func:`is_blank` (a reason, an answer, a reviewer id that shows nothing is refused).
:func:`shown_escaped` says which characters the escapes take; a new thread's id may hold
none of them (:func:`covonaut_es.domain.check_thread_id`).
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zs", "Zl", "Zp"})
"""Control characters (C0, DEL, C1), format characters (zero-width space, word joiner,
byte order mark, bidirectional overrides that reorder what is shown), lone surrogates,
spaces (U+00A0, U+3000) and the Unicode line separators."""

_BLANK_GLYPHS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
"""Letters and a symbol drawn as empty space: the Hangul fillers and the Braille blank."""

_IGNORABLE_MARKS = frozenset(
    "\u034f\u17b4\u17b5\u180b\u180c\u180d\u180f\U00016fe4"
    + "".join(map(chr, range(0xFE00, 0xFE10)))
)
"""Combining marks Unicode makes default-ignorable, drawn as nothing even after a letter:
the combining grapheme joiner, the Khmer inherent vowels, the Mongolian free variation
selectors, the Khitan filler and the variation selectors (VS17 to VS256 are in the
reserved plane-14 block below)."""

_MARKS = frozenset({"Mn", "Mc", "Me"})


def shows_nothing(char: str) -> bool:
    """Whether ``char`` shows nothing wherever it stands: a space or separator (ASCII's
    included), a control or format character, a lone surrogate, a letter or symbol
    drawn as empty space, a default-ignorable combining mark, or a code point Unicode
    reserves as default-ignorable. Other combining marks show on the character before."""
    code = ord(char)
    return (
        unicodedata.category(char) in _INVISIBLE_CATEGORIES
        or char in _BLANK_GLYPHS
        or char in _IGNORABLE_MARKS
        or code == 0x2065  # reserved default-ignorable code points
        or 0xFFF0 <= code <= 0xFFF8
        or 0xE0000 <= code <= 0xE0FFF
    )


def is_blank(text: str) -> bool:
    """Whether ``text`` shows nothing: it is empty, or holds only characters that
    :func:`shows_nothing` and combining marks with nothing to combine with."""
    return all(shows_nothing(char) or unicodedata.category(char) in _MARKS for char in text)


def shown_escaped(char: str) -> bool:
    """Whether ``char`` is written as an escape for a person to see it: it shows nothing
    (ASCII's space aside), or is no printable character (a private-use or unassigned
    code point, which a font may draw as anything or nothing)."""
    return char != " " and (shows_nothing(char) or not char.isprintable())


def printable(text: str) -> str:
    """``text`` with every character that shows nothing, controls and line separators
    among them, and every private-use or unassigned one shown as an escape (``\\x1b``,
    ``\\n``, ``\\u202e``, ``\\u3164``); plain text comes back unchanged."""
    if text.isascii() and text.isprintable():
        return text  # the common case, checked in C
    return "".join(_escaped(char) for char in text)


def _escaped(char: str) -> str:
    if not shown_escaped(char):
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
    if text.isascii() and text.isprintable():
        return text
    return "".join(_json_escaped(char) for char in text)


def _json_escaped(char: str) -> str:
    if not shown_escaped(char):
        return char
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    high, low = divmod(code - 0x10000, 0x400)  # JSON escapes the rest as a UTF-16 pair
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"


INDENTED_LEVELS = 8
"""How deep :func:`indented_json` lays a value out on lines of their own."""


def indented_json(value: Any) -> str:
    """``value`` as JSON (keys sorted, text as it is), each array and object of the top
    :data:`INDENTED_LEVELS` levels on lines of its own, two spaces a level; those below
    on one line: a value nested deep, laid out whole, took each of its lines twice its
    depth in spaces (a megabyte of a model's arguments made a page of 137 MB)."""
    return _indented(value, 0)


def _indented(value: Any, level: int) -> str:
    compact = level >= INDENTED_LEVELS or not isinstance(value, dict | list) or not value
    if compact:
        separators = (", ", ": ")
        return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=separators)
    inner = "\n" + "  " * (level + 1)
    if isinstance(value, list):
        items = [_indented(item, level + 1) for item in value]
        return "[" + inner + ("," + inner).join(items) + "\n" + "  " * level + "]"
    pairs = [
        json.dumps(key, ensure_ascii=False) + ": " + _indented(value[key], level + 1)
        for key in sorted(value)
    ]
    return "{" + inner + ("," + inner).join(pairs) + "\n" + "  " * level + "}"


def is_text(text: str) -> bool:
    """Whether ``text`` is valid Unicode text, which UTF-8 and every store can carry: it
    holds no lone surrogate."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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


def exception_text(error: BaseException) -> str:
    """The text of ``error``, an exception from code outside the library (a tool, a
    provider, an upcaster, a callback): its ``__str__`` is that code too, and may raise
    or give something other than a string. Such an exception is named by its class, so
    that telling what went wrong never raises in its place (a KeyboardInterrupt or
    SystemExit from it goes on)."""
    try:
        return str.__str__(str(error))
    except Exception as exc:
        return (
            f"<{type(error).__qualname__} whose text cannot be shown: its __str__ raised "
            f"{type(exc).__qualname__}>"
        )


def exception_line(error: BaseException) -> str:
    """``error`` as ``"ClassName: text"``, its text as :func:`exception_text` gives it."""
    return f"{type(error).__name__}: {exception_text(error)}"
