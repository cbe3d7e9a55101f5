"""A table the store keeps beside its log in a SQL database (thread summaries, the
threads with work outstanding, the review index): where it is, how to write and read
it, and its creation on first use; the tracking row of a table made from the log,
which holds the log position its rows were made to; and its rows sealed with the
store's cipher and opened again."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar, cast
from uuid import UUID

from eventsourcing.persistence import Cipher

from covonaut_es.store._settings_tables import column
from covonaut_es.store._write_errors import database_errors_typed

T = TypeVar("T")


class SQLSideTable:
    """A table beside the log in a SQL database, made when first used.

    Args:
        datastore: The database's eventsourcing datastore (reads).
        writing: Opens a transaction that commits (writes).
        table: The table's name, as SQL names it.
        create: The statements that create the table (and its indexes) if absent.
        found: A statement whose one row's one column says whether the table and its
            indexes exist, asked before ``create`` runs, which then runs only if not
            (PostgreSQL: DDL, even DDL that would change nothing, needs the table's
            owner, ADR 0117); by default, ``create`` always runs.
        placeholder: The driver's parameter placeholder.
        stored: A stream id as the table's column holds it.
        reading: Opens a cursor for reads that gives rows as tuples; by default, in a
            transaction of ``datastore`` that does not commit.
        retried: Wraps a function to call it again when its statements fail as the
            back end retries its log's (PostgreSQL: on a session ended); by default,
            called once.
        serialized: A statement that a transaction writing several rows runs first,
            so that two such writers never lock the same rows in two orders and
            deadlock (PostgreSQL: a lock on the table for the transaction); by
            default, none (SQLite has one writer at a time).
    """

    def __init__(
        self,
        datastore: Any,
        writing: Callable[[], Any],
        *,
        table: str,
        create: Sequence[str],
        found: str | None = None,
        placeholder: str,
        stored: Callable[[UUID], Any],
        reading: Callable[[], AbstractContextManager[Any]] | None = None,
        retried: Callable[[Callable[[], Any]], Callable[[], Any]] = lambda call: call,
        serialized: str | None = None,
    ) -> None:
        self._datastore = datastore
        self._writing = writing
        self._table = table
        self._create = create
        self._found = found
        self._p = placeholder
        self._stored = stored
        self._reading = reading or (lambda: datastore.transaction(commit=False))
        self._retried = retried
        self._serialized = serialized
        self._created = False

    def _run(self, call: Callable[[], T], unsaved: str) -> T:
        """What ``call`` (statements on this table) gives, retried as the back end
        retries a statement.

        Raises:
            StoreUnavailableError: Its database failed it, each time (the subclass
                StoreLockedError: another connection held the write lock).
        """
        with database_errors_typed(f"the store's table {self._table}", unsaved):
            found: T = self._retried(call)()
            return found

    def make(self) -> None:
        """Make the table if absent, once.

        Raises:
            StoreUnavailableError: The database failed it (StoreLockedError: another
                connection held the store's write lock for longer than the store waits;
                a read that first needs the table meets it too).
        """
        if self._created:
            return

        def create() -> None:
            made = False
            with self._writing() as cursor:
                if self._found is not None:
                    cursor.execute(self._found)
                    made = bool(column(cursor.fetchone(), 0, "found"))
                for statement in () if made else self._create:
                    cursor.execute(statement)
            self._made()

        # It may exist already: this process had not yet checked it, nor written its
        # first row.
        self._run(create, "it was not made ready for use, and nothing was written")
        self._created = True

    def _made(self) -> None:
        """What a new table needs once its statements ran (by default nothing)."""

    def _select(self, *statements: Any) -> list[list[Any]]:
        """The rows of each ``statement, parameters`` pair, read with one cursor."""
        self.make()

        def read() -> list[list[Any]]:
            found = []
            with self._reading() as cursor:
                for statement, parameters in zip(statements[::2], statements[1::2], strict=True):
                    cursor.execute(statement, parameters)
                    found.append(list(cursor.fetchall()))
            return found

        return self._run(read, "it was not read")


class SQLTrackedTable(SQLSideTable, ABC):
    """A side table made from the log, with one row more, its tracking row, holding the
    log position its rows were made to: made with the table, moved with each write of
    rows, and alone after a clear. A subclass supplies the statements of its rows.
    """

    @abstractmethod
    def _tracking_key(self) -> tuple[str, Any]:
        """The tracking row's key column, and its key there."""

    @abstractmethod
    def _add_tracking_row(self, cursor: Any) -> None:
        """Insert the tracking row at position 0, in ``cursor``'s transaction, unless
        the table holds it (another process made it first)."""

    def _made(self) -> None:
        # A transaction of its own, opened by its write: in SQLite one whose first
        # statement only read (the table existed) fails at its first write if another
        # process wrote meanwhile, where one opened by a write waits.
        with self._writing() as cursor:
            self._add_tracking_row(cursor)

    def _advance(self, before: int, after: int, statements: Sequence[tuple[str, Any]]) -> bool:
        """Move the tracking row from position ``before`` to ``after`` and run each
        ``statement, parameters`` pair, in one transaction; False, nothing written,
        when the tracking row is not at ``before``: another process moved it.

        Raises:
            StoreUnavailableError: Its database failed it, each time.
        """
        self.make()
        key_column, key = self._tracking_key()
        p = self._p

        # Retried whole: a first try that committed unanswered leaves the position
        # moved, and the second finds it so (False), as when another process moved it.
        def write() -> bool:
            with self._writing() as cursor:
                cursor.execute(
                    f"UPDATE {self._table} SET position = {p} "
                    f"WHERE {key_column} = {p} AND position = {p} RETURNING position",
                    (after, key, before),
                )
                if not cursor.fetchall():
                    return False  # nothing written yet: the transaction ends empty
                for statement, parameters in statements:
                    cursor.execute(statement, parameters)
            return True

        return self._run(write, f"its rows to log position {after} were not written")

    def clear(self) -> None:
        """Remove every row and go back to position 0.

        Raises:
            StoreUnavailableError: Its database failed it, each time.
        """
        self.make()

        def write() -> None:
            with self._writing() as cursor:
                cursor.execute(f"DELETE FROM {self._table}")
                self._add_tracking_row(cursor)

        self._run(write, "it was not cleared")


