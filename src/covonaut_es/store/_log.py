"""The store's log and records, as the library's packages above the store read them.

A :class:`~covonaut_es.Store` gives one :class:`StoreLog` (``store.log``): the workers
follow the log through it, the review queue and the inbox ask whether it holds events
past their position, and the audit's migration check, export and import read records
exactly as stored. It is the one door to those collaborators (:class:`StoredRecords`,
the reader's fold, the consumers' positions) from outside the store, so that no other
package reads a ``Store``'s private attributes (ADR 0121).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import Notification, StoredEvent

from covonaut_es._arguments import check_text
from covonaut_es.domain import AgentThread
from covonaut_es.store._chain_key import ChainAdoption
from covonaut_es.store._mapper import MsgspecMapper
from covonaut_es.store._positions import LogPositions
from covonaut_es.store._reader import ParentOf, ThreadReader
from covonaut_es.store._records import StoredRecords


class StoreLog:
    """A store's log, its records as stored, and how far its consumers got.

    Args:
        records: The store's records and log.
        reader: The store's reader, whose fold an import checks its events with.
        positions: The positions the store's consumers recorded.
    """

    def __init__(
        self, records: StoredRecords, reader: ThreadReader, positions: LogPositions
    ) -> None:
        self._records = records
        self._reader = reader
        self._positions = positions

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
            ConfigurationError: ``consumer`` is no str.
            StoredRowError: The position is past the log's end, where it would pass
                over every event written afterwards; or the end is refused.
        """
        check_text("consumer", consumer)
        position = self._positions.log_position(consumer)
        follower = f"the consumer {consumer!r} (the store's tracking table)"
        return position, self._records.end_for(follower, position)

    def notifications(
        self, *event_types: type, after: int | None = None, stop: int | None = None
    ) -> Iterator[Notification]:
        """The log's records (of these event types, or all) after position ``after``
        and up to ``stop``, in log order, read a page at a time; nothing is decoded
        (:attr:`mapper` decodes one)."""
        return self._records.notifications(*event_types, after=after, stop=stop)

    def next_batch(
        self, *event_types: type, after: int, end: int, limit: int
    ) -> tuple[list[Notification], int]:
        """At most ``limit`` of the log's records of these types after ``after``, and
        the position a table made from them stands at: the last one's, or ``end`` (the
        log's end, read before them) when they are the last up to it."""
        return self._records.next_batch(*event_types, after=after, end=end, limit=limit)

    def has_events_after(
        self, position: int, *event_types: type[AgentThread.Event], follower: str
    ) -> bool:
        """Whether the log holds events (of these types, or any) after ``position``,
        the position ``follower`` recorded.

        Raises:
            StoredRowError: ``position`` is past the log's end, or the end past the
                highest after which new events are numbered.
        """
        return self._records.has_events_after(position, *event_types, follower=follower)

    def thread_id_of(self, stream: UUID) -> str | None:
        """The id of the thread whose stream id is ``stream``; None when no thread has
        that stream."""
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
            SerializationError: It cannot be read; the subclass says why.
        """
        return self._records.read_record(record)

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
            CovonautError: The events do not fold into a thread; the subclass says why.
        """
        return self._reader.fold(None, events, thread_id, parent)

    def insert_records(self, records: Sequence[StoredEvent]) -> None:
        """Write records whose payloads are plain JSON, sealed as this store seals its
        own, in one transaction: an import's one write
        (:func:`covonaut_es.audit.import_threads`), which checked them first.

        Raises:
            ThreadConflictError: A record conflicts with a stored one; nothing was written.
        """
        self._records.insert_records(records)
