"""Named states as a thread store records them, and the keys they live under.

A thread store keeps each key's saves as a stream of :class:`StateSaved` events, so
named states get the store's encryption, compression and concurrency control, and a
history of saves. The document inside each event carries its own schema version and
is migrated when read, like a file's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid5

from eventsourcing.domain import DomainEvent
from eventsourcing.utils import register_topic

from covonaut_es.errors import InvalidStateKeyError

STATE_NAMESPACE = UUID("3c8e61f4-0b2d-4f6a-9d3e-7a5c1e9b2f08")
"""Namespace of the uuid5 that maps a state key to its stream id. Never change it."""

_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_state_key(key: str) -> str:
    """Return ``key`` if it may name a state, in every state store alike.

    A key is 1 to 128 letters, digits, ``.``, ``_`` and ``-``, starting with a letter
    or digit, so that it is also a safe file name that cannot leave its directory.

    Raises:
        InvalidStateKeyError: It is not such a key.
    """
    if type(key) is not str or not _KEY.fullmatch(key):  # exactly: as every id's text
        msg = (
            f"state key {key!r} is not allowed: use 1 to 128 letters, digits, '.', '_' "
            "and '-', starting with a letter or digit"
        )
        raise InvalidStateKeyError(msg)
    return key


def state_stream_id(key: str) -> UUID:
    """The id of the stream of saves under ``key`` in a thread store."""
    return uuid5(STATE_NAMESPACE, check_state_key(key))


@dataclass(frozen=True)  # also applied by eventsourcing's metaclass; spelled out for mypy
class StateSaved(DomainEvent):
    """A named state document was saved under ``key`` in a thread store.

    The document is kept as the JSON object it was given, with its own schema version,
    so that this event's shape does not change when the document's does.
    """

    TOPIC = "covonaut.state.StateSaved"

    # Redeclared: the generic annotation inherited from eventsourcing reads as Any to
    # msgspec, which then cannot decode the id.
    originator_id: UUID
    key: str
    document: dict[str, Any]


register_topic(StateSaved.TOPIC, StateSaved)
