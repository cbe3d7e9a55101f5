"""Reading a vendor's answer as the fields an adapter uses.

A vendor SDK builds its answer objects from the response body without checking them, so
a server answering with a field of another shape (null where text belongs, text where
an object does) would fail deep in an adapter with an untyped ``AttributeError``. Each
adapter describes the fields it reads as msgspec Structs and reads every answer, and
every streamed event, through :func:`read_answer`, which names the field.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from covonaut_es.errors import ProviderError

T = TypeVar("T")


def read_answer(api: str, what: str, answer: object, shape: type[T]) -> T:
    """``answer`` (an SDK's answer object, one of its stream events, or plain data) as
    ``shape``, read from its attributes or keys; fields ``shape`` lacks are ignored.

    Args:
        api: The API's name in the message, e.g. ``"OpenAI"``.
        what: What ``answer`` is, in the message, e.g. ``"stream chunk"``.
        answer: What the SDK gave.
        shape: The Struct describing what the adapter reads of it.

    Raises:
        ProviderError: A field is missing or of another type; the message names its
            path, e.g. ``$.choices[0].message``.
    """
    try:
        return msgspec.convert(answer, shape, from_attributes=True)
    except msgspec.ValidationError as exc:
        msg = f"the {api} API answered with a malformed {what}: {exc}"
        raise ProviderError(msg) from exc
