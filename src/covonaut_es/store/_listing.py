"""Listing threads a page at a time, from a summary per thread kept in a table of the
store (ADR 0050).

Each summary records the log position it was made at. A listing first reads the log's
thread events after the newest such position, and makes again the summary of each
thread they name, from the thread itself (a thread begun since is listed after the
others, in the order the threads began); then it reads one page of summaries in
order. The library's writers never touch the table, so a summary it made is late until
the next listing, never wrong; someone who writes the database behind the library can
still alter a summary, so a listing is no audit (``verify`` is). A listing costs the
events written since the last one, a load per thread they name, and the page, not the
number of threads.

A summary names its thread and its state, so an encrypted store seals it with the
store's cipher. When a summary cannot be read (another writer spoiled the table) every
summary is made again. Stores without the table (an in-memory store, an application of
the caller's) and stores opened read-only list from the threads themselves, a page at
a time.
"""

from __future__ import annotations

import functools
import itertools
from datetime import datetime
from uuid import UUID

import msgspec
from eventsourcing.application import Application

from covonaut_es._arguments import check_position
from covonaut_es.domain import (
    AgentThread,
    ThreadParent,
    ThreadStatus,
    check_thread_stream,
    thread_aggregate_id,
)
from covonaut_es.errors import ConfigurationError, StoredRowError
from covonaut_es.store._backend import Backend
from covonaut_es.store._read_only import WriteGuard
from covonaut_es.store._reader import ThreadReader
from covonaut_es.store._records import StoredRecords
from covonaut_es.store._side_tables import opened_row, opened_rows, sealed_row
from covonaut_es.store._stream_ids import KeyedEvents, stored_stream
from covonaut_es.store._summaries import SummaryTable, stream_in

_THREAD_EVENTS = tuple(
    dict.fromkeys(
        cls
        for cls in vars(AgentThread).values()
        if isinstance(cls, type)
        and issubclass(cls, AgentThread.Event)
        and cls is not AgentThread.Event
    )
)
"""Every event type of a thread's stream: the log filtered by their topics names the
threads written since a position."""

MAX_PAGE = 10_000
"""The most threads one page lists."""


