"""A SQLite store's connections: each keeps its statements parsed, and its saves go
through one of its own (ADR 0024).

eventsourcing's SQLite datastore lends a connection from its pool for each transaction,
and opens its connections with a statement cache of one (``cached_statements=True``):
a save then parsed its ``BEGIN``, inserts, head upsert and ``COMMIT`` again every time,
and a restore its ``BEGIN``, two selects and ``ROLLBACK`` (a restore is one statement
now, :mod:`covonaut_es.store._thread_rows`). The store's pool opens its
connections with a cache instead, and its saves go through one more connection, kept
for them and used by one thread at a time, so that they skip the pool's locks too. A
restore's one statement skips them as well: the pool keeps a few connections for such
reads apart, lent without a lock (ADR 0086).

Closing the store closes no connection another thread is reading or writing through:
Python's ``sqlite3`` crashes the process (SIGSEGV) when a connection is closed under a
statement another thread is stepping, and eventsourcing's pool closes the connections in
use. Closing waits for them, ``CLOSE_WAIT`` seconds at most; those still in use then are
closed by the thread that used them, when it is done.
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote, urlsplit

from eventsourcing.persistence import (
    ConnectionPoolClosedError,
    ConnectionUnavailableError,
    InterfaceError,
)
from eventsourcing.sqlite import (
    SQLITE3_DEFAULT_LOCK_TIMEOUT,
    SQLiteConnection,
    SQLiteConnectionPool,
    SQLiteCursor,
    SQLiteDatastore,
    SQLiteTransaction,
)

from covonaut_es.errors import StoredRowError, StoreFileReplacedError
from covonaut_es.store._backends._sqlite_keys import KeyType

STATEMENT_CACHE_SIZE = 32
"""Statements each connection keeps parsed: a save uses five at most, a restore one."""

CLOSE_WAIT = 5.0
"""Seconds closing a store waits for the connections other threads use to be returned."""


class StoreFile:
    """The file a SQLite store opened, known by its device and inode from its first
    connection on, so that a write can tell the path now names another file (a backup
    restored with ``mv``) or none: its connections would go on writing into the old,
    unlinked one, and the writes would be lost.

    Args:
        path: The file's path.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._identity: tuple[int, int] | None = None

    def note(self) -> None:
        """Remember which file the path names, unless a connection did already."""
        if self._identity is None:
            found = os.stat(self.path)
            self._identity = (found.st_dev, found.st_ino)

    def check(self) -> None:
        """Raise unless the path still names the file the store opened (one stat).

        Raises:
            StoreFileReplacedError: Another file took its name, or it was deleted.
        """
        if self._identity is None:
            return
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            problem = "it was deleted"
        else:
            if (found.st_dev, found.st_ino) == self._identity:
                return
            problem = "another file took its name (moved or restored over it)"
        msg = (
            f"the SQLite file {self.path!r} was replaced while the store was open: "
            f"{problem}; nothing was read or written through it since: open the store "
            "again to use the file the path names now"
        )
        raise StoreFileReplacedError(msg)


