"""The checks of a public call's arguments where they enter: each refuses a value of the
wrong type with a ``ConfigurationError`` naming the argument and the type found, before
anything uses it (a wrong type used later fails with an AttributeError from deep inside,
or is silently taken for another value: a version 1.5 read as 1)."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import attrs

from covonaut_es.errors import ConfigurationError


def refuse(name: str, expected: str, value: object) -> NoReturn:
    """Raise the error refusing ``value`` as argument ``name``, which should be
    ``expected``.

    Raises:
        ConfigurationError: Always; naming the argument, what it takes and the type found
            (for a whole number: it, or at least its order past 20 digits).
    """
    # The value is not shown, but a small whole number's: a secret given in the wrong
    # place (a URL as bytes) would be.
    if type(value) is int:
        order = "at most -10**20" if value < 0 else "at least 10**20"
        found = f"found {value}" if abs(value) < 10**20 else f"found a number of {order}"
    else:
        found = f"found a value of type {type(value).__name__}"
    msg = f"{name} must be {expected}, {found}"
    raise ConfigurationError(msg)


def check_instance(name: str, value: object, types: type | tuple[type, ...], expected: str) -> None:
    """``value`` of argument ``name`` is an instance of ``types`` (no bool where those
    take an int).

    Raises:
        ConfigurationError: It is not.
    """
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _tuple(types)):
        refuse(name, expected, value)


def check_text(name: str, value: object) -> None:
    """``value`` of argument ``name`` is a str, exactly: no event holds a subclass of it
    (msgspec encodes str and enums only), which failed at the first save.

    Raises:
        ConfigurationError: It is not.
    """
    if type(value) is not str:
        refuse(name, "a str", value)


def check_mapping(name: str, value: object, of: type | tuple[type, ...], what: str) -> None:
    """``value`` of argument ``name`` is a mapping of str keys to instances of ``of``
    (described as ``what``: "a str").

    Raises:
        ConfigurationError: It is not, naming the entry found wrong.
    """
    check_instance(name, value, Mapping, f"a mapping of str to {what}")
    for key, item in value.items():  # type: ignore[attr-defined]  # a Mapping, checked above
        check_text(f"each key of {name}", key)
        check_instance(f"{name}[{key!r}]", item, of, what)


def check_callable(name: str, value: object) -> None:
    """``value`` of argument ``name`` can be called.

    Raises:
        ConfigurationError: It cannot.
    """
    if not callable(value):
        refuse(name, "callable", value)


def check_whole(name: str, value: object, *, least: int | None = None) -> None:
    """``value`` of argument ``name`` is a whole number (an int, not a bool nor a float),
    of at least ``least`` if given: a count, a position. (A version takes any: one the
    thread does not have is the thread's to refuse, as for any other.)

    Raises:
        ConfigurationError: It is not.
    """
    expected = "a whole number" if least is None else f"a whole number of at least {least}"
    check_instance(name, value, int, expected)
    if least is not None and value < least:  # type: ignore[operator]  # an int, checked above
        refuse(name, expected, value)


LAST_POSITION = 2**63 - 1
"""The highest log position or version a store keeps: a signed 64-bit column's."""


def check_position(name: str, value: object, *, least: int = 0) -> None:
    """``value`` of argument ``name`` is a position in a store's log, a version or a
    count a store reads by: a whole number from ``least`` to :data:`LAST_POSITION`,
    which past it the database's driver refuses with an OverflowError.

    Raises:
        ConfigurationError: It is not.
    """
    expected = f"a whole number from {least} to {LAST_POSITION}"
    check_instance(name, value, int, expected)
    if not least <= value <= LAST_POSITION:  # type: ignore[operator]  # an int, checked above
        refuse(name, expected, value)


def check_name(name: str, value: object) -> None:
    """``value`` of argument ``name`` is a str a store can keep as a key (a consumer's
    name): it holds no control character (PostgreSQL keeps no NUL in text) and no lone
    surrogate (no database encodes one).

    Raises:
        ConfigurationError: It is not, naming the character and its index.
    """
    check_text(name, value)
    assert isinstance(value, str)  # checked above, for mypy
    for index, char in enumerate(value):
        if unicodedata.category(char) in ("Cc", "Cs"):
            msg = (
                f"{name} has {char!r} at index {index}: a name is text without control or "
                "lone surrogate characters"
            )
            raise ConfigurationError(msg)


def positive_seconds(name: str, value: object) -> None:
    """``value`` of argument ``name`` is a positive, finite number of seconds.

    Raises:
        ConfigurationError: It is not.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        refuse(name, "a positive number of seconds", value)


def check_number(name: str, value: object, *, least: float) -> None:
    """``value`` of argument ``name`` is a finite real number (an int or a float, not a
    bool) of at least ``least``: NaN passes every comparison's refusal, and an infinity
    waits for ever.

    Raises:
        ConfigurationError: It is not.
    """
    expected = f"a finite number of at least {least:g}"
    check_instance(name, value, (int, float), expected)
    if not least <= value < math.inf:  # type: ignore[operator]  # a number, checked above
        refuse(name, expected, value)


def validated(check: Callable[[str, Any], None], *, optional: bool = False) -> Any:
    """An attrs validator running ``check(name, value)``, the name being the class's
    and the attribute's (``AgentConfig.clock``); with ``optional``, None passes."""

    def validate(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not (optional and value is None):
            check(f"{type(instance).__name__}.{attribute.name}", value)

    return validate


def instance_of(types: type | tuple[type, ...], expected: str, *, optional: bool = False) -> Any:
    """An attrs validator: the attribute is an instance of ``types`` (see
    :func:`check_instance`); with ``optional``, or None."""
    return validated(
        lambda name, value: check_instance(name, value, types, expected), optional=optional
    )


def _tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)
