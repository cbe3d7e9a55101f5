"""One-statement reads of a PostgreSQL store on connections kept for them (ADR 0086).

eventsourcing lends a connection of its pool (psycopg_pool's) for each read, through a
context manager that opens the pool, registers type adapters and translates errors: in
all, about a ninth of a short thread's restore. A store's recorder reads a thread's rows
on a few connections of its own instead, lent and taken back without a lock.

Also the statement reading the log's end with the last position its sequence issued
(ADR 0113), through the pool as eventsourcing's read of the end is.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from eventsourcing.postgres import PostgresDatastore
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

OPEN_AGAIN_AFTER = 5.0
"""Seconds reads go through the pool, opening no connection of their own, after one
failed to open (the server refusing more sessions, a password function failing)."""


class KeptReads:
    """Reads of one statement each, on at most as many connections of their own as the
    store's pool keeps (``POSTGRES_POOL_SIZE``), opened as a read needs one and closed
    with the store.

    A read that none of them can make, because every one is lent, the store is closed,
    none could be opened (for :data:`OPEN_AGAIN_AFTER` seconds after a failure), or the
    read failed on it (its session ended, say), is made through the pool, whose errors
    are eventsourcing's, so a read raises what it raised before (a statement that fails
    on both is run twice); a connection whose session ended is closed, and another
    opened for a later read.

    Args:
        datastore: The store's datastore, whose connection parameters they use.
    """

    def __init__(self, datastore: PostgresDatastore) -> None:
        self._datastore = datastore
        # Idle ones: a list, whose pop and append are atomic, so that lending one takes
        # no lock. Counted, idle or lent, under _lock.
        self._idle: list[psycopg.Connection[Any]] = []
        self._open = 0
        self._lock = threading.Lock()
        self._store_closed = False
        self._open_again_at = 0.0  # time.monotonic() after a connection failed to open

    def rows(
        self, statement: str, params: Sequence[Any] | Mapping[str, Any], *, binary: bool = False
    ) -> list[tuple[Any, ...]]:
        """Every row of ``statement`` (prepared), read in a transaction of its own.

        Args:
            statement: One statement.
            params: Its parameters.
            binary: Whether the rows come in binary (a long thread's snapshot is hundreds
                of kilobytes, which text sends as hex for the client to parse).

        Raises:
            eventsourcing.persistence.PersistenceError: As eventsourcing's read raises.
        """
        connection = self._lent()
        if connection is not None:
            try:
                with connection.cursor(row_factory=tuple_row) as cursor:
                    cursor.execute(statement, params, prepare=True, binary=binary)
                    return cursor.fetchall()
            except psycopg.Error:
                pass  # read again through the pool, which raises as eventsourcing does
            finally:
                self._take_back(connection)
        with (
            self._datastore.get_connection() as pooled,
            pooled.cursor(row_factory=tuple_row) as cursor,
        ):
            cursor.execute(statement, params, prepare=True, binary=binary)
            return cursor.fetchall()

    def close(self) -> None:
        """Close the idle connections, and each lent one once its read ends; reads from
        now on go through the pool (closed with the store, it refuses them)."""
        self._store_closed = True
        self._close_idle()

    def _lent(self) -> psycopg.Connection[Any] | None:
        """An idle connection, or a new one while fewer than the limit are open; None
        when the store is closed, the limit is reached or no connection can be opened."""
        if self._store_closed:
            return None
        try:
            return self._idle.pop()
        except IndexError:
            pass
        pool = self._datastore.pool
        with self._lock:
            if (
                self._store_closed
                or self._open >= pool.min_size
                or time.monotonic() < self._open_again_at
            ):
                return None
            self._open += 1
        try:
            given = pool.kwargs  # psycopg_pool takes a mapping, or a function giving one
            kwargs = dict((given() if callable(given) else given) or {})
            if pool.get_password_func is not None:  # as eventsourcing's pool connects
                kwargs["password"] = pool.get_password_func()
            kwargs.setdefault("connect_timeout", max(2, math.ceil(pool.timeout)))
            return psycopg.connect(**kwargs, autocommit=True)
        except Exception:  # the password function's too: the pool may still serve the read
            self._open_again_at = time.monotonic() + OPEN_AGAIN_AFTER
            self._forget()
            return None
        except BaseException:
            self._forget()
            raise

    def _take_back(self, connection: psycopg.Connection[Any]) -> None:
        usable = (
            not connection.broken and connection.info.transaction_status is TransactionStatus.IDLE
        )
        if not usable:
            connection.close()
            self._forget()
            return
        self._idle.append(connection)
        if self._store_closed:  # close() may have closed the idle ones before this one
            self._close_idle()

    def _close_idle(self) -> None:
        while True:
            try:
                connection = self._idle.pop()
            except IndexError:
                return
            connection.close()
            self._forget()

    def _forget(self) -> None:
        with self._lock:
            self._open -= 1


def log_end_sql(events: str) -> str:
    """The statement reading the newest position of the log ``events`` (its quoted
    name, the statement's one parameter) and the last position its column's sequence
    issued: NULL, which goes unchecked, when the store's role may not read the sequence
    (or the column has none), and when the sequence issued nothing since it was set
    (``setval(..., false)``, ``ALTER SEQUENCE ... RESTART``: an operator's repair, whose
    next position ``pg_sequence_last_value`` does not tell). One statement, as
    eventsourcing's read of the newest position is: a follower reads the end often."""
    return (
        "SELECT max(notification_id) AS newest, (SELECT CASE WHEN has_sequence_privilege("
        "s, 'SELECT,USAGE') THEN pg_sequence_last_value(s) END FROM (SELECT "
        "pg_get_serial_sequence(%s, 'notification_id')::regclass AS s) AS sequence) AS "
        f"issued FROM {events}"
    )
