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
import hmac
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

CHAIN_KEY = "chain"
"""The payload key holding an event's chain hash."""

UNCHAINED = ""
"""The chain value of events written before tamper evidence existed."""

KEYED = "k1."
"""The prefix of a chain hash sealed with a store's chain key (HMAC-SHA256)."""

_NOT_HASHED = frozenset({"originator_id", "originator_version", CHAIN_KEY, "_v"})


def chain_hash(
    previous: str, topic: str, version: int, payload: Mapping[str, Any], key: bytes | None = None
) -> str:
    """The chain hash of one event: 128 bits of SHA-256, URL-safe base64; with ``key``,
    128 bits of HMAC-SHA256 over the same material, prefixed with :data:`KEYED`."""
    fields = {k: v for k, v in payload.items() if k not in _NOT_HASHED}
    material = msgspec.json.encode([previous, topic, version, fields], order="sorted")
    if key is None:
        digest, prefix = hashlib.sha256(material).digest()[:16], ""
    else:
        digest, prefix = hmac.new(key, material, hashlib.sha256).digest()[:16], KEYED
    return prefix + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def seal(event: Any, topic: str, previous: str, key: bytes | None = None) -> str:
    """Set ``event``'s chain hash from its own fields and the previous hash; return it."""
    chain = chain_hash(previous, topic, event.originator_version, vars(event), key)
    object.__setattr__(event, CHAIN_KEY, chain)  # events are frozen; not yet shared
    return chain


def seal_all(events: Iterable[Any], previous: str, key: bytes) -> str:
    """Seal not yet stored events again, in order, with ``key``; return the new head."""
    for event in events:
        previous = seal(event, event.TOPIC, previous, key)
    return previous


def link_problem(
    stored: str,
    previous: str,
    topic: str,
    version: int,
    payload: Mapping[str, Any],
    key: bytes | None,
) -> str | None:
    """Why ``stored`` is not a valid chain hash after ``previous``, or None when it is
    (an unchained event before any chained one is valid: written before the chain)."""
    if stored == UNCHAINED:
        if previous == UNCHAINED:
            return None
        return (
            "hash chain missing after a chained event: expected a chain hash, found none; "
            "the record was altered and its hash removed to hide it"
        )
    keyed = stored.startswith(KEYED)
    if keyed and key is None:
        return (
            "sealed with a chain key: expected the store opened with its chain_key, found "
            "none; open it with chain_key to verify"
        )
    if not keyed and previous.startswith(KEYED):
        return (
            "sealed without the chain key after keyed events: expected a keyed hash, found "
            "a public one; the record was re-sealed by someone without the key"
        )
    expected = chain_hash(previous, topic, version, payload, key if keyed else None)
    if not hmac.compare_digest(stored, expected):
        return "hash chain broken: the stored record was altered after it was written"
    return None
