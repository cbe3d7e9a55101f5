"""The store's log and records, as the library's packages above the store read them.

A :class:`~covonaut_es.Store` gives one :class:`StoreLog` (``store.log``): the workers
follow the log through it, the review queue and the inbox ask whether it holds events
past their position, and the audit's migration check, export and import read records
exactly as stored. It is the one door to those collaborators (:class:`StoredRecords`,
the reader's fold, the consumers' positions) from outside the store, so that no other
package reads a ``Store``'s private attributes (ADR 0121). Being public, it checks
its arguments as every public method of the store does, and its one write makes the
checks the store's own writes make.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import Notification, StoredEvent

from covonaut_es._arguments import check_callable, check_instance, check_name, check_position
from covonaut_es.domain import AgentThread, check_thread_id, thread_aggregate_id
from covonaut_es.errors import SerializationError, TransferError
from covonaut_es.store._chain_key import ChainAdoption
from covonaut_es.store._mapper import MsgspecMapper
from covonaut_es.store._positions import LogPositions
from covonaut_es.store._read_only import WriteGuard, guarded
from covonaut_es.store._reader import ParentOf, ThreadReader
from covonaut_es.store._records import StoredRecords
from covonaut_es.store._rows import row_damage, shown


@guarded("Store.log")
class StoreLog:
    """A store's log, its records as stored, and how far its consumers got.

    Args:
        records: The store's records and log.
        reader: The store's reader, whose fold an import checks its events with.
        positions: The positions the store's consumers recorded.
        guard: Refuses the import's write on a store opened read-only.
    """

    def __init__(
        self,
        records: StoredRecords,
        reader: ThreadReader,
        positions: LogPositions,
        guard: WriteGuard,
    ) -> None:
        self._records = records
        self._reader = reader
        self._positions = positions
        self._guard = guard

    # The log ------------------------------------------------------------------------

    def end(self) -> int:
        """The position of the newest event in the log (0 when it is empty).

        Raises:
            StoredRowError: It is past the highest after which new events are numbered.
        """
        return self._records.log_position()

    def position_and_end(self, consumer: str) -> tuple[int, int]:
        """The log position ``consumer`` recorded as done (0 before any), and the log's
        end it was checked against (ADR 0113): a consumer that reads on up to the end
        reads it once.

        Raises:
            ConfigurationError: ``consumer`` is no str or holds a lone surrogate.
            StoredRowError: The position is past the log's end, where it would pass
                over every event written afterwards; or the end is refused.
        """
        position = self._positions.log_position(consumer)
        follower = f"the consumer {consumer!r} (the store's tracking table)"
        return position, self._records.end_for(follower, position)

    def notifications(
        self, *event_types: type, after: int | None = None, stop: int | None = None
    ) -> Iterator[Notification]:
        """The log's records (of these event types, or all) after position ``after``
        and up to ``stop``, in log order, read a page at a time; nothing is decoded
        (:attr:`mapper` decodes one).

        Raises:
            ConfigurationError: ``after`` or ``stop`` is neither None nor a position
                (a whole number from 0 to 2**63-1).
        """
        for name, position in (("after", after), ("stop", stop)):
            if position is not None:
                check_position(name, position)
        return self._records.notifications(*event_types, after=after, stop=stop)

    def next_batch(
        self, *event_types: type, after: int, end: int, limit: int
    ) -> tuple[list[Notification], int]:
        """At most ``limit`` of the log's records of these types after ``after``, and
        the position a table made from them stands at: the last one's, or ``end`` (the
        log's end, read before them) when they are the last up to it.

        Raises:
            ConfigurationError: ``after`` or ``end`` is no position (a whole number
                from 0 to 2**63-1), or ``limit`` no whole number from 1.
        """
        check_position("after", after)
        check_position("end", end)
        check_position("limit", limit, least=1)
        return self._records.next_batch(*event_types, after=after, end=end, limit=limit)

    def has_events_after(
        self, position: int, *event_types: type[AgentThread.Event], follower: str
    ) -> bool:
        """Whether the log holds events (of these types, or any) after ``position``,
        the position ``follower`` recorded.

        Raises:
            ConfigurationError: ``position`` is no position (a whole number from 0 to
                2**63-1), or ``follower`` no str without a lone surrogate.
            StoredRowError: ``position`` is past the log's end, or the end past the
                highest after which new events are numbered.
        """
        check_position("position", position)
        check_name("follower", follower)
        return self._records.has_events_after(position, *event_types, follower=follower)

    def thread_id_of(self, stream: UUID) -> str | None:
        """The id of the thread whose stream id is ``stream``; None when no thread has
        that stream.

        Raises:
            ConfigurationError: ``stream`` is no UUID.
        """
        check_instance("stream", stream, UUID, "a UUID")
        return self._records.thread_id_of(stream)

    # Records as stored --------------------------------------------------------------

    @property
    def mapper(self) -> MsgspecMapper:
        """The store's mapper: the one read path of a stored record."""
        return self._records.mapper

    @property
    def application(self) -> Application[UUID]:
        """The eventsourcing application whose records these are: for a follower of its
        log, which opens another of the same class and settings."""
        return self._records.application

    def stored_records(self, thread_id: str) -> tuple[StoredEvent, ...]:
        """The thread's records exactly as the database holds them, a fork's inherited
        ones first; nothing is decoded."""
        return self._records.stored_records(thread_id)

    def all_stored_records(self) -> Iterator[StoredEvent]:
        """Every record in the store exactly as the database holds it: the events in log
        order, then each stream's snapshots."""
        return self._records.all_stored_records()

    def read_record(self, record: StoredEvent) -> object:
        """A stored record decoded and upgraded to this code's schema, as a load reads it.

        Raises:
            ConfigurationError: ``record`` is no StoredEvent.
            SerializationError: It cannot be read; the subclass says why.
        """
        check_instance("record", record, StoredEvent, "a StoredEvent")
        return self._records.read_record(record)

    def _check_new_record(self, thread_id: str, stream: UUID, record: StoredEvent) -> None:
        """Refuse a record of a new thread that is not in its stream, holds a column of
        the wrong type (the store's row check, from version 1), or whose payload does
        not decode as a load decodes it: written, every read of the thread would refuse
        it.

        Raises:
            TransferError: It is such a record.
        """
        where = f"a record of thread {thread_id!r}"
        try:
            found: UUID | None = UUID(str(record.originator_id))
        except ValueError:
            found = None
        if found != stream:
            msg = (
                f"{where} is in stream {shown(record.originator_id)}, not the thread's "
                f"({stream}); nothing was written"
            )
            raise TransferError(msg)
        damage = row_damage(record, lowest=1)
        if damage is not None:
            column, value, expected = damage
            msg = f"{where} holds {column} {shown(value)}: expected {expected}; nothing was written"
            raise TransferError(msg)
        try:  # sealing and opening it again would only undo each other
            self.mapper.decode_plain(record, record.state)
        except SerializationError as exc:
            msg = f"{where} does not decode: {exc}; nothing was written"
            raise TransferError(msg) from exc

    @property
    def chain_key(self) -> bytes | None:
        """The key the store seals its chains with, if it was opened with one."""
        return self._records.chain_key

    def chain_adoption(self) -> ChainAdoption:
        """What the store records of its chain key, read with the key it was opened with."""
        return self._records.chain_adoption()

    def fold(self, events: Iterable[Any], thread_id: str, parent: ParentOf) -> AgentThread | None:
        """The thread ``events`` (decoded, in order, from its first) make, by the fold
        every load uses; a fork's first event is grafted onto the state ``parent`` gives.

        Raises:
            InvalidThreadIdError: ``thread_id`` is no thread's id.
            ConfigurationError: ``events`` is no iterable of a thread's events, or
                ``parent`` cannot be called.
            CovonautError: The events do not fold into a thread; the subclass says why.
        """
        check_instance("events", events, Iterable, "an iterable of events")
        check_thread_id(thread_id, new=False)
        check_callable("parent", parent)
        events = tuple(events)
        for event in events:
            check_instance("each of events", event, AgentThread.Event, "a thread's event")
        return self._reader.fold(None, events, thread_id, parent)

    def insert_threads(self, records: Mapping[str, Sequence[StoredEvent]]) -> None:
        """Write new threads' records, whose payloads are plain JSON, sealed as this
        store seals its own, in one transaction: an import's one write
        (:func:`covonaut_es.audit.import_threads`), which checked them first. Whoever
        calls it, the store checks what must always hold: it is writable, each id is
        one a new thread may have, each record is in its thread's stream, and each
        stream holds no events yet, so that nothing is appended to a thread another
        runner may hold the lease of.

        Args:
            records: Each new thread's records, by its id.

        Raises:
            ConfigurationError: ``records`` is no mapping of str to StoredEvents.
            InvalidThreadIdError: An id breaks the rule new threads follow.
            TransferError: A record is not in its thread's stream, holds a column of
                the wrong type or a version below 1, or does not decode.
            ReadOnlyStoreError: The store was opened read-only.
            ThreadConflictError: A thread's stream holds events already, or a record
                conflicts with one stored meanwhile; nothing was written.
        """
        check_instance("records", records, Mapping, "a mapping of thread ids to records")
        self._guard.refuse_if_read_only(f"the {len(records)} threads imported were not written")
        rows: list[StoredEvent] = []
        for thread_id, thread_records in records.items():
            stream = thread_aggregate_id(check_thread_id(thread_id))
            check_instance(f"records[{thread_id!r}]", thread_records, Sequence, "a sequence")
            for record in thread_records:
                check_instance(
                    f"each of records[{thread_id!r}]", record, StoredEvent, "a StoredEvent"
                )
                self._check_new_record(thread_id, stream, record)
                rows.append(record)
        self._records.insert_records(rows)
