"""The hash chain: each thread event's hash over the one before it (ADR 0011, 0013, 0029).

The store seals a thread's new events once, when it saves them, with its chain key when
it has one; nothing before the save (the aggregate, the mapper's encoding for storage)
computes a hash. A link covers the previous hash, the event's topic (in full, whichever
form its row stores, ADR 0064), version and schema version (its payload's ``_v``, which
picks the upcasters a read runs), and its fields (without its identity, its schema
version and the hash itself) as they are stored: the store encodes the fields once,
stores those bytes, and hashes their RFC 8785 canonical form (ADR 0048), so that anyone
can recompute a link from the stored JSON with a JSON library; ``docs/audits.md`` gives
a verifier. An audit recomputes each link from the stored payload *before* any
upcasting, so a schema migration never looks like tampering, while a record altered
behind the library's back breaks the chain at its version.

Unkeyed hashes are 128 bits of SHA-256, public: anyone can compute them. With a chain
key, a link is 128 bits of HMAC-SHA256 under the key. Each link's prefix names its
:class:`Scheme`: links sealed before keep theirs and still verify, those from before the
schema version was covered (no prefix, ``k1.``; ADR 0044) and those over msgspec's
sorted JSON rather than RFC 8785's (``v2.``, ``k2.``; ADR 0048); a stream never goes
back from a newer scheme to an older one.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
from collections.abc import Mapping
from typing import Any, NamedTuple

import msgspec

from covonaut_es.domain._canonical import jcs_of_sorted
from covonaut_es.migrations import VERSION_KEY
from covonaut_es.store._topic_codes import full_topic

CHAIN_FIELD = "chain"
"""The payload key holding a thread event's chain hash."""

UNCHAINED = ""
"""The chain value of events written before tamper evidence existed."""


class Scheme(NamedTuple):
    """How a link was sealed, as its prefix says.

    Attributes:
        prefix: The text a link of this scheme starts with.
        keyed: Sealed with a store's chain key (HMAC-SHA256), not the public hash.
        generation: 1 for links that do not cover the schema version (sealed before ADR
            0044), 2 for those that do over msgspec's sorted JSON, 3 for those over RFC
            8785's canonical JSON (ADR 0048); a stream's generations never go down.
    """

    prefix: str
    keyed: bool
    generation: int


PUBLIC = Scheme("v3.", keyed=False, generation=3)
"""The scheme of a link sealed now without a chain key."""

KEYED = Scheme("k3.", keyed=True, generation=3)
"""The scheme of a link sealed now with a chain key."""

_PUBLIC_V2 = Scheme("v2.", keyed=False, generation=2)
_KEYED_V2 = Scheme("k2.", keyed=True, generation=2)

_KEYED_V1 = Scheme("k1.", keyed=True, generation=1)
_PUBLIC_V1 = Scheme("", keyed=False, generation=1)
"""Links sealed before ADR 0044 without a key: no prefix (the URL-safe base64 alphabet
holds no ``.``, so none of them starts like a prefixed one)."""
_PAIRS = ((PUBLIC, KEYED), (_PUBLIC_V2, _KEYED_V2), (_PUBLIC_V1, _KEYED_V1))
_BY_PREFIX = {s.prefix: s for pair in _PAIRS for s in pair if s.prefix}
_PREFIXES = {public.generation: (public.prefix, keyed.prefix) for public, keyed in _PAIRS}
"""Each generation's prefixes: without a key, then with one."""
_NEWEST = KEYED.generation


def scheme_of(seal: str) -> Scheme:
    """The scheme ``seal`` (a stored chain hash, or ``""``) was sealed with: the one
    place that tells the schemes apart."""
    return _BY_PREFIX.get(seal[:3], _PUBLIC_V1)


NOT_HASHED = frozenset({"originator_id", "originator_version", CHAIN_FIELD, VERSION_KEY})
"""A payload's keys that are not among the fields its link covers (a link of today's
scheme covers ``_v`` beside the version)."""


def canonical_fields(fields: Mapping[str, Any]) -> bytes:
    """An event's hashed fields in canonical JSON: the bytes its link covers."""
    return msgspec.json.encode(
        {k: v for k, v in fields.items() if k not in NOT_HASHED}, order="sorted"
    )