class StatementKeepingPool(SQLiteConnectionPool):
    """eventsourcing's SQLite pool, its connections keeping their statements parsed,
    refusing any connection once the store's file was replaced, and closing none while
    another thread uses it; with connections of its own for one-statement reads
    (:meth:`read`).

    ``_create_connection``, ``_sqlite_conn``, ``_put_condition``, ``_in_use``, ``_pool``
    and ``_is_pool_full`` are eventsourcing's private names, checked against
    eventsourcing 9.5.6.

    Args:
        db_name: The database, as eventsourcing's pool takes it.
        lock_timeout: As eventsourcing's pool takes it.
        file: The database's file, if it is one (not in memory).
        tables_key: How the store's tables key streams (ADR 0074): the factory's choice
            for a new store, then what its events table declares.
    """

    def __init__(
        self, *, db_name: str, lock_timeout: int | None, file: str | None, tables_key: KeyType
    ) -> None:
        super().__init__(db_name=db_name, lock_timeout=lock_timeout)
        self.file = StoreFile(file) if file is not None else None
        self.tables_key = tables_key
        self._closing = False
        # The reading connections idle: a list, whose pop and append are atomic, so that
        # lending one takes no lock. Counted, idle or lent, under _put_condition.
        self._idle_readers: list[SQLiteConnection] = []
        self._readers = 0

    @property
    def closed(self) -> bool:
        """Whether the pool was closed: it lends no connection since."""
        return self._closing

    def get_connection(
        self, timeout: float | None = None, *, is_writer: bool | None = None
    ) -> SQLiteConnection:
        self._refuse_if_closed()  # before the file's stat, and the pool's locks
        if self.file is not None:  # a reader too would go on reading the old file
            self.file.check()
        return super().get_connection(timeout, is_writer=is_writer)

    def read(self, statement: str, params: Sequence[Any] | Mapping[str, Any]) -> list[Any]:
        """Every row of one statement, read in a transaction of its own: no ``BEGIN``
        and ``ROLLBACK`` around it (a connection in autocommit mode).

        A file's reads go through connections kept for them, at most ``pool_size``,
        lent and taken back without a lock: the pool's locks and conditions cost a
        short thread's restore about a seventh of its time. A read finding none idle
        while that many are lent goes through the pool; so does a database in memory,
        whose reads the pool keeps apart from its writes.

        Raises:
            ConnectionPoolClosedError: The store is closed.
            StoreFileReplacedError: The store's file was replaced or deleted.
            sqlite3.Error: The statement failed.
        """
        self._refuse_if_closed()
        reader = self._lent_reader()
        if reader is not None:
            try:
                return reader._sqlite_conn.execute(statement, params).fetchall()
            finally:
                self._idle_readers.append(reader)
                if self._closing:  # close() may have closed the idle ones before it
                    self._close_idle_readers()
        connection = super().get_connection(is_writer=False)
        try:
            return connection._sqlite_conn.execute(statement, params).fetchall()
        finally:
            self.put_connection(connection)

    def _lent_reader(self) -> SQLiteConnection | None:
        """An idle reading connection of the file, or a new one unless ``pool_size`` are
        open already; None in memory or at that limit.

        Raises:
            StoreFileReplacedError: The store's file was replaced or deleted.
        """
        if self.file is None:
            return None
        self.file.check()
        try:
            return self._idle_readers.pop()
        except IndexError:
            pass
        with self._put_condition:
            if self._readers >= self.pool_size:
                return None
            connection = self._create_connection()  # refused once closing
            self._readers += 1
            return connection

    def _close_idle_readers(self) -> None:
        while True:
            try:
                connection = self._idle_readers.pop()
            except IndexError:
                return
            connection.close()
            with self._put_condition:
                self._readers -= 1
                self._put_condition.notify_all()

    def put_connection(self, conn: SQLiteConnection) -> None:
        super().put_connection(conn)  # closed there once the pool is closing
        if self._closing:  # close() waits for it, as may threads wanting one: wake all
            with self._put_condition:
                self._put_condition.notify_all()

    @property
    def _is_pool_full(self) -> bool:
        # eventsourcing's put_connection closes, rather than keeps, a connection
        # returned to a full pool: once closing, the pool is full.
        return self._closing or super()._is_pool_full

    def close(self) -> None:
        """Lend no more connections; close those idle, and those in use once returned
        (reading connections too), waiting ``CLOSE_WAIT`` seconds at most: a connection
        still in use then is closed by the thread using it, when it returns it, never
        under its statement.

        eventsourcing's ``close`` is not called: it would close the connections in use.
        """
        with self._put_condition:
            if self._closing:
                return
            self._closing = True
            while self._pool:
                self._pool.popleft().close()
            self._close_idle_readers()
            self._put_condition.wait_for(
                lambda: not self._in_use and not self._readers, timeout=CLOSE_WAIT
            )

    def _refuse_if_closed(self) -> None:
        if self._closing:
            raise ConnectionPoolClosedError

    def _create_connection(self) -> SQLiteConnection:
        # Under the lock close() takes: a thread that asked before close() began gets
        # none once it has.
        self._refuse_if_closed()
        connection = _connect(self, max_age=self.max_age)
        if self.file is not None:
            self.file.note()
        if not self.is_sqlite_memory_mode and not self.is_journal_mode_wal:
            # As eventsourcing's pool does: the file is put in WAL mode once.
            timeout = self.lock_timeout or SQLITE3_DEFAULT_LOCK_TIMEOUT
            if _switch_to_wal(connection._sqlite_conn, timeout=timeout):
                self.journal_mode_was_changed_to_wal = True
            self.is_journal_mode_wal = True
        return connection


