"""Tamper evidence: each event carries a hash chained to the previous event of its thread.

The hash covers the previous hash, the event's topic and version, and its payload in
canonical JSON (sorted keys), exactly as the mapper stores it. An audit recomputes the
chain from the stored payloads *before* any upcasting, so schema migrations never look
like tampering, while a stored record altered behind the library's back breaks the
chain at its version.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

import msgspec

CHAIN_KEY = "chain"
"""The payload key holding an event's chain hash."""

UNCHAINED = ""
"""The chain value of events written before tamper evidence existed."""

_NOT_HASHED = frozenset({"originator_id", "originator_version", CHAIN_KEY, "_v"})


def chain_hash(previous: str, topic: str, version: int, payload: Mapping[str, Any]) -> str:
    """The chain hash of one event: 128 bits of SHA-256, URL-safe base64."""
    fields = {k: v for k, v in payload.items() if k not in _NOT_HASHED}
    material = msgspec.json.encode([previous, topic, version, fields], order="sorted")
    digest = hashlib.sha256(material).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def seal(event: Any, topic: str, previous: str) -> str:
    """Set ``event``'s chain hash from its own fields and the previous hash; return it."""
    chain = chain_hash(previous, topic, event.originator_version, vars(event))
    object.__setattr__(event, CHAIN_KEY, chain)  # events are frozen; not yet shared
    return chain