def sealed_row(cipher: Cipher | None, row: bytes) -> bytes:
    """A side table's row as stored: encrypted with the store's ``cipher``, if it has
    one (rows name threads and what they wait for)."""
    return row if cipher is None else cipher.encrypt(row)


def opened_row(
    cipher: Cipher | None, stored: object, decode: Callable[[bytes | memoryview], T]
) -> T | None:
    """What ``decode`` makes of a side table's row as stored (:func:`sealed_row`); None
    when it is no driver's bytes, or does not decrypt or decode: another writer spoiled
    it (the cipher's errors vary)."""
    opened = opened_rows(cipher, (stored,), decode)
    return None if opened is None else opened[0]


_DRIVER_BYTES = frozenset({bytes, memoryview})
"""The types a driver gives a side table's row in."""


def opened_rows(
    cipher: Cipher | None, stored: Sequence[object], decode: Callable[[bytes | memoryview], T]
) -> list[T] | None:
    """What ``decode`` makes of each of a page of rows, as :func:`opened_row` does, in
    one pass (a listing opens thousands); None when any cannot be opened."""
    if not {*map(type, stored)} <= _DRIVER_BYTES:
        return None
    rows = cast("Sequence[bytes | memoryview]", stored)
    try:
        if cipher is None:
            return [decode(row) for row in rows]
        return [decode(cipher.decrypt(bytes(row))) for row in rows]
    except Exception:
        return None
