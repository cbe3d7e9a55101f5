"""The stream ids a store writes, and the recorders' mapping between them and the
domain's (ADR 0031).

A store keeps each stream under its domain id (a thread's is an unkeyed uuid5 of its
thread id), unless its settings record ``stream_ids=keyed``, as every encrypted store
created since has: it then keeps each stream under the AES encryption, one block, of
its domain id, under a key derived from the cipher key. One block of AES is a
permutation of 16-byte values, so every stored id maps back to its domain id without a
table, and nobody without the key can tell which stored stream is a guessed thread's.

The mapping happens in the back ends' recorders alone, through :class:`KeyedEvents` and
:class:`KeyedLog`: everything above them, the domain included, sees domain ids.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    Notification,
    StoredEvent,
)

from covonaut_es.domain import AgentThread, thread_aggregate_id
from covonaut_es.domain._named_states import StateSaved, state_stream_id
from covonaut_es.domain._submissions import InputSubmitted, InputTaken, submission_stream_id
from covonaut_es.errors import CovonautError, StoreSettingsError
from covonaut_es.store._codec import aggregate_event_classes
from covonaut_es.store._heads import FENCES, HEADS, NEW_STREAMS, HeadAnchor

STREAM_IDS = "stream_ids"
"""The recorded setting naming a store's scheme of stream ids."""

KEYED = "keyed"
"""The scheme of :class:`KeyedStreamIds`; a store without the setting keeps domain ids."""

_LABEL = b"covonaut-es stream ids v1"

_R = TypeVar("_R", bound=StoredEvent)


class StreamIds:
    """Domain stream ids as they are stored: unchanged (a store without the setting)."""

    def stored(self, stream: UUID) -> UUID:
        """The id ``stream`` is stored under."""
        return stream

    def domain(self, stored: UUID) -> UUID:
        """The domain id of the stream stored under ``stored``."""
        return stored


