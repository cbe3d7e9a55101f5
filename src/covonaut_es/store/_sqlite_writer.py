"""The connection a SQLite store's saves are written through (ADR 0024).

eventsourcing's SQLite datastore lends a connection from its pool for each transaction,
and opens its connections with a statement cache of one (``cached_statements=True``):
a save then parses its ``BEGIN``, inserts, head upsert and ``COMMIT`` again every time,
and takes the pool's locks to borrow and return the connection. That is almost half of
a save's time outside the disk's sync. The store's saves go through one connection of
their own instead, opened as the pool opens its connections but keeping its statements,
and used by one thread at a time. Reads and the other writes keep using the pool.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from eventsourcing.persistence import ConnectionPoolClosedError, InterfaceError
from eventsourcing.sqlite import (
    SQLITE3_DEFAULT_LOCK_TIMEOUT,
    SQLiteConnection,
    SQLiteCursor,
    SQLiteDatastore,
)

STATEMENT_CACHE_SIZE = 32
"""Statements the writing connection keeps parsed: a save uses five at most."""


class SQLiteWriter:
    """Writes a SQLite store's saves, one transaction at a time.

    Args:
        datastore: The store's datastore, whose file (and lock timeout) it writes to.
    """

    def __init__(self, datastore: SQLiteDatastore) -> None:
        self._datastore = datastore
        self._lock = threading.Lock()
        self._connection: SQLiteConnection | None = None

    @contextmanager
    def transaction(self) -> Iterator[SQLiteCursor]:
        """A cursor in a transaction, committed when the block ends (rolled back if it
        raises); errors come as eventsourcing's, as from the datastore's transactions.

        Raises:
            ConnectionPoolClosedError: The store is closed.
        """
        pool = self._datastore.pool
        if pool.is_sqlite_memory_mode:  # another connection would open another database
            with self._datastore.transaction(commit=True) as cursor:
                yield cursor
            return
        with self._lock:
            if pool.closed:
                raise ConnectionPoolClosedError
            if self._connection is None:
                self._connection = self._connect()
            with self._connection.transaction(commit=True) as cursor:
                yield cursor

    def _connect(self) -> SQLiteConnection:
        pool = self._datastore.pool
        try:
            connection = sqlite3.connect(
                pool.db_name,
                uri=True,
                check_same_thread=False,  # used under the lock, from any thread
                isolation_level=None,  # transactions begun explicitly, as the pool's
                cached_statements=STATEMENT_CACHE_SIZE,
                timeout=pool.lock_timeout or SQLITE3_DEFAULT_LOCK_TIMEOUT,
            )
        except sqlite3.Error as exc:
            raise InterfaceError(exc) from exc
        connection.row_factory = sqlite3.Row
        return SQLiteConnection(connection, max_age=None)

    def close(self) -> None:
        """Close the connection, if it was opened; a later transaction reopens it
        unless the store's pool is closed too."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