_URLSAFE = bytes.maketrans(b"+/", b"-_")
"""base64's alphabet to its URL-safe one (``base64.urlsafe_b64encode``, unwrapped: a
save hashes each event)."""


def _jcs_head(previous: str, topic: str, version: int, schema: Any) -> bytes:
    """The RFC 8785 form of ``[previous, topic, version, schema]``: msgspec's, when the
    version and schema version are integers (no float, and no object to sort)."""
    integers = type(version) is int and type(schema) is int
    head = msgspec.json.encode([previous, topic, version, schema])
    return jcs_of_sorted(head, floats=not integers)


def link_hash(
    previous: str,
    topic: str,
    version: int,
    schema: Any,
    fields: bytes,
    key: bytes | None,
    generation: int = _NEWEST,
    *,
    floats: bool = True,
) -> str:
    """The chain hash of one event of ``topic`` (its full topic or its code: the link
    covers the full topic) from its schema version ``schema`` and its
    :func:`canonical_fields`, after ``previous``, in the scheme of ``generation``
    (today's unless told) that ``key`` makes, or its absence. ``floats`` false says the
    fields hold no float (their codec's types have none, and its read-back check refuses
    a payload that does not read back as given), so that their canonical form needs no
    second encoding.

    Today's scheme hashes the RFC 8785 form of ``[previous, topic, version, schema,
    fields]``; generation 2 msgspec's encoding of the same array, generation 1 leaves
    ``schema`` out. ``schema`` is what the payload's ``_v`` holds: the integer the store
    writes, or, when checking, whatever was stored there (text, a float, ``None`` for
    nothing), which encodes unlike any integer.

    Raises:
        ValueError: ``fields`` (read from storage) is not JSON that RFC 8785 can write.
    """
    # A code and its topic name one class: how a row names it is below the chain, as its
    # compression is.
    topic = full_topic(topic)
    # Spliced, not encoded as one array: ``fields`` are the bytes stored, encoded once.
    if generation == _NEWEST:
        head = _jcs_head(previous, topic, version, schema)
        fields = jcs_of_sorted(fields, floats=floats)
    elif generation == _PUBLIC_V2.generation:
        head = msgspec.json.encode([previous, topic, version, schema])
    else:
        head = msgspec.json.encode([previous, topic, version])
    material = head[:-1] + b"," + fields + b"]"
    prefixes = _PREFIXES[generation]
    if key is None:
        digest, prefix = hashlib.sha256(material).digest()[:16], prefixes[0]
    else:
        digest, prefix = hmac.new(key, material, hashlib.sha256).digest()[:16], prefixes[1]
    return prefix + binascii.b2a_base64(digest, newline=False).translate(_URLSAFE).decode()[:22]


def chain_hash(
    previous: str,
    topic: str,
    version: int,
    payload: Mapping[str, Any],
    key: bytes | None = None,
    *,
    generation: int = _NEWEST,
) -> str:
    """The chain hash of an event whose stored payload (plain JSON values) is
    ``payload``, in the scheme of ``generation`` (today's unless told) that ``key``
    makes, or its absence."""
    fields = canonical_fields(payload)
    return link_hash(previous, topic, version, payload.get(VERSION_KEY), fields, key, generation)


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
    scheme, before = scheme_of(stored), scheme_of(previous)
    if scheme.keyed and key is None:
        return (
            "sealed with a chain key: expected the store opened with its chain_key, found "
            "none; open it with chain_key to verify"
        )
    if not scheme.keyed and before.keyed:
        return (
            "sealed without the chain key after keyed events: expected a keyed hash, found "
            "a public one; the record was re-sealed by someone without the key"
        )
    if scheme.generation < before.generation:
        return (
            f"sealed with an older scheme after a newer one: expected a link of generation "
            f"{before.generation} or later, as the one before it, found generation "
            f"{scheme.generation}; the record was re-sealed to hide an edit"
        )
    try:
        expected = chain_hash(
            previous,
            topic,
            version,
            payload,
            key if scheme.keyed else None,
            generation=scheme.generation,
        )
    except ValueError as exc:
        return f"hash chain broken: the stored record is not canonical JSON ({exc})"
    if not same_seal(stored, expected):
        return "hash chain broken: the stored record was altered after it was written"
    return None