class KeyedStreamIds(StreamIds):
    """Stream ids stored as one AES block of the domain id under a derived key."""

    def __init__(self, cipher_key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

        key = hmac.new(cipher_key, _LABEL, hashlib.sha256).digest()
        # ECB of exactly one block is the bare permutation: no mode is wanted here.
        self._cipher = Cipher(algorithms.AES(key), modes.ECB())
        self._stored: dict[UUID, UUID] = {}
        self._domain: dict[UUID, UUID] = {}

    def stored(self, stream: UUID) -> UUID:
        found = self._stored.get(stream)
        if found is None:
            encryptor = self._cipher.encryptor()
            found = UUID(bytes=encryptor.update(stream.bytes) + encryptor.finalize())
            self._remember(stream, found)
        return found

    def domain(self, stored: UUID) -> UUID:
        found = self._domain.get(stored)
        if found is None:
            decryptor = self._cipher.decryptor()
            found = UUID(bytes=decryptor.update(stored.bytes) + decryptor.finalize())
            self._remember(found, stored)
        return found

    def _remember(self, stream: UUID, stored: UUID) -> None:
        if len(self._stored) > 65536:  # bounded: a long-lived process meets many threads
            self._stored.clear()
            self._domain.clear()
        self._stored[stream] = stored
        self._domain[stored] = stream


PLAIN = StreamIds()
"""The stream ids of a store that records no scheme."""


def recorded_stream_ids(recorded: Mapping[str, str], cipher_key: bytes, where: str) -> StreamIds:
    """The stream ids of a store (``where``: which, for the error) whose settings are
    ``recorded``, opened with ``cipher_key``.

    Raises:
        StoreSettingsError: The store records a scheme this version does not know.
    """
    scheme = recorded.get(STREAM_IDS)
    if scheme is None:
        return PLAIN
    if scheme != KEYED:
        msg = (
            f"{where} records stream ids {scheme!r}, expected {KEYED!r} or none: open "
            "it with the covonaut-es version that wrote it (nothing was read)"
        )
        raise StoreSettingsError(msg)
    return KeyedStreamIds(cipher_key)


_NAMED_BY: Mapping[str, tuple[str, Any]] = {
    **{
        cls.TOPIC: ("thread_id", thread_aggregate_id)
        for cls in aggregate_event_classes(AgentThread)
        if issubclass(cls, AgentThread.Started)
    },
    StateSaved.TOPIC: ("key", state_stream_id),
    InputSubmitted.TOPIC: ("thread_id", submission_stream_id),
    InputTaken.TOPIC: ("thread_id", submission_stream_id),
}
"""The events that name their stream, by topic: the field naming it and its stream id."""


def first_stream_keyed(
    stored: UUID, topic: str, payload: Mapping[str, Any], cipher_key: bytes
) -> bool | None:
    """Whether the first event of a store that records no scheme of stream ids, of
    ``topic`` and decoded ``payload``, is stored under ``stored``: the keyed id of the
    stream it names (True), that stream's own id (False), or neither (None: it names no
    stream, or another one; its rows cannot tell the store's scheme)."""
    if topic not in _NAMED_BY:
        return None
    field, stream_of = _NAMED_BY[topic]
    try:
        named: UUID = stream_of(payload.get(field))
    except CovonautError:  # not text: the row is damaged
        return None
    if stored == named:
        return False
    if stored == KeyedStreamIds(cipher_key).stored(named):
        return True
    return None


def mapped_ids(records: Sequence[_R], to: Any) -> list[_R]:
    """``records``, each under ``to`` of its stream id (as a UUID)."""
    return [dataclasses.replace(r, originator_id=to(_uuid(r.originator_id))) for r in records]


def _uuid(stream: UUID | str) -> UUID:
    """A stream id as a UUID; one already (a save's records) is not parsed again."""
    return stream if isinstance(stream, UUID) else UUID(str(stream))


def _stored_kwargs(ids: StreamIds, kwargs: dict[str, Any]) -> dict[str, Any]:
    mapped = dict(kwargs)
    if HEADS in kwargs:
        mapped[HEADS] = [(ids.stored(s), *rest) for s, *rest in kwargs[HEADS]]
    if NEW_STREAMS in kwargs:
        mapped[NEW_STREAMS] = {ids.stored(s) for s in kwargs[NEW_STREAMS]}
    if FENCES in kwargs:
        mapped[FENCES] = [(ids.stored(s), *rest) for s, *rest in kwargs[FENCES]]
    return mapped


class KeyedEvents(AggregateRecorder):
    """The first base of a back end's recorder: what it is given and hands back names
    streams by domain id, what it stores by :attr:`stream_ids`."""

    stream_ids: StreamIds = PLAIN

    def stored_records(self, stored_events: Sequence[StoredEvent]) -> list[StoredEvent]:
        """``stored_events`` as they are stored (for a back end writing them itself)."""
        return mapped_ids(stored_events, self.stream_ids.stored)

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        inner: Any = super()  # the back end's recorder, after this base
        if self.stream_ids is PLAIN:
            return inner.insert_events(stored_events, **kwargs)
        return inner.insert_events(
            self.stored_records(stored_events), **_stored_kwargs(self.stream_ids, kwargs)
        )

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        inner: Any = super()
        ids = self.stream_ids
        if ids is PLAIN:
            found: Sequence[StoredEvent] = inner.select_events(
                originator_id, gt=gt, lte=lte, desc=desc, limit=limit
            )
            return found
        stored = ids.stored(UUID(str(originator_id)))
        found = inner.select_events(stored, gt=gt, lte=lte, desc=desc, limit=limit)
        return mapped_ids(found, ids.domain)


class KeyedLog(KeyedEvents, ApplicationRecorder):
    """:class:`KeyedEvents` for an application recorder: its log, head anchors and
    lease tokens too."""

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
        **options: bool,
    ) -> Sequence[Notification]:
        inner: Any = super()
        found: Sequence[Notification] = inner.select_notifications(
            start, limit, stop, topics, inclusive_of_start=inclusive_of_start, **options
        )
        if self.stream_ids is PLAIN:
            return found
        return mapped_ids(found, self.stream_ids.domain)

    def advance_lease_token(self, stream: UUID, **options: bool) -> int:
        """Record a new run lease of ``stream``: its token, one more than the last (SQLite
        and memory: PostgreSQL's leases record theirs on their own connection); the
        back end's ``options`` (SQLite's ``synced``)."""
        inner: Any = super()
        return int(inner.advance_lease_token(self.stream_ids.stored(stream), **options))

    def sync_lease_token(self, stream: UUID) -> None:
        """Make the tokens recorded without waiting for the disk durable (SQLite)."""
        inner: Any = super()
        inner.sync_lease_token(self.stream_ids.stored(stream))

    def lease_token(self, stream: UUID) -> int | None:
        """The token of ``stream``'s newest run lease; None before its first."""
        inner: Any = super()
        token: int | None = inner.lease_token(self.stream_ids.stored(stream))
        return token

    def read_head(self, stream: UUID) -> HeadAnchor:
        """What the head anchors say of ``stream``."""
        inner: Any = super()
        anchor: HeadAnchor = inner.read_head(self.stream_ids.stored(stream))
        return anchor


def stored_stream(recorder: object, stream: UUID) -> UUID:
    """The id ``recorder`` stores ``stream`` under (for a table or file named by it)."""
    ids = recorder.stream_ids if isinstance(recorder, KeyedEvents) else PLAIN
    return ids.stored(stream)
