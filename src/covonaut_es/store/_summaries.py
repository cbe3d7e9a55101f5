"""The table of thread summaries a listing keeps (ADR 0050);
each back end hands out its own (:meth:`~covonaut_es.store._backend.Backend.summary_table`),
and :mod:`covonaut_es.store._listing` decides what goes in it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from covonaut_es.store._side_tables import SQLSideTable


class SummaryTable(ABC):
    """A back end's table of thread summaries. Stream ids are as the store keeps them;
    a summary is the bytes :mod:`._listing` wrote."""

    @abstractmethod
    def seen(self) -> int:
        """The log position the newest summaries were made at (0: none)."""

    @abstractmethod
    def write(self, rows: Sequence[tuple[UUID, int, int, bytes]]) -> None:
        """Record each ``(stream, version, log position, summary)``: a stream new to the
        table is listed after every other, in the order given."""

    @abstractmethod
    def clear(self) -> None:
        """Remove every summary."""

    @abstractmethod
    def page(self, after: int, limit: int) -> tuple[int, list[tuple[int, bytes]]] | None:
        """What :meth:`seen` says, and up to ``limit`` ``(position, summary)`` after
        ``position``, in order, read at once;
        None when the positions cannot be read (another writer spoiled them). A summary
        is as stored: the caller checks it."""

    @abstractmethod
    def stream_at(self, position: int) -> Any:
        """The stream id of the summary at ``position``, as stored (read it with
        :func:`stream_in`); None when there is none."""


class SQLSummaries(SQLSideTable, SummaryTable):
    """A summary table in a SQL database: :class:`SQLSideTable`'s arguments."""

    def seen(self) -> int:
        found = self._select(f"SELECT MAX(seen) FROM {self._table}", ())
        return _position(found[0][0][0])

    def write(self, rows: Sequence[tuple[UUID, int, int, bytes]]) -> None:
        if not rows:
            return
        self.make()
        p = self._p

        table = self._table

        def write() -> None:
            with self._writing() as cursor:
                if self._serialized is not None:
                    cursor.execute(self._serialized)
                for stream, version, seen, summary in rows:
                    # A summary made as of an earlier position (a listing that read the
                    # log before another and wrote after it) never replaces a newer one.
                    cursor.execute(
                        f"INSERT INTO {table} (originator_id, version, seen, summary) "
                        f"VALUES ({p}, {p}, {p}, {p}) ON CONFLICT (originator_id) DO UPDATE "
                        "SET version = excluded.version, seen = excluded.seen, "
                        f"summary = excluded.summary WHERE {table}.seen <= excluded.seen",
                        (self._stored(stream), version, seen, summary),
                    )

        self._run(write, "its summaries were not written")

    def clear(self) -> None:
        def write() -> None:
            with self._writing() as cursor:
                cursor.execute(f"DELETE FROM {self._table}")

        self._run(write, "it was not cleared")

    def page(self, after: int, limit: int) -> tuple[int, list[tuple[int, bytes]]] | None:
        # The stream ids are not read: a listing needs only the summaries, and reading
        # them would cost as much again as the select of the head anchors.
        p = self._p
        ends, found = self._select(
            f"SELECT MAX(seen) FROM {self._table}",
            (),
            f"SELECT position, summary FROM {self._table} "
            f"WHERE position > {p} ORDER BY position LIMIT {p}",
            (after, limit),
        )
        if found and type(found[-1][0]) is not int:  # the next page starts after it
            return None
        return _position(ends[0][0]), found

    def stream_at(self, position: int) -> Any:
        found = self._select(
            f"SELECT originator_id FROM {self._table} WHERE position = {self._p}", (position,)
        )[0]
        return found[0][0] if found else None


def _position(found: Any) -> int:
    """A log position read from the table: 0 for none, or one another writer spoiled."""
    return found if type(found) is int and found > 0 else 0


def stream_in(value: Any) -> UUID | None:
    """A stream id read from the table; None when another writer spoiled it."""
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        return None
