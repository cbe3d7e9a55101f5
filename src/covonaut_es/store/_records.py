"""Raw access to a store's records, for audits, imports, migration checks and the
readers of its log.

A :class:`~covonaut_es.Store` holds one :class:`StoredRecords`; the library's other
packages read records, the log and the chain key's adoption through the store's port to
it, :class:`~covonaut_es.store._log.StoreLog` (``store.log``). Nothing here decodes more
than it must.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Collection, Iterator, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.persistence import (
    ConnectionPoolClosedError,
    IntegrityError,
    Notification,
    PersistenceError,
    StoredEvent,
)

from covonaut_es.domain import AgentThread, thread_aggregate_id
from covonaut_es.errors import (
    ConfigurationError,
    StoredRowError,
    StoreUnavailableError,
    ThreadConflictError,
)
from covonaut_es.store._application import AgentApplication, ThreadsApplication
from covonaut_es.store._backend import Backend
from covonaut_es.store._chain_key import ChainAdoption
from covonaut_es.store._heads import HEADS, NEW_STREAMS, HeadAnchor, heads_of_records
from covonaut_es.store._lineage import ancestry
from covonaut_es.store._mapper import MsgspecMapper
from covonaut_es.store._openings import OPENING_VERSION, Openings
from covonaut_es.store._rows import LAST_VERSION, CheckedLog
from covonaut_es.store._snapshot_cache import CheckedSnapshot, SnapshotCache
from covonaut_es.store._thread_rows import ThreadRows
from covonaut_es.store._topic_codes import compact, stored_forms
from covonaut_es.store._write_errors import database_errors_typed

OPENING_EVENTS = (AgentThread.Started, AgentThread.StartedWithInput)
"""The events a thread begun afresh opens its stream with, which name it (a start from a
saved state is a ``Started`` the reviewer queue follows, and so names by itself)."""

MAX_PING_S = 3600
"""The longest :meth:`StoredRecords.ping` may be told to wait, in seconds."""

_LOG_BATCH = 500


def storable(version: int | None) -> int | None:
    """``version`` as a bound of a read: no higher than :data:`LAST_VERSION`."""
    return None if version is None else min(version, LAST_VERSION)


class StoredRecords:
    """A store's records exactly as its database holds them, and its log."""

    def __init__(self, app: AgentApplication, backend: Backend) -> None:
        self._app = app
        self._backend = backend
        self._pinging = threading.Lock()

    def database_now(self) -> datetime | None:
        """The time by the database's own clock; None for a store in memory, which has
        none but the process's.

        Raises:
            StoreUnavailableError: The database did not answer (after the back end's
                retries), as :func:`~covonaut_es.store._write_errors.database_errors_typed`
                types it.
        """
        with database_errors_typed("the store's database", "its clock was not read"):
            return self._backend.database_now(self._app.recorder)

    def forked_event(self, thread_id: str) -> AgentThread.Forked | None:
        """The event that started a fork's stream, or None for a root thread."""
        first = next(iter(self._app.events.get(thread_aggregate_id(thread_id), limit=1)), None)
        return first if isinstance(first, AgentThread.Forked) else None

    def first_event(self, stream: UUID) -> AgentThread.Started | AgentThread.Forked | None:
        """The event that began the thread whose stream id is ``stream`` (one indexed
        read); None when no thread has that stream."""
        first = next(iter(self._app.events.get(stream, limit=1)), None)
        return first if isinstance(first, AgentThread.Started | AgentThread.Forked) else None

    def thread_id_of(self, stream: UUID) -> str | None:
        """The id of the thread whose stream id is ``stream`` (its first event names
        it); None when no thread has that stream."""
        first = self.first_event(stream)
        return None if first is None else first.thread_id

    def openings(self, streams: Collection[UUID]) -> Openings:
        """Each of ``streams``' record at version 1 that is one of
        :data:`OPENING_EVENTS` (a fork's stream starts later), each checked (a row that
        fails its check is passed over and counted). In one statement per few hundred
        streams where the back end has it, else a read of each stream's first record."""
        wanted, recorder = list(streams), self._app.recorder
        topics = stored_forms(OPENING_EVENTS)
        found = self._backend.select_openings(recorder, wanted, topics)
        if found is not None:
            return found
        records: list[StoredEvent] = []
        passed_over = 0
        for stream in wanted:
            try:
                first = recorder.select_events(stream, gt=0, lte=OPENING_VERSION)
            except StoredRowError:
                passed_over += 1
                continue
            records += (r for r in first if r.topic in topics)
        return Openings(records, passed_over)

    def thread_rows(self, snapshots: SnapshotCache, stream: UUID, lte: int | None) -> ThreadRows:
        """What a load of the thread stored as ``stream`` up to version ``lte`` reads: its
        newest snapshot there, not yet checked, and its events from that snapshot's
        version on (all of them without one); in one statement where the back end has
        it, else a select of each."""
        lte = LAST_VERSION if lte is None else lte
        events = self._app.recorder
        found = self._backend.select_thread(events, snapshots.recorder, stream, lte)
        if found is not None:
            return found
        newest = snapshots.recorder.select_events(stream, lte=lte, desc=True, limit=1)
        snapshot = newest[0] if newest else None
        after = None if snapshot is None else snapshot.originator_version - 1
        return ThreadRows(snapshot, list(events.select_events(stream, gt=after, lte=lte)))

    def stored_records(self, thread_id: str) -> tuple[StoredEvent, ...]:
        """The thread's records exactly as the database holds them, a fork's inherited
        ones first. For audits; nothing is decoded."""
        return tuple(self.iter_stored_records(thread_id))

    def iter_stored_records(
        self, thread_id: str, *, lte: int | None = None
    ) -> Iterator[StoredEvent]:
        """As :meth:`stored_records` up to version ``lte``, read a page at a time so
        that an audit of a long thread holds one page of records, not the stream.

        Raises:
            ThreadNotFoundError: The forks' first events were altered into a loop.
        """
        chain = ancestry(thread_id, lte, self.forked_event, "this store")
        for owner, last in reversed(chain):
            yield from self.own_records(owner, lte=last)

    def own_records(self, thread_id: str, *, lte: int | None = None) -> Iterator[StoredEvent]:
        """The records of the thread's own stream up to version ``lte``, a page at a
        time (a fork's inherited ones are its ancestors')."""
        recorder, stream, after = self._app.recorder, thread_aggregate_id(thread_id), None
        while True:
            page = recorder.select_events(stream, gt=after, lte=lte, limit=_LOG_BATCH)
            yield from page
            if len(page) < _LOG_BATCH:
                return
            after = page[-1].originator_version

    def insert_records(self, records: Sequence[StoredEvent]) -> None:
        """Write records whose payloads are plain JSON, compressed and encrypted as this
        store is configured, and their topics as codes where they have one, in one
        transaction, each into a stream that holds none yet: no record is appended to a
        thread another runner may be saving under its lease. For imports; see
        :func:`covonaut_es.audit.import_threads`.

        Raises:
            ThreadConflictError: A record's stream holds events already, or a record
                conflicts with one stored meanwhile; nothing was written.
        """
        mapper = self.mapper
        streams = {UUID(str(r.originator_id)) for r in records}
        # Where the back end does not guard new streams, checked here, then written.
        if not self._backend.guards_new_streams(self._app.recorder):
            for stream in streams:
                if self._app.recorder.select_events(stream, limit=1):
                    raise _conflict(str(stream))
        sealed = [
            StoredEvent(
                r.originator_id,
                r.originator_version,
                compact(r.topic),
                mapper.stored_payload(r.state),
            )
            for r in records
        ]
        try:
            self._app.insert_and_tell(
                sealed, **{HEADS: heads_of_records(records), NEW_STREAMS: streams}
            )
        except IntegrityError as exc:
            raise _conflict(str(sealed[0].originator_id) if sealed else "?") from exc

    @property
    def chain_key(self) -> bytes | None:
        """The key the store seals its chains with, if it was opened with one."""
        key: bytes | None = getattr(self._app, "chain_key", None)
        return key

    def chain_adoption(self) -> ChainAdoption:
        """What the store records of its chain key, read with the key it was opened with."""
        return ChainAdoption(self._app, self.chain_key)

    def head_anchor(self, thread_id: str) -> HeadAnchor:
        """What the store's head table says of the thread's own stream; for an
        application of the user's own that keeps no anchors, why it keeps none."""
        recorder, app = self._app.recorder, self._app
        if not isinstance(app, ThreadsApplication):  # a store may predate anchors
            name = f"application {type(app).__name__}"
            if not self._backend.anchors_heads(recorder):
                unkept = (
                    f"{name}'s recorder ({type(recorder).__module__}."
                    f"{type(recorder).__qualname__}) keeps none; configured with "
                    "eventsourcing's SQLite or PostgreSQL module and no recorder topic of "
                    "its own, it would"
                )
                return HeadAnchor(store_anchors=False, unkept=unkept)
            if not self._backend.guards_new_streams(recorder):
                unkept = (
                    f"{name}'s database has no head table yet (it was opened without "
                    "creating tables since its threads were written); open it once with "
                    "CREATE_TABLE on to anchor every thread's head"
                )
                return HeadAnchor(store_anchors=False, unkept=unkept)
        return self._backend.read_head(recorder, thread_aggregate_id(thread_id))

    @property
    def application(self) -> AgentApplication:
        """The eventsourcing application whose records these are: for a follower of its
        log, which opens another of the same class and settings."""
        return self._app

    @property
    def mapper(self) -> MsgspecMapper:
        mapper = self._app.mapper
        assert isinstance(mapper, MsgspecMapper)
        return mapper

    def all_stored_records(self) -> Iterator[StoredEvent]:
        """Every record in the store exactly as the database holds it: the events in log
        order, then each stream's snapshots. For audits and migration checks."""
        streams: dict[UUID, None] = {}
        for notification in self.notifications():
            streams.setdefault(UUID(str(notification.originator_id)))
            yield notification
        snapshots = self._app.snapshots
        if snapshots is None:  # an application of the user's own, not snapshotting
            return
        for stream in streams:
            yield from snapshots.recorder.select_events(stream)

    def notifications(
        self,
        *event_types: type,
        after: int | None = None,
        stop: int | None = None,
        topicless: bool = False,
    ) -> Iterator[Notification]:
        """The log's records (of these event types, or all) after position ``after``
        (and up to ``stop``, when given), in log order, read a page at a time and
        filtered in SQL; nothing is decoded.

        ``topicless``: for a read that lists every thread of some kind, a row that holds
        no topic, which the filter would pass over, fails it instead, with
        :class:`~covonaut_es.errors.StoredRowError` (the store's own back ends: nothing
        else writes such a row in memory, and a recorder of the user's own filters as
        eventsourcing's do).
        """
        topics = stored_forms(event_types)
        recorder = self._app.recorder
        options = {"topicless": True} if topicless and isinstance(recorder, CheckedLog) else {}
        while True:
            batch = recorder.select_notifications(
                after, _LOG_BATCH, stop, topics=topics, inclusive_of_start=False, **options
            )
            yield from batch
            if len(batch) < _LOG_BATCH:
                return
            after = batch[-1].id

    def next_batch(
        self, *event_types: type, after: int, end: int, limit: int
    ) -> tuple[list[Notification], int]:
        """At most ``limit`` of the log's records of these types after position
        ``after``, and the position a table made from them stands at once it holds them:
        the last one's, or ``end`` (the log's end, read before them) when they are the
        last up to it, so that the events of other types after them are not read again.
        The log's positions are taken in the order their events commit (one writer at a
        time), so none before ``end`` comes later."""
        found = list(itertools.islice(self.notifications(*event_types, after=after), limit))
        if len(found) == limit:
            return found, found[-1].id
        return found, max(end, found[-1].id) if found else end

    def read_record(self, record: StoredEvent) -> object:
        """A stored record decoded and upgraded to this code's schema, as a load reads it.

        Raises:
            SerializationError: It cannot be read; the subclass says why.
        """
        return self.mapper.decode(record)

    def checked_snapshots(self, thread_id: str) -> Iterator[CheckedSnapshot]:
        """The thread's own stored snapshots, oldest first, each decoded and checked as a
        load checks it, one at a time (a long thread's snapshots together are larger
        than its events)."""
        snapshots, stream = self._app.snapshots, thread_aggregate_id(thread_id)
        if not isinstance(snapshots, SnapshotCache):
            return
        after: int | None = None
        while stored := snapshots.recorder.select_events(stream, gt=after, limit=1):
            yield snapshots.check(stored[0], decode_untrusted=True)
            after = stored[0].originator_version

    def events_of_type(
        self, *event_classes: type[AgentThread.Event], topicless: bool = False
    ) -> Iterator[Any]:
        """Events of these types across all threads, in log order (filtered in SQL;
        ``topicless`` as for :meth:`notifications`)."""
        for notification in self.notifications(*event_classes, topicless=topicless):
            yield self._app.mapper.to_domain_event(notification)

    def ping(self, timeout: float) -> None:
        """As :meth:`covonaut_es.Store.ping` (of a store not closed)."""
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout <= MAX_PING_S
        ):
            msg = f"ping's timeout is seconds above 0 and at most {MAX_PING_S}, not {timeout!r}"
            raise ConfigurationError(msg)
        # One at a time: probes that pile up on a database that hangs open no more
        # sessions than one.
        if not self._pinging.acquire(timeout=timeout):
            msg = f"the store's log did not answer a read within {timeout} s"
            raise StoreUnavailableError(msg)
        try:
            self._backend.ping(self._app.recorder, timeout)
        except (PersistenceError, ConnectionPoolClosedError) as exc:  # a table gone, say
            msg = f"the store's log did not answer a read: {type(exc).__name__}: {exc}"
            raise StoreUnavailableError(msg) from exc
        finally:
            self._pinging.release()

    def log_position(self) -> int:
        """The position of the newest event in the store's log (0 when empty):
        projections have caught up when they reach it.

        Raises:
            StoredRowError: It is past the highest after which new events are numbered
                (:meth:`~covonaut_es.store._rows.CheckedLog.max_notification_id`).
        """
        return self._app.recorder.max_notification_id() or 0

    def end_for(self, follower: str, position: int) -> int:
        """The log's end (:meth:`log_position`) for a follower whose recorded position
        is ``position``: the one check that a position read back is not past it, which
        the follower would otherwise take for caught up, passing over every event
        written afterwards (numbered at the end, before it) without a word (ADR 0113).

        Args:
            follower: Names the follower and where its position is kept, for the error.
            position: The position it recorded.

        Raises:
            StoredRowError: ``position`` is past the log's end (the newest row was moved
                back, or the log restored, after the follower passed it), or the end is
                refused (:meth:`log_position`).
        """
        end = self.log_position()
        if position > end:
            msg = (
                f"{follower} recorded log position {position}, past the end of the "
                f"store's log, its newest row at notification_id {end}: events written from "
                "now on would be numbered before it and passed over; the newest row was "
                "moved back, or the log restored, after it passed it: give the row back its "
                "position, or remove the positions it recorded past the end (or the review "
                "queue's database, which is made again)"
            )
            raise StoredRowError(msg)
        return end

    def has_events_after(
        self, position: int, *event_types: type[AgentThread.Event], follower: str
    ) -> bool:
        """Whether the log holds events (of these types, or any) after ``position``, the
        position ``follower`` recorded: read past the log's end (:meth:`end_for`), as a
        follower asks this to know it caught up.

        Raises:
            StoredRowError: ``position`` is past the log's end, or the end past the
                highest after which new events are numbered.
        """
        if position >= self.end_for(follower, position):
            return False
        topics = stored_forms(event_types)
        found = self._app.recorder.select_notifications(
            position, 1, topics=topics, inclusive_of_start=False
        )
        return bool(found)


def _conflict(stream: str) -> ThreadConflictError:
    msg = f"records for stream {stream} conflict with stored ones; nothing was written"
    return ThreadConflictError(msg, thread_id=stream, expected_version=0)
