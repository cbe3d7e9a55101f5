"""The table of thread summaries a listing keeps beside the head anchors (ADR 0050);
each back end hands out its own (:meth:`~covonaut_es.store._backend.Backend.summary_table`),
and :mod:`covonaut_es.store._listing` decides what goes in it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from covonaut_es.store._settings_tables import column


class SummaryTable(ABC):
    """A back end's table of thread summaries, beside its head anchors. Stream ids are
    as the store keeps them; a summary is the bytes :mod:`._listing` wrote."""

    @abstractmethod
    def last_first_event(self) -> int:
        """The log position of the first event of the newest thread listed (0: none)."""

    @abstractmethod
    def out_of_date(self) -> list[UUID] | None:
        """The listed streams whose head anchor is at another version, or absent; None
        when a row's stream id cannot be read (another writer spoiled it)."""

    @abstractmethod
    def clear(self) -> None:
        """Remove every summary."""

    @abstractmethod
    def write(self, rows: Sequence[tuple[UUID, int, int, bytes]]) -> None:
        """Record each ``(stream, version, first event's log position, summary)``: a
        stream new to the table is listed after every other, in the order given."""

    @abstractmethod
    def forget(self, streams: Sequence[UUID]) -> None:
        """Remove the summaries of streams that no longer hold a thread."""

    @abstractmethod
    def page(self, after: int, limit: int) -> list[tuple[int, UUID, bytes]] | None:
        """Up to ``limit`` ``(position, stream, summary)`` after ``position``, in order;
        None when a row's values cannot be read (another writer spoiled them)."""


class SQLSummaries(SummaryTable):
    """A summary table in a SQL database, beside the head table.

    Args:
        datastore: The database's eventsourcing datastore (reads).
        writing: Opens a transaction that commits (writes).
        heads: The head table's name, as SQL names it.
        table: The summary table's name, as SQL names it.
        create: The statements that create the table if it is absent.
        placeholder: The driver's parameter placeholder.
        stored: A stream id as the tables store it.
    """

    def __init__(
        self,
        datastore: Any,
        writing: Callable[[], Any],
        *,
        heads: str,
        table: str,
        create: Sequence[str],
        placeholder: str,
        stored: Callable[[UUID], Any],
    ) -> None:
        self._datastore = datastore
        self._writing = writing
        self._heads, self._table = heads, table
        self._create = create
        self._p = placeholder
        self._stored = stored
        self._created = False

    def _ensure(self) -> None:
        if not self._created:
            with self._writing() as cursor:
                for statement in self._create:
                    cursor.execute(statement)
            self._created = True

    def last_first_event(self) -> int:
        self._ensure()
        with self._datastore.transaction(commit=False) as cursor:
            cursor.execute(f"SELECT first_event FROM {self._table} ORDER BY position DESC LIMIT 1")
            row = cursor.fetchone()
        found = None if row is None else column(row, 0, "first_event")
        return found if type(found) is int and found > 0 else 0

    def out_of_date(self) -> list[UUID] | None:
        self._ensure()
        with self._datastore.transaction(commit=False) as cursor:
            cursor.execute(
                f"SELECT s.originator_id AS originator_id FROM {self._table} s "
                f"LEFT JOIN {self._heads} h ON h.originator_id = s.originator_id "
                "WHERE h.version IS NULL OR h.version <> s.version"
            )
            found = [_stream(column(row, 0, "originator_id")) for row in cursor.fetchall()]
        return None if None in found else [stream for stream in found if stream is not None]

    def clear(self) -> None:
        with self._writing() as cursor:
            cursor.execute(f"DELETE FROM {self._table}")

    def write(self, rows: Sequence[tuple[UUID, int, int, bytes]]) -> None:
        if not rows:
            return
        self._ensure()
        p = self._p
        with self._writing() as cursor:
            for stream, version, first_event, summary in rows:
                cursor.execute(
                    f"INSERT INTO {self._table} (originator_id, version, first_event, summary) "
                    f"VALUES ({p}, {p}, {p}, {p}) ON CONFLICT (originator_id) DO UPDATE SET "
                    "version = excluded.version, summary = excluded.summary",
                    (self._stored(stream), version, first_event, summary),
                )

    def forget(self, streams: Sequence[UUID]) -> None:
        if not streams:
            return
        with self._writing() as cursor:
            for stream in streams:
                cursor.execute(
                    f"DELETE FROM {self._table} WHERE originator_id = {self._p}",
                    (self._stored(stream),),
                )

    def page(self, after: int, limit: int) -> list[tuple[int, UUID, bytes]] | None:
        self._ensure()
        p = self._p
        with self._datastore.transaction(commit=False) as cursor:
            cursor.execute(
                f"SELECT position, originator_id, summary FROM {self._table} "
                f"WHERE position > {p} ORDER BY position LIMIT {p}",
                (after, limit),
            )
            rows = cursor.fetchall()
        found = []
        for row in rows:
            position = column(row, 0, "position")
            stream = _stream(column(row, 1, "originator_id"))
            summary = column(row, 2, "summary")
            if type(position) is not int or stream is None or not isinstance(summary, bytes):
                return None
            found.append((position, stream, bytes(summary)))
        return found


def _stream(value: Any) -> UUID | None:
    """A stream id read from a table; None when another writer spoiled it."""
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        return None