def _switch_to_wal(connection: sqlite3.Connection, *, timeout: float) -> bool:
    """Put ``connection``'s file in WAL mode, trying for ``timeout`` seconds; say
    whether this connection is the one that switched it.

    The switch needs the file's exclusive lock. When connections of several processes
    ask for it at once, each holding the shared lock it read the mode under, SQLite
    answers "database is locked" straight away instead of waiting (waiting could
    deadlock), so the loser asks again, after a pause of a few milliseconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            (mode,) = connection.execute("PRAGMA journal_mode").fetchone()
            if mode.lower() == "wal":
                return False
            (mode,) = connection.execute("PRAGMA journal_mode=WAL").fetchone()
            return bool(mode.lower() == "wal")
        except sqlite3.OperationalError as exc:
            busy = exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
            if not busy or time.monotonic() >= deadline:
                raise
        time.sleep(random.uniform(0.001, 0.01))


def _connect(pool: SQLiteConnectionPool, *, max_age: float | None) -> SQLiteConnection:
    """A connection to ``pool``'s database, opened as eventsourcing's pool opens one but
    keeping its statements parsed (closed after ``max_age`` seconds, if given)."""
    try:
        connection = sqlite3.connect(
            pool.db_name,
            uri=True,
            check_same_thread=False,  # used by one thread at a time, any thread
            isolation_level=None,  # transactions begun explicitly, as eventsourcing's
            cached_statements=STATEMENT_CACHE_SIZE,
            timeout=pool.lock_timeout or SQLITE3_DEFAULT_LOCK_TIMEOUT,
        )
    except sqlite3.Error as exc:
        raise InterfaceError(exc) from exc
    connection.row_factory = sqlite3.Row
    connection.text_factory = stored_text
    return SQLiteConnection(connection, max_age=max_age)


def stored_text(value: bytes) -> str:
    """A TEXT value read from the store, which the library writes as UTF-8 only.

    sqlite3's own decoding fails with a bare ``OperationalError`` on bytes that are no
    UTF-8, which another writer can store (``CAST(state AS TEXT)``), and which then
    escaped every read of the thread, a listing, and ``verify``.

    Raises:
        StoredRowError: ``value`` is not UTF-8 (not echoed: it may be a payload).
    """
    try:
        return value.decode()
    except UnicodeDecodeError as exc:
        msg = (
            f"a stored text value of {len(value)} bytes is not UTF-8 ({exc.reason} at byte "
            f"{exc.start}): a row was altered behind the library; restore it from a backup"
        )
        raise StoredRowError(msg) from None


class SQLiteWriter:
    """Writes a SQLite store's saves, one transaction at a time.

    Args:
        datastore: The store's datastore, whose file (and lock timeout) it writes to.
    """

    def __init__(self, datastore: SQLiteDatastore) -> None:
        self._datastore = datastore
        self._lock = threading.Lock()
        self._closing = False
        pool = datastore.pool
        # Opened with the store, as the pool's connections are, so that saves go to the
        # file the store opened even if it is replaced or made read-only before them;
        # and read from at once, as the pool's first connection is, which attaches it to
        # that file's write-ahead log too.
        self._connection: SQLiteConnection | None = None
        self._synchronous = 2  # FULL, SQLite's default; the file's own setting below
        if not pool.is_sqlite_memory_mode:
            self._connection = _connect(pool, max_age=None)
            self._connection._sqlite_conn.execute("PRAGMA journal_mode").fetchone()
            (self._synchronous,) = self._connection._sqlite_conn.execute(
                "PRAGMA synchronous"
            ).fetchone()

    @contextmanager
    def transaction(self, *, synced: bool = True) -> Iterator[SQLiteCursor]:
        """A cursor in a transaction, committed when the block ends (rolled back if it
        raises); errors come as eventsourcing's, as from the datastore's transactions.

        Args:
            synced: Whether the commit waits for the disk (the file's ``synchronous``
                setting, ``FULL`` unless changed). When not, the commit is visible to
                every connection at once, and durable once a later synced commit of any
                connection to the file (or a checkpoint) syncs the write-ahead log it was
                appended to: in WAL mode, ``synchronous=NORMAL`` risks losing recent
                commits at a power loss, never the file's integrity.

        Raises:
            ConnectionPoolClosedError: The store is closed.
            StoreFileReplacedError: The store's file was replaced or deleted.
            ConnectionUnavailableError: Another thread's save held the connection for
                longer than a save waits for the file's lock (typed as
                ``StoreLockedError`` by :func:`database_errors_typed`).
        """
        with self._held(synced=synced) as connection:
            if connection is None:  # in memory: another connection, another database
                with self._datastore.transaction(commit=True) as cursor:
                    yield cursor
                return
            # What eventsourcing's connection.transaction() does, without one more
            # generator: it begins, then commits, or rolls back and raises its error.
            with SQLiteTransaction(connection, commit=True) as cursor, cursor:
                yield cursor

    @contextmanager
    def statement(self) -> Iterator[SQLiteCursor]:
        """A cursor for one read, on the saves' connection, in a transaction of its own:
        no ``BEGIN`` and ``ROLLBACK`` around it. The connection's pages are those its
        saves wrote, where a pooled connection would read them again after each save
        of another connection (a run's lease checks read the token between its saves).
        Errors and refusals as :meth:`transaction`'s; it waits for a save in flight.
        """
        with self._held() as connection:
            if connection is None:
                with self._datastore.transaction(commit=False) as cursor:
                    yield cursor
                return
            with _Statement(connection) as cursor, cursor:
                yield cursor

    @contextmanager
    def _held(self, *, synced: bool = True) -> Iterator[SQLiteConnection | None]:
        """The saves' connection, held by this thread alone, in a store still open on
        the file it opened (its commits synced or not, see :meth:`transaction`); None
        for a database in memory."""
        pool = self._datastore.pool
        if pool.is_sqlite_memory_mode:
            yield None
            return
        # As long as the save holding it may wait for the file's lock (SQLite's busy
        # timeout), not the pool's shorter wait for a connection: saves from threads of
        # one process wait for one another as one after another would.
        if not self._lock.acquire(timeout=pool.lock_timeout or SQLITE3_DEFAULT_LOCK_TIMEOUT):
            msg = "Timed out waiting for return of writer"  # the pool's words
            raise ConnectionUnavailableError(msg)
        try:
            connection = self._connection
            if connection is None or self._closing or pool.closed:
                raise ConnectionPoolClosedError
            if isinstance(pool, StatementKeepingPool) and pool.file is not None:
                pool.file.check()
            sqlite_conn = connection._sqlite_conn
            if not synced:  # set, and set back, outside any transaction: SQLite says so
                sqlite_conn.execute("PRAGMA synchronous = NORMAL")
            try:
                yield connection
            finally:
                if sqlite_conn.in_transaction:
                    # Interrupted (Ctrl-C) just after eventsourcing's BEGIN, before its
                    # block rolls back on errors: else every later save fails to begin.
                    connection.rollback()
                if not synced:
                    sqlite_conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        finally:
            if self._closing:  # close() gave up waiting for this save
                self._close_connection()
            self._lock.release()

    def close(self) -> None:
        """Close the connection once no save uses it, waiting ``CLOSE_WAIT`` seconds at
        most, else the save closes it when it ends; a later transaction raises
        ``ConnectionPoolClosedError``."""
        self._closing = True  # before waiting: a save ending meanwhile sees it
        if self._lock.acquire(timeout=CLOSE_WAIT):
            try:
                self._close_connection()
            finally:
                self._lock.release()

    def _close_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class _Statement(SQLiteTransaction):
    """eventsourcing's transaction of a connection in autocommit mode, without its
    ``BEGIN``: the one statement run in it is read in a transaction of its own. Its
    rollback, when nothing began, does nothing; its errors are eventsourcing's."""

    def __enter__(self) -> SQLiteCursor:
        return self.connection.cursor()


def sqlite_file(db_name: str) -> str | None:
    """The file of a SQLite database name (a path or a ``file:`` URI); None for an
    in-memory database."""
    if db_name == ":memory:" or "mode=memory" in db_name:
        return None
    if db_name.startswith("file:"):
        return unquote(urlsplit(db_name).path)
    return db_name
