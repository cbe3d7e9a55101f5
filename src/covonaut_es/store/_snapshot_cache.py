"""The snapshot store, read as a cache that cannot lie (ADRs 0007 and 0030).

A snapshot is trusted only when it is bound to the events it summarizes: its seal names
the chain hash of the stored event at its version, its digest matches under the store's
key, and its state's chain head is that hash. A snapshot of one of an application's own
aggregates, whose events have no chain, is bound to a digest of the stored row of the
event at its version instead (ADR 0115). Anything else (forged, moved, altered,
undecodable, or unsealed in a store with a key) is passed over with a log line, and the
thread is rebuilt from its events.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import AggregateRecorder, EventStore, Recording, StoredEvent
from eventsourcing.utils import get_topic

from covonaut_es import _logs
from covonaut_es.domain import ThreadSnapshot
from covonaut_es.errors import NewerSchemaError, SerializationError, StaleSnapshotError
from covonaut_es.migrations import Upcaster
from covonaut_es.migrations._upcasting import NO_MIGRATORS
from covonaut_es.store._chain import UNCHAINED, chain_in
from covonaut_es.store._codec import codec_for
from covonaut_es.store._mapper import MsgspecMapper
from covonaut_es.store._own_snapshots import AggregateSnapshot
from covonaut_es.store._rows import row_damage, shown
from covonaut_es.store._snapshot_seals import (
    Distrust,
    SealKey,
    chain_head_problem,
    row_seal,
    unsealed,
)
from covonaut_es.store._topic_codes import compact, full_topic

logger = _logs.logger("covonaut_es")


class CheckedSnapshot(msgspec.Struct, frozen=True):
    """A stored snapshot and whether it may be trusted.

    Attributes:
        version: The version its record names.
        snapshot: It decoded, or None when it does not decode.
        problem: Why it must not be trusted; None when it may.
        other_key: It was sealed under another key than the store is open with, or
            before seals in a store with a key: passed over, though nothing says it is
            wrong.
        stale: It cannot be upgraded to this code's schema (a migrator said so).
    """

    version: int
    snapshot: ThreadSnapshot | None
    problem: str | None = None
    other_key: bool = False
    stale: bool = False


class SnapshotCache(EventStore[UUID]):
    """The snapshot store, read as a cache. Internal.

    Writes seal each snapshot of a thread (see :mod:`covonaut_es.store._snapshot_seals`);
    reads yield only the snapshots that :meth:`check` trusts. A snapshot newer than the
    code is an error, as for events.

    Args:
        mapper: The application's mapper.
        recorder: The snapshots' recorder.
        events: The events' recorder, holding the seals snapshots are bound to.
        key: The key of the store's seals.
        migrators: The application's upcasters for snapshots, each replacing the
            library's own for its step.
    """

    def __init__(
        self,
        mapper: MsgspecMapper,
        recorder: AggregateRecorder,
        *,
        events: AggregateRecorder,
        key: SealKey,
        migrators: Mapping[int, Upcaster] = NO_MIGRATORS,
    ) -> None:
        super().__init__(mapper, recorder)
        self._decoder = mapper
        self._events = events
        self._key = key
        self._migrators = migrators

    def with_migrators(self, migrators: Mapping[int, Upcaster]) -> SnapshotCache:
        """This cache, reading with the application's ``migrators``."""
        return SnapshotCache(
            self._decoder,
            self.recorder,
            events=self._events,
            key=self._key,
            migrators=migrators,
        )

    def stored(self, snapshot: DomainEventProtocol[UUID]) -> StoredEvent:
        """The record of a snapshot, sealed to the chain head its state holds (the seal
        of the event at its version, once the thread is saved); a snapshot of one of
        the application's own aggregates, whose events have no chain, to the stored row
        of the event at its version, read now (see :func:`row_seal`)."""
        if isinstance(snapshot, AggregateSnapshot):
            seal = self._own_seal(snapshot.originator_id, snapshot.originator_version)
            # With no event at its version it is sealed to none, and never trusted.
            return self._sealed(snapshot, get_topic(type(snapshot)), seal or UNCHAINED)
        if not isinstance(snapshot, ThreadSnapshot):
            return self._decoder.to_stored_event(snapshot)
        seal = str(snapshot.state.get("chain_head") or UNCHAINED)
        return self._sealed(snapshot, compact(ThreadSnapshot.TOPIC), seal)

    def _sealed(self, snapshot: DomainEventProtocol[UUID], topic: str, seal: str) -> StoredEvent:
        stream, version = snapshot.originator_id, snapshot.originator_version
        body = codec_for(type(snapshot)).encode(snapshot)
        payload = self._decoder.stored_payload(self._key.sealed(body, stream, version, seal))
        return StoredEvent(stream, version, topic, payload)

    def put(
        self, domain_events: Sequence[DomainEventProtocol[UUID]], **kwargs: Any
    ) -> list[Recording[UUID]]:
        """Store snapshots, sealed; snapshots have no place in the log, so no recordings."""
        self.recorder.insert_events([self.stored(e) for e in domain_events], **kwargs)
        return []

    def get(
        self,
        originator_id: UUID,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Iterator[DomainEventProtocol[UUID]]:
        records = self.recorder.select_events(originator_id, gt=gt, lte=lte, desc=desc, limit=limit)
        for record in records:
            yield from self._read(record)

    def trusted(self, record: StoredEvent, events: Sequence[StoredEvent]) -> ThreadSnapshot | None:
        """The thread's snapshot ``record`` holds (its row as read, whatever its
        topic), or None when it is passed over; ``events`` are its stream's stored
        events read with it, from its version on, which hold the seal it is checked
        against.

        Raises:
            NewerSchemaError: It was written by newer code, as :meth:`check` says.
        """
        return next(self._thread_snapshot(record, events), None)

    def _read(self, record: StoredEvent) -> Iterator[DomainEventProtocol[UUID]]:
        if self._decoder.names_declared_snapshot(record.topic):
            yield from self._own(record)
            return
        if self._decoder.names_stock_snapshot(record.topic):
            yield from self._stock(record)
            return
        # A thread's snapshot, or a row naming no snapshot (an event's, copied in):
        # either is judged as a thread's, and only a sealed snapshot is trusted.
        yield from self._thread_snapshot(record)

    def _thread_snapshot(
        self, record: StoredEvent, events: Sequence[StoredEvent] | None = None
    ) -> Iterator[ThreadSnapshot]:
        """The thread's snapshot ``record`` holds, if :meth:`check` trusts it; else
        nothing, with a log line: the thread is then rebuilt from its events."""
        checked = self.check(record, events=events)
        if checked.problem is None and checked.snapshot is not None:
            yield checked.snapshot
            return
        # Expected after an upgrade that snapshots cannot follow; else worth a look.
        quiet = checked.other_key or checked.stale
        logger.log(
            logging.INFO if quiet else logging.WARNING,
            "snapshot of stream %s at version %s passed over: %s; rebuilding the thread "
            "from its events",
            record.originator_id,
            record.originator_version,
            checked.problem,
        )

    def check(
        self,
        record: StoredEvent,
        *,
        decode_untrusted: bool = False,
        events: Sequence[StoredEvent] | None = None,
    ) -> CheckedSnapshot:
        """Say whether a stored snapshot may be trusted, and decode it if it may.

        Args:
            record: The snapshot as stored.
            decode_untrusted: Decode one whose seal fails too, to compare it (an audit);
                a load never decodes bytes it will not use.
            events: Its stream's stored events from its version on, read with it;
                None: the event at its version is read now.

        Raises:
            NewerSchemaError: It was written by newer code. Any other version it cannot
                be upgraded from (a migrator's mistake among them) passes it over.
        """
        version = record.originator_version
        try:
            stream = UUID(str(record.originator_id))
        except ValueError:
            return CheckedSnapshot(version, None, "its stream id is not a UUID")
        damage = row_damage(record)
        if damage is not None:
            column, value, expected = damage
            problem = (
                f"its row in the snapshots table holds {column} {shown(value)}, expected {expected}"
            )
            return CheckedSnapshot(version, None, problem)
        if full_topic(record.topic) != ThreadSnapshot.TOPIC:
            topic = shown(record.topic)
            problem = f"its row in the snapshots table names {topic}, not a thread's snapshot"
            return CheckedSnapshot(version, None, problem)
        try:
            plain = self._decoder.plain_payload(record)
            seal, body = unsealed(plain)
            event_seal = self._event_seal(stream, version, events)
        except SerializationError as exc:
            return CheckedSnapshot(version, None, str(exc))
        distrust = self._key.distrust(seal, body, stream, version, event_seal)
        if distrust is not None and not decode_untrusted:
            return CheckedSnapshot(version, None, distrust.reason, other_key=distrust.other_key)
        try:
            snapshot = self._decoder.decode_plain(record, plain, self._migrators)
        except NewerSchemaError:
            raise
        except SerializationError as exc:
            stale = isinstance(exc, StaleSnapshotError)
            reason = str(exc) if distrust is None else distrust.reason
            return CheckedSnapshot(version, None, reason, stale=stale)
        if not isinstance(snapshot, ThreadSnapshot):
            return CheckedSnapshot(version, None, f"its type {record.topic!r} is not a snapshot")
        if distrust is None and event_seal is not None:
            distrust = chain_head_problem(snapshot.state.get("chain_head"), event_seal, version)
        if distrust is None:
            return CheckedSnapshot(version, snapshot)
        return CheckedSnapshot(version, snapshot, distrust.reason, other_key=distrust.other_key)

    def _stock(self, record: StoredEvent) -> Iterator[DomainEventProtocol[UUID]]:
        """The snapshot of one of the application's aggregates snapshotted as
        eventsourcing does, which no seal binds, read as eventsourcing reads it; one
        that does not read or upgrade is passed over as a declared one is (:meth:`_own`).

        Raises:
            NewerSchemaError: It was written by newer code.
        """
        try:
            snapshot = self._decoder.to_domain_event(record)
        except NewerSchemaError:
            raise
        except ValueError as exc:  # a SerializationError: an upcaster's among them
            _passed_over(record, Distrust(str(exc)), stale=isinstance(exc, StaleSnapshotError))
            return
        yield snapshot

    def _own(self, record: StoredEvent) -> Iterator[DomainEventProtocol[UUID]]:
        """The snapshot of one of the application's own aggregates that ``record`` holds,
        if its seal binds it to the stored event at its version and it decodes; else nothing,
        with a log line: the repository then replays the aggregate's events.

        Raises:
            NewerSchemaError: It was written by newer code, as :meth:`check` says.
        """
        stale = False
        try:
            plain = self._own_plain(record)
            distrust = self._own_problem(record, plain)
            if distrust is None:
                snapshot = self._decoder.decode_plain(record, plain)
        except NewerSchemaError:
            raise
        except ValueError as exc:  # a SerializationError, or a stream id that is no UUID
            distrust, stale = Distrust(str(exc)), isinstance(exc, StaleSnapshotError)
        if distrust is None:
            yield snapshot
            return
        _passed_over(record, distrust, stale=stale)

    def _own_problem(self, record: StoredEvent, plain: bytes) -> Distrust | None:
        """Why an own aggregate's snapshot must not be trusted, or None: its seal must
        be the digest of the stored row of the event at its version (read now), and its
        digest match.

        Raises:
            ValueError: Its stream id is not a UUID.
            SerializationError: Its seal does not parse.
        """
        seal, body = unsealed(plain)
        if seal is None:
            return Distrust("it is not sealed")
        stream, version = UUID(str(record.originator_id)), record.originator_version
        legacy = seal.seal == UNCHAINED
        if legacy and self._key.distrust(seal, body, stream, version, UNCHAINED) is None:
            return Distrust(
                "sealed to its stream and version only, as before snapshots of an "
                "application's aggregates were bound to the stored event at their version",
                other_key=True,
            )
        return self._key.distrust(seal, body, stream, version, self._own_seal(stream, version))

    def _own_seal(self, stream: UUID, version: int) -> str | None:
        """The seal binding an own aggregate's snapshot to the stored event at
        ``version``, read now; None if the stream has no event there."""
        row = self._event_row(stream, version)
        return None if row is None else row_seal(row)

    def _own_plain(self, record: StoredEvent) -> bytes:
        """An own aggregate's snapshot decrypted: the bytes its codec sealed.

        Raises:
            SerializationError: It cannot be decrypted.
        """
        # The mapper leaves the store's compressor off sealed bytes only under the
        # thread snapshot's topic, which it knows: read this one's bytes under it.
        as_sealed = dataclasses.replace(record, topic=ThreadSnapshot.TOPIC)
        try:
            return self._decoder.plain_payload(as_sealed)
        except SerializationError as exc:
            msg = f"cannot decrypt or decompress it (wrong key or corrupt data): {exc.__cause__}"
            raise SerializationError(msg) from exc

    def _event_seal(
        self, stream: UUID, version: int, events: Sequence[StoredEvent] | None
    ) -> str | None:
        """The chain hash of the stream's stored event at ``version``, the first of
        ``events`` when given (else read now); None if it has none there."""
        record = self._event_row(stream, version, events)
        return None if record is None else chain_in(self._decoder.plain_payload(record))

    def _event_row(
        self, stream: UUID, version: int, events: Sequence[StoredEvent] | None = None
    ) -> StoredEvent | None:
        """The stream's stored event at ``version``, the first of ``events`` when given
        (else read now: one select); None if it has none there."""
        if events is None:
            events = self._events.select_events(stream, gt=version - 1, lte=version, limit=1)
        return next((r for r in events[:1] if r.originator_version == version), None)


def _passed_over(record: StoredEvent, distrust: Distrust, *, stale: bool) -> None:
    """Log that the snapshot of one of the application's aggregates in ``record`` is
    passed over, and why: quietly when expected after an upgrade."""
    logger.log(
        logging.INFO if stale or distrust.other_key else logging.WARNING,
        "snapshot of stream %s at version %s passed over: %s; rebuilding the aggregate "
        "from its events",
        record.originator_id,
        record.originator_version,
        distrust.reason,
    )