class ThreadSummary(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What a listing says of one thread, as of its version ``version``.

    Attributes:
        thread_id: The thread.
        version: Its version the summary describes.
        status: Its status.
        turn: Its turns so far.
        created_at: When its first event (``Started`` or ``Forked``) was recorded.
        last_activity: When its newest event was recorded.
        parent: Where it branched off, for a fork.
        unresolved_pauses: Its pauses no person has dealt with yet (0 once abandoned).
        waiting_for: ``"person"``, ``"runner"`` or ``""``, as
            :attr:`covonaut_es.ThreadState.waiting_for`.
    """

    thread_id: str
    version: int
    status: ThreadStatus
    turn: int
    created_at: datetime
    last_activity: datetime
    parent: ThreadParent | None = None
    unresolved_pauses: int = 0
    waiting_for: str = ""

    @classmethod
    def of(
        cls, thread: AgentThread, created_at: datetime, last_activity: datetime
    ) -> ThreadSummary:
        """The summary of a loaded thread."""
        state = thread.state
        return cls(
            thread_id=state.thread_id,
            version=state.version,
            status=state.status,
            turn=state.turn,
            created_at=created_at,
            last_activity=last_activity,
            parent=state.parent,
            unresolved_pauses=len(state.awaiting_person),
            waiting_for=state.waiting_for,
        )


_DECODER = msgspec.msgpack.Decoder(ThreadSummary)


class ThreadPage(msgspec.Struct, frozen=True):
    """One page of a listing of threads.

    Attributes:
        threads: The threads, oldest first.
        next_after: Pass it as ``after`` for the next page; None on the last page.
    """

    threads: tuple[ThreadSummary, ...]
    next_after: int | None = None


class ThreadListing:
    """List a store's threads a page at a time.

    Args:
        app: The store's application.
        backend: The port of its back end, which gives the summary table.
        records: The store's records (a thread's first event).
        reader: Loads threads.
        guard: Whether the store was opened read-only.
    """

    def __init__(
        self,
        app: Application[UUID],
        backend: Backend,
        records: StoredRecords,
        reader: ThreadReader,
        guard: WriteGuard,
    ) -> None:
        self._app = app
        self._backend = backend
        self._records = records
        self._reader = reader
        self._guard = guard
        self._table: SummaryTable | None = None

    def page(self, *, after: int | None = None, limit: int = 1000) -> ThreadPage:
        """As :meth:`covonaut_es.Store.list_threads`."""
        if type(limit) is not int or not 1 <= limit <= MAX_PAGE:
            msg = f"a page lists 1 to {MAX_PAGE} threads, got limit={limit!r}"
            raise ConfigurationError(msg)
        if after is not None:  # the next_after of a page
            check_position("after", after)
        start = after or 0
        table = None if self._guard.read_only else self._summaries()
        if table is None:
            return self._from_threads(start, limit)
        # The end as every follower reads it: refused when new events would be numbered
        # before it (ADR 0113), where the summaries would never be made again.
        end = self._records.log_position()
        found = table.page(start, limit + 1)  # read at once: it is up to date, mostly
        if found is None or found[0] != end:  # events since the newest summary
            seen = table.seen() if found is None else found[0]
            if self._bring_up_to_date(table, seen) or found is None:
                found = table.page(start, limit + 1)
                if found is None:  # spoiled by another writer: every summary made again
                    table.clear()
                    self._bring_up_to_date(table, 0)
                    found = table.page(start, limit + 1) or (0, [])
        rows = found[1]
        threads = self._opened_page([sealed for _, sealed in rows[:limit]])
        if threads is None:  # a summary spoiled by another writer: each checked alone
            remade = self._remade_page(table, rows[:limit])
            if remade is None:  # which thread a summary was is lost: every one made again
                table.clear()
                return self.page(after=after, limit=limit)
            threads = remade
        more = len(rows) > limit
        return ThreadPage(tuple(threads), rows[limit - 1][0] if more else None)

    def _opened_page(self, sealed: list[bytes]) -> list[ThreadSummary] | None:
        """Every summary of a page, opened; None if any cannot be."""
        return opened_rows(self._app.mapper.cipher, sealed, _DECODER.decode)

    def _remade_page(
        self, table: SummaryTable, rows: list[tuple[int, bytes]]
    ) -> list[ThreadSummary] | None:
        """The summaries of a page, each one that cannot be opened made again from its
        thread; None when the thread of one cannot be told."""
        threads = []
        for position, sealed in rows:
            summary = self._opened(sealed)
            if summary is None:
                stored = stream_in(table.stream_at(position))
                if stored is None:
                    return None
                remade = self._row(self._domain(stored), table.seen())
                if remade is None:
                    continue
                table.write([remade])
                summary = self._opened(remade[3])
            if summary is not None:
                threads.append(summary)
        return threads

    def _summaries(self) -> SummaryTable | None:
        if self._table is None:
            self._table = self._backend.summary_table(self._app.recorder)
        return self._table

    def _bring_up_to_date(self, table: SummaryTable, seen: int) -> bool:
        """Make again the summaries of the threads written since the last listing, from
        the log after ``seen``, the position the table reached (a thread begun since is
        listed after the others, in the order the threads began); whether it changed the
        table."""
        written: dict[UUID, None] = {}
        position = seen
        # Read from the event at ``seen`` itself: a position the log does not hold was
        # spoiled by another writer, and one beyond the log would hide new writes.
        # A row without a topic may be a thread's: refused, never passed over (ADR 0083).
        read = functools.partial(self._records.notifications, *_THREAD_EVENTS, topicless=True)
        notifications = read(after=max(seen - 1, 0))
        if seen:
            first = next(notifications, None)
            if first is None or first.id != seen:
                table.clear()
                position = 0
                notifications = read(after=0)
        for notification in notifications:
            written[UUID(str(notification.originator_id))] = None
            position = notification.id
        if position == seen:
            return False
        made: list[tuple[UUID, int, int, bytes]] = []
        for stream in written:
            row = self._row(stream, position)
            if row is not None:
                made.append(row)
            if len(made) == MAX_PAGE:  # written as it goes: a first listing may be long
                table.write(made)
                made = []
        table.write(made)
        return True

    def _row(self, stream: UUID, seen: int) -> tuple[UUID, int, int, bytes] | None:
        """The sealed summary of the thread with domain stream id ``stream``, under the
        id the store keeps it by; None when no thread has that stream."""
        summary = self._summary(stream)
        if summary is None:
            return None
        cipher = self._app.mapper.cipher
        try:
            encoded = msgspec.msgpack.encode(summary)
        except OverflowError as exc:  # a stored number no summary carries
            msg = (
                f"thread {summary.thread_id!r} holds a number beyond 64 bits (its turn or "
                f"version, say): a row was altered behind the library ({exc})"
            )
            raise StoredRowError(msg) from exc
        sealed = sealed_row(cipher, encoded)
        return stored_stream(self._app.recorder, stream), summary.version, seen, sealed

    def _summary(self, stream: UUID) -> ThreadSummary | None:
        first = self._records.first_event(stream)
        if first is None:
            return None  # not a thread's stream
        check_thread_stream(first.originator_id, first.thread_id)  # not another's, moved
        thread = self._reader.find(first.thread_id)
        if thread is None:
            return None
        last = self._reader.events_after(first.thread_id, thread.version - 1)
        activity = last[-1].timestamp if last else first.timestamp
        return ThreadSummary.of(thread, first.timestamp, activity)

    def _opened(self, sealed: bytes) -> ThreadSummary | None:
        return opened_row(self._app.mapper.cipher, sealed, _DECODER.decode)

    def _domain(self, stored: UUID) -> UUID:
        recorder = self._app.recorder
        return recorder.stream_ids.domain(stored) if isinstance(recorder, KeyedEvents) else stored

    def _from_threads(self, start: int, limit: int) -> ThreadPage:
        """A page made from the threads themselves, in creation order."""
        ids = list(itertools.islice(self._reader.thread_ids(), start, start + limit + 1))
        threads = []
        for thread_id in ids[:limit]:
            summary = self._summary(thread_aggregate_id(thread_id))
            if summary is not None:
                threads.append(summary)
        more = len(ids) > limit
        return ThreadPage(tuple(threads), start + limit if more else None)
