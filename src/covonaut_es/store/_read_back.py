"""What an event holds that its reader would not read back as it was given, found and
named: the errors the write path refuses such an event with, before anything is stored.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec

from covonaut_es.errors import SerializationError, UnreadableEventError

_EXPECTED_GOT = re.compile(r"Expected `(?P<expected>.+?)`, got `(?P<found>.+?)`")
_AT = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")


def unreadable(cls: type, state: Mapping[str, Any], error: str) -> UnreadableEventError:
    """The error for an event of class ``cls`` and fields ``state`` that its typed
    decoder refused with msgspec's ``error`` (``Expected `str`, got `int` - at
    `$.message.content```)."""
    at = _AT.search(error)
    path = at["path"] if at else ""
    types = _EXPECTED_GOT.search(error)
    if types:
        return UnreadableEventError(cls.__qualname__, path, types["expected"], types["found"])
    # Another refusal (a value its enum does not have, say): what msgspec said, and the
    # type of the value at that path.
    value = _at(state, path)
    detail = error[: at.start()] if at else error
    return UnreadableEventError(
        cls.__qualname__, path, f"its type ({detail})", type(value).__name__
    )


def unsupported(
    cls: type, fields: Mapping[str, Any], encode: Callable[[Any], bytes]
) -> UnreadableEventError:
    """The error for an event of class ``cls`` whose ``fields`` its codec's ``encode``
    cannot write (a value of a type msgspec does not encode, text holding a lone
    surrogate, a value nested past the recursion limit), naming the first field that
    holds such a value."""
    for name, value in fields.items():
        found = type(value).__name__
        try:
            encode(value)
        except TypeError:
            expected = (
                "a type msgspec encodes, or one with a Transcoding registered on the application"
            )
        except UnicodeEncodeError:
            expected = "text that is valid Unicode (no lone surrogate such as \\ud800)"
            found += " holding a lone surrogate"
        except RecursionError:
            expected = "a value nested shallowly enough to be encoded"
            found += " nested too deeply"
        else:
            continue
        return UnreadableEventError(cls.__qualname__, name, expected, found)
    msg = f"event {cls.__qualname__} holds a value msgspec does not encode"  # pragma: no cover
    raise SerializationError(msg)  # pragma: no cover


def _member(value: Any, name: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(name, ABSENT)
    return getattr(value, name, ABSENT)


ABSENT: Any = object()
"""What a path leads to where the value has no such member."""


def difference(read: Any, given: Any, path: str) -> str | None:
    """The path of the first value in ``given`` that ``read`` does not hold equal (a
    tuple read as a list, a value of the application's type read as text); None when
    they are equal.

    Where they differ, lists, tuples and dicts of the same shape and msgspec Structs
    and dataclasses of the same type are searched for the innermost difference.
    """
    if read == given:
        return None
    if type(read) is not type(given):
        return path
    if isinstance(given, (list, tuple)) and len(read) == len(given):
        pairs: Iterable[tuple[str, Any, Any]] = (
            (f"{path}[{i}]", left, right)
            for i, (left, right) in enumerate(zip(read, given, strict=True))
        )
    elif isinstance(given, dict) and read.keys() == given.keys():
        pairs = ((f"{path}.{key}", read[key], given[key]) for key in given)
    elif isinstance(given, msgspec.Struct):
        pairs = (
            (f"{path}.{name}", getattr(read, name), getattr(given, name))
            for name in given.__struct_fields__
        )
    elif dataclasses.is_dataclass(given):
        pairs = (
            (f"{path}.{f.name}", getattr(read, f.name), getattr(given, f.name))
            for f in dataclasses.fields(given)
        )
    else:
        return path
    for inner, left, right in pairs:
        found = difference(left, right, inner)
        if found is not None:
            return found
    return path


def misread(
    cls: type, read: Mapping[str, Any], given: Mapping[str, Any], path: str
) -> UnreadableEventError:
    """The error for an event of class ``cls`` whose fields ``given`` its reader reads
    back as ``read``, otherwise at ``path``."""
    read_value, given_value = _at(read, path), _at(given, path)
    if read_value is ABSENT:
        expected = "no such field (its reader drops it)"
    elif type(read_value) is type(given_value):
        expected = f"a {type(read_value).__name__} that reads back equal"
    else:
        expected = f"{type(read_value).__name__} (its declared type reads it back so)"
    return UnreadableEventError(cls.__qualname__, path, expected, type(given_value).__name__)


def _at(value: Any, path: str) -> Any:
    for step in re.findall(r"[^.\[\]]+", path):
        if value is ABSENT:
            break
        value = value[int(step)] if isinstance(value, (list, tuple)) else _member(value, step)
    return value
