"""The hash chain: each thread event's hash over the one before it (ADR 0011, 0013, 0029).

The store seals a thread's new events once, when it saves them, with its chain key when
it has one; nothing before the save (the aggregate, the mapper's encoding for storage)
computes a hash. A link covers the previous hash, the event's topic and version, and
its fields in canonical JSON (sorted keys, without its identity, its schema version and
the hash itself), exactly as they are stored: the store encodes the fields once, hashes
those bytes and stores them. An audit recomputes each link from the stored payload
*before* any upcasting, so a schema migration never looks like tampering, while a record
altered behind the library's back breaks the chain at its version.

Unkeyed hashes are 128 bits of SHA-256, public: anyone can compute them. With a chain
key, a link is 128 bits of HMAC-SHA256 under the key, prefixed :data:`KEYED`.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

import msgspec

from covonaut_es.migrations import VERSION_KEY

CHAIN_FIELD = "chain"
"""The payload key holding a thread event's chain hash."""

UNCHAINED = ""
"""The chain value of events written before tamper evidence existed."""

KEYED = "k1."
"""The prefix of a chain hash sealed with a store's chain key (HMAC-SHA256)."""

NOT_HASHED = frozenset({"originator_id", "originator_version", CHAIN_FIELD, VERSION_KEY})
"""A payload's keys that its link does not cover."""


def canonical_fields(fields: Mapping[str, Any]) -> bytes:
    """An event's hashed fields in canonical JSON: the bytes its link covers."""
    return msgspec.json.encode(
        {k: v for k, v in fields.items() if k not in NOT_HASHED}, order="sorted"
    )


_URLSAFE = bytes.maketrans(b"+/", b"-_")
"""base64's alphabet to its URL-safe one (``base64.urlsafe_b64encode``, unwrapped: a
save hashes each event)."""


def link_hash(previous: str, topic: str, version: int, fields: bytes, key: bytes | None) -> str:
    """The chain hash of one event from its :func:`canonical_fields`, after
    ``previous``: public without ``key``, prefixed :data:`KEYED` with it."""
    # Byte for byte msgspec's encoding of [previous, topic, version, fields], sorted.
    head = msgspec.json.encode([previous, topic, version])
    material = head[:-1] + b"," + fields + b"]"
    if key is None:
        digest, prefix = hashlib.sha256(material).digest()[:16], ""
    else:
        digest, prefix = hmac.new(key, material, hashlib.sha256).digest()[:16], KEYED
    return prefix + binascii.b2a_base64(digest, newline=False).translate(_URLSAFE).decode()[:22]


def chain_hash(
    previous: str, topic: str, version: int, payload: Mapping[str, Any], key: bytes | None = None
) -> str:
    """The chain hash of an event whose stored payload (plain JSON values) is
    ``payload``."""
    return link_hash(previous, topic, version, canonical_fields(payload), key)


class _Chained(msgspec.Struct):
    chain: str = UNCHAINED


_chain_decoder = msgspec.json.Decoder(_Chained)


def chain_in(payload: bytes) -> str:
    """The chain hash in a stored payload (plain JSON), read without decoding the rest;
    ``""`` when it holds none or is not an object with a text ``chain``."""
    try:
        return _chain_decoder.decode(payload).chain
    except (msgspec.DecodeError, RecursionError):  # ValidationError among them
        return UNCHAINED


def chain_of(event: Any) -> str:
    """The chain hash a decoded event was stored with."""
    return str(vars(event).get(CHAIN_FIELD, UNCHAINED))


def same_seal(stored: str, expected: str) -> bool:
    """Whether stored seal text is the one ``expected`` (an ASCII seal this module or
    its callers computed), compared in constant time; text no seal can be (non-ASCII, a
    lone surrogate, which the comparison would raise on) is not."""
    return stored.isascii() and hmac.compare_digest(stored, expected)


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
    if not same_seal(stored, expected):
        return "hash chain broken: the stored record was altered after it was written"
    return None
