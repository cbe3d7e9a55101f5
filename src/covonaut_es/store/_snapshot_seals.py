"""Seals that bind a stored snapshot to the events it summarizes (ADR 0030).

A snapshot is a cache of the state its thread's events fold to, and anyone who can
write the database can write one in the public format. So each snapshot is stored
after a seal: the chain hash of the event at the snapshot's version (the seal of the
events it summarizes) and a digest of its stream, version and that seal. The digest is
an HMAC-SHA256 under a key derived from the store's chain key, or from its cipher key
when it has no chain key, and then covers the snapshot's own bytes too. A store with
neither uses plain SHA-256 of the stream, version and seal alone, which catches a
snapshot copied to another thread or version but not a forgery: anyone can compute it,
so hashing the bytes would guard against nothing that ``verify``, comparing every field
of the snapshot with the replay, does not find anyway (ADR 0038).

An application's own aggregates have no chain: a snapshot of one is bound instead to a
digest of the stored row of the event at its version (:func:`row_seal`), which under a
cipher key differs from store to store, each encryption having its own nonce (ADR 0115).

The seal travels in a zstd skippable frame before the snapshot's own bytes (RFC 8878:
a frame any zstd reader skips), so a sealed snapshot is told apart from one written
before seals by its first four bytes, as zstd snapshots are from JSON ones.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Literal
from uuid import UUID

import msgspec
from eventsourcing.persistence import StoredEvent

from covonaut_es.errors import SerializationError
from covonaut_es.store._chain import UNCHAINED, same_seal

SEALED = b"\x5c\x2a\x4d\x18"
"""The first four bytes of a sealed snapshot: the magic of a zstd skippable frame
(0x184D2A5C, little-endian), which no zstd frame, zlib stream or JSON text starts with."""

_LENGTH = 4
_CONTEXT = b"covonaut-es snapshot seal v1"
_ROW_CONTEXT = b"covonaut-es own event row v1"

Scheme = Literal["public", "chain", "cipher"]
"""What a seal's digest is keyed with: nothing, the chain key, or the cipher key."""


class Seal(msgspec.Struct, frozen=True, array_like=True):
    """What binds a snapshot to its thread's events.

    Attributes:
        scheme: The key its digest is keyed with.
        seal: The chain hash of the event at the snapshot's version.
        digest: The digest of stream, version, scheme, seal and snapshot bytes.
    """

    scheme: str
    seal: str
    digest: str


class SealKey:
    """The key a store's snapshot seals are made and checked with.

    Args:
        chain_key: The store's chain key, if it has one: it wins.
        cipher_key: The store's cipher key, if it is encrypted.
    """

    def __init__(self, *, chain_key: str | None = None, cipher_key: str | None = None) -> None:
        self.scheme: Scheme = "chain" if chain_key else "cipher" if cipher_key else "public"
        secret = chain_key or cipher_key
        # A key of its own, so that no digest here can pass for a chain hash or a cipher's tag.
        self._key = hmac.new(secret.encode(), _CONTEXT, hashlib.sha256).digest() if secret else None

    def digest(self, stream: UUID, version: int, seal: str, body: bytes | memoryview) -> str:
        """The digest that binds a snapshot to its stream, version and seal, and under a
        key ``body`` (its bytes) too."""
        header = msgspec.msgpack.encode([_CONTEXT, stream.bytes, version, self.scheme, seal])
        if self._key is None:
            raw = hashlib.sha256(header).digest()
        else:
            mac = hmac.new(self._key, header, hashlib.sha256)
            mac.update(body)
            raw = mac.digest()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def sealed(self, body: bytes, stream: UUID, version: int, seal: str) -> bytes:
        """``body``, the bytes a snapshot's codec wrote, after its seal."""
        header = msgspec.msgpack.encode(
            Seal(self.scheme, seal, self.digest(stream, version, seal, body))
        )
        return SEALED + len(header).to_bytes(_LENGTH, "little") + header + body

    def distrust(
        self,
        seal: Seal | None,
        body: bytes | memoryview,
        stream: UUID,
        version: int,
        event_seal: str | None,
    ) -> Distrust | None:
        """Why a snapshot of ``stream`` at ``version`` must not be trusted, or None.

        ``event_seal`` is the chain hash of the stored event at that version (None when
        there is none). A snapshot written before seals (``seal`` None) is trusted only by
        a store with no key, and then only as far as the check of its state's chain head
        goes (see :func:`chain_head_problem`).
        """
        if event_seal is None:
            return Distrust(f"there is no stored event at its version {version} to bind it to")
        if seal is None:
            if self.scheme == "public":
                return None
            return Distrust(
                "written before snapshots were sealed: a store with a key trusts only "
                "snapshots sealed with it",
                other_key=True,
            )
        if seal.scheme != self.scheme:
            return Distrust(
                f"sealed with {_SCHEMES.get(seal.scheme, 'an unknown key')}, but the store is "
                f"open with {_SCHEMES[self.scheme]}: a snapshot is trusted only under the key "
                "it was sealed with",
                other_key=seal.scheme in _SCHEMES,
            )
        if seal.seal != event_seal:
            return Distrust(
                f"bound to the event sealed {seal.seal!r} at version {version}, but the stored "
                f"event there is sealed {event_seal!r}: the snapshot or the events were replaced"
            )
        if not same_seal(seal.digest, self.digest(stream, version, seal.seal, body)):
            return Distrust("its digest does not match: it was altered after it was written")
        return None


