"""One strict reader of JSON text from outside the process: a model's typed answer, what
a person submits.

A lenient reader keeps the last of a key given twice, reads ``NaN`` and ``Infinity``,
and turns ``1e400`` into an infinity; what would then be recorded is not what every
reader of the text takes it to say. This one refuses each, in the words of the caller
(:class:`Wording`), which says what its audience should do about it.
"""

from __future__ import annotations

import json
import math
from typing import Any

import attrs

from covonaut_es.messages import STORED_INTEGERS


class JsonRefused(ValueError):
    """JSON text holds what the strict reader refuses; the message is the caller's."""


@attrs.frozen
class Wording:
    """How a caller words each refusal: ``str.format`` templates.

    Attributes:
        twice: A key given twice in one object (``{key}``, its first 40 characters).
        constant: ``NaN``, ``Infinity`` or ``-Infinity`` (``{name}``).
        too_large: A number too large for a double (``{text}``, its first 40 characters).
        wide_integer: An integer beyond 64 bits (``{text}``); None reads any integer.
    """

    twice: str
    constant: str
    too_large: str
    wide_integer: str | None = None


FOR_THE_MODEL = Wording(
    twice="the key {key!r} appears more than once in an object",
    constant="{name} is not a JSON number",
    too_large="{text} is too large for a JSON number",
    wide_integer=(
        "the integer {text} is beyond the 64 bits a stored number can carry; send it as a string"
    ),
)
"""How a refusal is worded to the model: of its typed answer, or of a tool call's
arguments. An integer past 64 bits is refused as a person's is: stored, it would make
the thread's export one that no store imports."""


FOR_A_TOOL = attrs.evolve(
    FOR_THE_MODEL,
    wide_integer=(
        "the integer {text} is beyond the 64 bits a stored number can carry; give it as a string"
    ),
)
"""How a refusal is worded of the data a tool's ``InterruptError`` carries, which the
thread records as its pause's: written as JSON first, so only its integers can be
refused here."""


def strict_loads(text: str, wording: Wording) -> Any:
    """The JSON value of ``text``, read strictly.

    Raises:
        JsonRefused: A key given twice, a constant or a number no stored JSON carries,
            as ``wording`` says it.
        ValueError: ``text`` is not JSON (``json.JSONDecodeError``).
        RecursionError: It nests deeper than Python's recursion limit.
    """

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        value: dict[str, Any] = {}
        for key, item in pairs:
            if key in value:
                raise JsonRefused(wording.twice.format(key=key[:40]))
            value[key] = item
        return value

    def constant(name: str) -> Any:
        raise JsonRefused(wording.constant.format(name=name))

    def finite(number: str) -> float:
        value = float(number)
        if not math.isfinite(value):
            raise JsonRefused(wording.too_large.format(text=number[:40]))
        return value

    wide = wording.wide_integer

    def integer(number: str) -> int:
        # Beyond 21 characters no integer fits 64 bits, and beyond 4300 digits int()
        # refuses with a message that would call the text no JSON.
        value = int(number) if len(number) <= 21 else None
        if value is None or value not in STORED_INTEGERS:
            raise JsonRefused(str(wide).format(text=number[:40]))
        return value

    return json.loads(
        text,
        object_pairs_hook=unique,
        parse_constant=constant,
        parse_float=finite,
        parse_int=None if wide is None else integer,
    )
