"""The table of threads with work outstanding that workers keep (ADR 0054).

A row per thread holds what a worker's fold of the log says of it (the workers decide
what, and write it as bytes); one row more, under the nil stream id, holds the log
position the rows were made at. Workers bring the table up to date from the log after
that position, and a starting worker reads it instead of folding the whole log, so it
starts in time proportional to the threads with work outstanding and the events
written since.

Rows name threads and what they wait for, so an encrypted store seals each with the
store's cipher and keeps it under the stream id as stored. The table only chooses what
a worker looks at: a worker decides from the thread itself, under its lease, so a row
another writer spoiled makes it look at a thread in vain or pass over one until its
next event, never run one that is not ready.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any
from uuid import UUID

from eventsourcing.application import Application

from covonaut_es.store._side_tables import SQLTrackedTable, opened_row, sealed_row
from covonaut_es.store._stream_ids import KeyedEvents, stored_stream
from covonaut_es.store._summaries import stream_in

TRACKING = UUID(int=0)
"""The stream id of the row that holds the table's log position."""


class OutstandingTable(ABC):
    """A back end's table of outstanding threads: stream ids as stored (read back as
    the column holds them: read them with :func:`stream_in`), rows as bytes."""

    @abstractmethod
    def read(self) -> list[tuple[Any, int, bytes]]:
        """Every ``(stream, position, row)``, read at once; the tracking row's position
        is the table's."""

    @abstractmethod
    def position(self) -> Any:
        """The table's log position, as stored."""

    @abstractmethod
    def rows(self, streams: Sequence[UUID]) -> list[tuple[Any, bytes]]:
        """The ``(stream, row)`` of these streams (as stored) that the table holds."""

    @abstractmethod
    def advance(
        self, before: int, after: int, changes: Sequence[tuple[UUID, bytes | None]]
    ) -> bool:
        """Move the table from position ``before`` to ``after``, writing each changed
        row (None: removed), in one transaction; False, writing nothing, when the table
        is no longer at ``before`` (another worker moved it first)."""

    @abstractmethod
    def clear(self) -> None:
        """Remove every row and go back to position 0."""


class SQLOutstanding(SQLTrackedTable, OutstandingTable):
    """The table of outstanding threads in a SQL database (:class:`SQLSideTable`'s
    arguments), its tracking row made with it."""

    def _tracking_key(self) -> tuple[str, Any]:
        return "originator_id", self._stored(TRACKING)

    def _add_tracking_row(self, cursor: Any) -> None:
        cursor.execute(
            f"INSERT INTO {self._table} (originator_id, position, state) "
            f"VALUES ({self._p}, 0, {self._p}) ON CONFLICT (originator_id) DO NOTHING",
            (self._stored(TRACKING), b""),
        )

    def read(self) -> list[tuple[Any, int, bytes]]:
        return self._select(f"SELECT originator_id, position, state FROM {self._table}", ())[0]

    def position(self) -> Any:
        (found,) = self._select(
            f"SELECT position FROM {self._table} WHERE originator_id = {self._p}",
            (self._stored(TRACKING),),
        )
        return found[0][0] if found else None

    def rows(self, streams: Sequence[UUID]) -> list[tuple[Any, bytes]]:
        found: list[tuple[Any, bytes]] = []
        for start in range(0, len(streams), 500):
            chunk = [self._stored(stream) for stream in streams[start : start + 500]]
            marks = ", ".join([self._p] * len(chunk))
            found += self._select(
                f"SELECT originator_id, state FROM {self._table} WHERE originator_id IN ({marks})",
                tuple(chunk),
            )[0]
        return found

    def advance(
        self, before: int, after: int, changes: Sequence[tuple[UUID, bytes | None]]
    ) -> bool:
        p = self._p
        delete = f"DELETE FROM {self._table} WHERE originator_id = {p}"
        upsert = (
            f"INSERT INTO {self._table} (originator_id, position, state) VALUES ({p}, {p}, "
            f"{p}) ON CONFLICT (originator_id) DO UPDATE SET position = excluded.position, "
            "state = excluded.state"
        )
        statements = [
            (delete, (self._stored(stream),))
            if row is None
            else (upsert, (self._stored(stream), after, row))
            for stream, row in changes
        ]
        return self._advance(before, after, statements)


class OutstandingThreads:
    """The store's table of outstanding threads, by domain stream id, each row sealed
    with the store's cipher.

    Args:
        app: The store's application.
        table: Its back end's table.
    """

    def __init__(self, app: Application[UUID], table: OutstandingTable) -> None:
        self._app = app
        self._table = table

    def read(self) -> tuple[int, dict[UUID, bytes]] | None:
        """The table's log position and every row, read at once; None when a row cannot
        be read (another writer spoiled it)."""
        position, rows = None, {}
        for stored, at, sealed in self._table.read():
            stream = stream_in(stored)
            if stream == TRACKING:
                position = at
                continue
            opened = self._opened(stream, sealed)
            if opened is None:
                return None
            rows[opened[0]] = opened[1]
        if type(position) is not int or position < 0:
            return None
        return position, rows

    def position(self) -> int | None:
        """The table's log position; None when another writer spoiled it."""
        found = self._table.position()
        return found if type(found) is int and found >= 0 else None

    def rows(self, streams: Iterable[UUID]) -> dict[UUID, bytes] | None:
        """The rows of these streams the table holds; None when one cannot be read."""
        wanted = set(streams)
        found: dict[UUID, bytes] = {}
        for key, sealed in self._table.rows([self._stored(stream) for stream in wanted]):
            opened = self._opened(stream_in(key), sealed)
            if opened is None or opened[0] not in wanted:
                return None
            found[opened[0]] = opened[1]
        return found

    def advance(self, before: int, after: int, changes: dict[UUID, bytes | None]) -> bool:
        """As :meth:`OutstandingTable.advance`, by domain stream id."""
        cipher = self._app.mapper.cipher
        sealed = [
            (self._stored(stream), None if row is None else sealed_row(cipher, row))
            for stream, row in changes.items()
        ]
        return self._table.advance(before, after, sealed)

    def clear(self) -> None:
        """Remove every row: the table is made again from the whole log."""
        self._table.clear()

    def _stored(self, stream: UUID) -> Any:
        return stored_stream(self._app.recorder, stream)

    def _opened(self, stored: UUID | None, sealed: Any) -> tuple[UUID, bytes] | None:
        row = opened_row(self._app.mapper.cipher, sealed, bytes)
        if stored is None or row is None:
            return None
        recorder = self._app.recorder
        try:
            stream = (
                recorder.stream_ids.domain(stored) if isinstance(recorder, KeyedEvents) else stored
            )
        except Exception:  # spoiled by another writer: the cipher's errors vary
            return None
        return stream, row