def row_seal(record: StoredEvent) -> str:
    """The seal binding a snapshot of one of an application's own aggregates to the
    stored event ``record`` at its version: SHA-256 of its topic and its state, exactly
    as stored (encrypted, under a cipher key)."""
    state = record.state
    header = msgspec.msgpack.encode([_ROW_CONTEXT, record.topic, len(state)])
    digest = hashlib.sha256(header)
    digest.update(state)
    return "r1." + base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")


class Distrust(msgspec.Struct, frozen=True):
    """Why a snapshot is not trusted.

    Attributes:
        reason: What is wrong, for a log line or a finding.
        other_key: It was sealed under another key than the store is open with, or
            written before seals (an own aggregate's, before seals bound it to its
            event): it is passed over, though nothing says it is wrong (a store that
            adopted a key, or is read without it, or code that seals anew).
    """

    reason: str
    other_key: bool = False


_SCHEMES = {
    "public": "no key",
    "chain": "the store's chain key",
    "cipher": "the store's cipher key",
}


def unsealed(data: bytes | memoryview) -> tuple[Seal | None, bytes | memoryview]:
    """A stored snapshot's seal and the bytes its codec wrote; no seal for a snapshot
    written before seals. The bytes of a sealed one are a view into ``data``, not a
    copy: a snapshot of a long thread is hundreds of kilobytes, read on every restore.

    Raises:
        SerializationError: The seal's frame is damaged.
    """
    if data[: len(SEALED)] != SEALED:
        return None, data
    start = len(SEALED) + _LENGTH
    size = int.from_bytes(data[len(SEALED) : start], "little")
    if len(data) < start + size:
        msg = f"the snapshot's seal frame declares {size} bytes but {len(data) - start} follow"
        raise SerializationError(msg)
    view = memoryview(data)
    try:
        seal = msgspec.msgpack.decode(view[start : start + size], type=Seal)
    except msgspec.DecodeError as exc:  # ValidationError among them
        msg = f"the snapshot's seal does not decode: {exc}"
        raise SerializationError(msg) from exc
    return seal, view[start + size :]


def chain_head_problem(chain_head: object, event_seal: str, version: int) -> Distrust | None:
    """Why a decoded snapshot whose state holds ``chain_head`` does not summarize the
    events sealed ``event_seal`` at ``version``, or None."""
    if (chain_head or UNCHAINED) == event_seal:  # None: a state from before chains
        return None
    return Distrust(
        f"its state's chain head {chain_head!r} is not the seal {event_seal!r} of the stored "
        f"event at version {version}: it does not summarize these events"
    )
