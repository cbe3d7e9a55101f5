"""Run leases and the worker registry of a PostgreSQL store: session-level advisory
locks on a connection of their own, and a table of workers (ADR 0016)."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar
from uuid import UUID

import msgspec

from covonaut_es.domain import thread_aggregate_id
from covonaut_es.errors import ConfigurationError, StoreClosedError, StoreUnavailableError
from covonaut_es.store._leases import (
    STALE_AFTER,
    CallRunning,
    Lease,
    LeaseBackend,
    WorkerRecord,
    newer_lease,
)
from covonaut_es.store._write_errors import database_errors_typed, not_stored

T = TypeVar("T")

WORKERS_TABLE = "covonaut_workers"
"""The worker registry's table, in the store's schema."""

# The registry is named with the store's schema ("{workers}" below), never found
# through the role's search_path, where a same-named table of another schema would be
# read and written instead.
_WORKERS_FOUND = (
    "SELECT c.oid IS NOT NULL, EXISTS (SELECT FROM pg_catalog.pg_attribute a "
    "WHERE a.attrelid = c.oid AND a.attname = 'calls' AND NOT a.attisdropped) "
    "FROM (SELECT to_regclass(%s) AS oid) AS c"
)
"""Whether the registry exists, and whether it has the column of the calls a worker runs
(added later), read from the catalog: a role that does not own the table may not
send its DDL, even one that would change nothing (ADR 0117)."""
_ADD_CALLS = "ALTER TABLE {workers} ADD COLUMN IF NOT EXISTS calls TEXT NOT NULL DEFAULT '[]'"
_CREATE_WORKERS = (
    "SELECT pg_advisory_xact_lock(hashtext('covonaut_workers')); "
    "CREATE TABLE IF NOT EXISTS {workers} (worker_id TEXT PRIMARY KEY, "
    "host TEXT NOT NULL, pid INTEGER NOT NULL, started_at TIMESTAMPTZ NOT NULL, "
    "heartbeat_at TIMESTAMPTZ NOT NULL, threads TEXT NOT NULL); " + _ADD_CALLS
)
"""Make the worker registry ``{workers}`` (made by the open that makes a store's
tables, or by the first worker of an application of the user's own). Workers starting
at once on a store no worker ran on make the table once: IF NOT EXISTS does not hold
against another session's creation under way (the loser fails on pg_type's unique
index). Sent as one query, the statements are one transaction, which holds the lock to
its end."""
_UPSERT_WORKER = (
    "INSERT INTO {workers} "
    "(worker_id, host, pid, started_at, heartbeat_at, threads, calls) "
    "VALUES (%s, %s, %s, %s, now(), %s, %s) ON CONFLICT (worker_id) DO UPDATE SET "
    "host = excluded.host, pid = excluded.pid, started_at = excluded.started_at, "
    "heartbeat_at = now(), threads = excluded.threads, calls = excluded.calls "
    "WHERE %s OR {workers}.heartbeat_at <= now() - %s RETURNING 1"
)
"""Write a worker's row: a new one, this back end's own (the seventh parameter true),
or one whose heartbeat is stale; no row returned when a live worker's was kept."""
_SELECT_WORKERS = (
    "SELECT worker_id, host, pid, started_at, heartbeat_at, threads, calls "
    "FROM {workers} WHERE heartbeat_at > now() - %s "
    "ORDER BY started_at, worker_id"
)
_WITHDRAW_WORKER = (
    "WITH gone AS (DELETE FROM {workers} WHERE worker_id = %s "
    "AND (%s OR heartbeat_at <= now() - %s) RETURNING 1) "
    "SELECT EXISTS (SELECT FROM {workers} WHERE worker_id = %s) AND NOT EXISTS (SELECT FROM gone)"
)
"""Remove a worker's row: this back end's own (the second parameter true), or one whose
heartbeat is stale; true when a live worker's row was kept (the outer query sees the
table as before the delete)."""
_HOLDER = (
    "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.database = "
    "(SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND l.classid = %s AND l.objid = %s AND l.objsubid = 1"
)
SESSION_HOLDS_LOCK = (
    "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = %s "
    "AND classid = %s AND objid = %s AND objsubid = 1"
)
"""A row if the backend process ``pid`` (a session) holds the advisory lock whose
:func:`lock_ids` follow, else none: the one test of a lock's holder."""
# A lease taken and its token recorded in one statement (one round trip, one commit):
# the insert runs only once the lock is taken. A session-level lock outlives a failed
# statement, so a failure lets the lock go (``_take``).
_TAKE = (
    "WITH taken AS (SELECT pg_try_advisory_lock(%s) AS locked), "
    "advanced AS (INSERT INTO {table} AS l (originator_id, token) "
    "SELECT %s, 1 FROM taken WHERE locked "
    "ON CONFLICT (originator_id) DO UPDATE SET token = l.token + 1 RETURNING token) "
    "SELECT (SELECT locked FROM taken), (SELECT token FROM advanced)"
)
# A fenced lease's check before a tool call, in one round trip on its own session.
_STANDS = (
    "SELECT (" + SESSION_HOLDS_LOCK + "), (SELECT token FROM {table} WHERE originator_id = %s)"
)
_APPLICATION_PREFIX = "covonaut-es "
_KEEPALIVES = (
    "SET tcp_keepalives_idle = 10",
    "SET tcp_keepalives_interval = 5",
    "SET tcp_keepalives_count = 6",
)


class PostgresLeases(LeaseBackend):
    """Leases of a PostgreSQL store: session-level advisory locks on one connection of
    their own, named after the holder (``application_name``) so others can tell who
    holds a thread. TCP keepalives, set on both ends of the connection, make the server
    notice a holder whose machine vanished, and drop its locks, within about 40 s.

    The locks live and die with that connection's session: when it ends (a server
    restart, a failover, ``pg_terminate_backend``, an idle timeout), every lease taken
    on it is lost, and stays lost. A new connection is opened for leases taken later
    only, never in place of the one a held lease was taken on.

    A lock's key comes from the thread's stream id as the store keeps it (keyed in an
    encrypted store, ``stored`` maps a domain id to it).

    The tokens (ADR 0025) are rows of ``token_table`` (the store's lease table, quoted
    with its schema; None for an application of the user's own, which keeps none),
    written and read on the lease connection itself: a lease is taken and its token
    recorded in one statement, and a check reads the lock and the token in one. The
    worker registry is ``workers_table``, quoted with its schema too. ``store_tables``
    names the store's events table and its schema: stores in one database differ by them.
    """

    def __init__(
        self,
        holder: str,
        connect_kwargs: dict[str, Any],
        token_table: str | None,
        stored: Callable[[UUID], UUID],
        workers_table: str,
        store_tables: str,
    ) -> None:
        super().__init__(holder, None)
        self._token_table = token_table
        self._workers = workers_table
        self._stored = stored
        # The lease connection names itself after the holder, whatever the URL named
        # the store's own sessions: runners refused read the holder from it.
        self._kwargs = {
            k: v for k, v in connect_kwargs.items() if k not in ("row_factory", "application_name")
        }
        server = (
            f"postgresql:{self._kwargs.get('host')}:{self._kwargs.get('port')}/"
            f"{self._kwargs.get('dbname')}"
        )
        self._server, self._store_tables = server, store_tables
        role = self._kwargs.get("user")
        shown = server if role is None else f"{server}, role {role!r}"
        self._where = f"the connection for run leases and the worker registry ({shown})"
        self._connection: Any = None
        self._sessions: dict[str, Any] = {}  # the connection each held lease was taken on
        self._workers_table_ready = False
        self._published: set[str] = set()  # the worker ids of the rows this back end wrote
        self._connect_lock = threading.Lock()

    def _conn(self) -> Any:
        with self._connect_lock:
            if self._shut:  # a back end closed connects no more
                msg = f"the store was closed: its run leases connect no more ({self._server})"
                raise StoreClosedError(msg)
            if self._connection is None or self._connection.closed or self._connection.broken:
                import psycopg

                connection = None
                try:
                    connection = psycopg.connect(
                        **{"connect_timeout": _CONNECT_TIMEOUT, **self._kwargs},
                        autocommit=True,
                        application_name=self._application_name(),
                        keepalives=1,
                        keepalives_idle=10,
                        keepalives_interval=5,
                        keepalives_count=6,
                    )
                    # The server's side: drop the session, and its locks, of a vanished
                    # client.
                    for setting in _KEEPALIVES:
                        connection.execute(setting)
                except psycopg.Error as exc:
                    if connection is not None:  # its session ended as it was set up
                        connection.close()
                    msg = f"cannot connect to PostgreSQL for run leases ({self._server}): {exc}"
                    raise StoreUnavailableError(msg) from exc
                # A store left unclosed still closes its lease connection when collected.
                weakref.finalize(self, connection.close)
                self._connection = connection
            return self._connection

    def _named(self) -> str:
        """The database as its server names it: its cluster's system identifier, when
        the server started, and its own oid, whatever host name, address or socket the
        URL reaches it by, with the store's schema and events table; the URL's host,
        port and database where the server does not tell its identifier."""
        import psycopg

        connection = self._conn()
        try:
            system, started, oid = connection.execute(_IDENTITY).fetchone()
        except (psycopg.errors.InsufficientPrivilege, psycopg.errors.UndefinedFunction):
            return f"{self._server}/{self._store_tables}"
        except psycopg.Error as exc:
            msg = f"cannot name the PostgreSQL database of run leases ({self._server}): {exc}"
            raise StoreUnavailableError(msg) from exc
        return f"postgresql:{system}@{started.isoformat()}/{oid}/{self._store_tables}"

    def _application_name(self) -> str:
        # PostgreSQL keeps 63 bytes of it.
        encoded = (_APPLICATION_PREFIX + self.holder).encode()[:63]
        return encoded.decode(errors="ignore")

    def rename(self, holder: str) -> None:
        super().rename(holder)
        with self._connect_lock:
            unconnected = self._connection is None or self._connection.closed
        if not unconnected:  # else the next connection is made under the new name
            self._execute(
                "SELECT set_config('application_name', %s, false)",
                (self._application_name(),),
                f"the lease connection was not renamed {holder!r}",
            )

    def _execute(self, query: str, params: tuple[Any, ...] | None, unsaved: str) -> tuple[Any, Any]:
        """Run a query on the lease connection (every query of this class but the
        release of a lock, which belongs to its own session): the connection and its
        cursor. A session that ended unnoticed (nothing had asked it since) is found
        dead here: the query runs once more on a new connection, which serves the
        leases taken from now on; those taken on the old one stay lost.

        Args:
            query: The query.
            params: Its parameters.
            unsaved: What did not happen if it fails, as a message says it.

        Raises:
            StoreUnavailableError: The query failed on a live connection (a timeout),
                or on the new one too; a subclass, or ReadOnlyStoreError, as
                :func:`~covonaut_es.store._write_errors.database_errors_typed` tells.
        """
        import psycopg

        with database_errors_typed(self._where, unsaved):
            connection = self._conn()
            try:
                return connection, connection.execute(query, params)
            except psycopg.OperationalError:
                if not (connection.broken or connection.closed):
                    raise
            connection = self._conn()
            return connection, connection.execute(query, params)

    def _try_lock(self, thread_id: str) -> bool:
        connection, row = self._execute(
            "SELECT pg_try_advisory_lock(%s)",
            (_key(self._stream(thread_id)),),
            f"the run lease of thread {thread_id!r} was not taken",
        )
        taken = bool(row.fetchone()[0])
        if taken:
            with self._lock:
                self._sessions[thread_id] = connection
        return taken

    def _take(self, thread_id: str) -> int | None:
        if self._token_table is None:
            return super()._take(thread_id)
        stream = self._stream(thread_id)
        try:
            connection, row = self._execute(
                _TAKE.format(table=self._token_table),
                (_key(stream), stream),
                f"the run lease of thread {thread_id!r} was not taken",
            )
        except Exception:
            with contextlib.suppress(Exception):  # not held, or its session is gone
                self._conn().execute("SELECT pg_advisory_unlock(%s)", (_key(stream),))
            raise
        locked, token = row.fetchone()
        if not locked:
            return None
        if token is None:  # a trigger dropped the token's row: the lease is not recorded
            connection.execute("SELECT pg_advisory_unlock(%s)", (_key(stream),))
            raise not_stored(self._token_table, "0 rows", 1)
        with self._lock:
            self._sessions[thread_id] = connection
        return int(token)

    def _unlock(self, thread_id: str) -> None:
        with self._lock:
            connection = self._sessions.pop(thread_id, None)
        if connection is None or connection.closed or connection.broken:
            return  # the session ended, and its locks with it
        connection.execute("SELECT pg_advisory_unlock(%s)", (_key(self._stream(thread_id)),))

    def _stream(self, thread_id: str) -> UUID:
        return self._stored(thread_aggregate_id(thread_id))

    def _session_of(self, thread_id: str) -> int:
        with self._lock:
            connection = self._sessions.get(thread_id)
        return 0 if connection is None else int(connection.info.backend_pid)

    def _problem(self, lease: Lease, *, in_save: bool) -> str | None:
        if in_save or not lease.fenced or self._token_table is None:
            return super()._problem(lease, in_save=in_save)
        stream = self._stream(lease.thread_id)
        query = _STANDS.format(table=self._token_table)
        row = self._asked(lease.thread_id, query, (*lock_ids(stream), stream))
        if isinstance(row, str):
            return row
        holds, token = row if row is not None else (False, None)
        return newer_lease(lease, token) if holds else _NOT_HELD

    def _lock_problem(self, thread_id: str, *, in_save: bool) -> str | None:
        if in_save:  # the save itself checks that the session holds the lock
            session = self._session(thread_id)
            return session if isinstance(session, str) else None
        row = self._asked(thread_id, SESSION_HOLDS_LOCK, lock_ids(self._stream(thread_id)))
        if isinstance(row, str):
            return row
        return None if row is not None and row[0] else _NOT_HELD

    def _asked(
        self, thread_id: str, query: str, params: tuple[Any, ...]
    ) -> tuple[Any, ...] | str | None:
        """The row ``query`` gives on the session holding the thread's lock (None: no
        row), or why no session holds it (a string); the session's backend pid is the
        query's first parameter, ``params`` the rest."""
        session = self._session(thread_id)
        if isinstance(session, str):
            return session
        try:
            pid = session.info.backend_pid
            row: tuple[Any, ...] | None = session.execute(query, (pid, *params)).fetchone()
        except Exception as exc:  # psycopg's errors of a dead session vary
            return f"its database session ended ({type(exc).__name__}: {exc})"
        return row

    def _session(self, thread_id: str) -> Any:
        """The live connection whose session took the thread's lock, or why there is
        none (a string)."""
        with self._lock:
            connection = self._sessions.get(thread_id)
        if connection is None:
            return "it was never taken on a connection"
        if connection.broken or connection.closed:
            return "its database session ended"
        return connection

    def holder_of(self, thread_id: str) -> str | None:
        _, cursor = self._execute(
            _HOLDER, lock_ids(self._stream(thread_id)), "the thread's runner was not read"
        )
        rows = cursor.fetchall()
        names = [str(row[0]) for row in rows]
        return names[0].removeprefix(_APPLICATION_PREFIX) if names else None

    def _workers_found(self) -> bool:
        """Whether the worker registry exists, adding the column of its calls to a
        table made before workers reported them (only then: that needs its owner)."""
        if self._workers_table_ready:
            return True
        _, cursor = self._execute(_WORKERS_FOUND, (self._workers,), _UNREAD)
        exists, has_calls = cursor.fetchone()
        if exists and not has_calls:
            self._execute(_ADD_CALLS.format(workers=self._workers), None, _UNRECORDED)
        self._workers_table_ready = bool(exists)
        return self._workers_table_ready

    def publish(self, record: WorkerRecord) -> None:
        if not self._workers_found():
            # several statements: no parameters
            self._execute(_CREATE_WORKERS.format(workers=self._workers), None, _UNRECORDED)
            self._workers_table_ready = True
        _, cursor = self._execute(
            _UPSERT_WORKER.format(workers=self._workers),
            (
                record.worker_id,
                record.host,
                record.pid,
                record.started_at,
                msgspec.json.encode(record.threads).decode(),
                msgspec.json.encode(record.calls).decode(),
                record.worker_id in self._published,
                STALE_AFTER,
            ),
            _UNRECORDED,
        )
        if cursor.fetchone() is None:
            msg = f"worker id {record.worker_id!r} is taken by a live worker: choose another"
            raise ConfigurationError(msg)
        self._published.add(record.worker_id)

    def withdraw(self, worker_id: str) -> None:
        if not self._workers_found():
            return  # no worker ever ran here
        own = worker_id in self._published
        _, cursor = self._execute(
            _WITHDRAW_WORKER.format(workers=self._workers),
            (worker_id, own, STALE_AFTER, worker_id),
            f"worker {worker_id!r} was not withdrawn",
        )
        self._published.discard(worker_id)
        if cursor.fetchone()[0]:
            msg = (
                f"worker {worker_id!r} is live (its heartbeat is fresh, written by another "
                "store): only the store that published its record withdraws it (nothing "
                "was removed)"
            )
            raise ConfigurationError(msg)

    def workers(self) -> tuple[WorkerRecord, ...]:
        if not self._workers_found():
            return ()  # no worker ever ran here: reading creates no table
        _, cursor = self._execute(
            _SELECT_WORKERS.format(workers=self._workers), (STALE_AFTER,), _UNREAD
        )
        rows = cursor.fetchall()
        return tuple(
            WorkerRecord(
                worker_id=row[0],
                host=row[1],
                pid=row[2],
                started_at=row[3],
                heartbeat_at=row[4],
                threads=_decoded(row[5], tuple[str, ...]),
                calls=_decoded(row[6], tuple[CallRunning, ...]),
            )
            for row in rows
        )

    def close(self) -> None:
        super().close()
        with self._connect_lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None


_IDENTITY = (
    "SELECT s.system_identifier, pg_catalog.pg_postmaster_start_time(), d.oid "
    "FROM pg_catalog.pg_control_system() AS s, pg_catalog.pg_database AS d "
    "WHERE d.datname = pg_catalog.current_database()"
)
"""The cluster's identifier, when its server started (a copy of the cluster keeps the
identifier), and the database's oid: together, the database, however it is reached.
Each name is qualified: a role's search_path may put a function of its own first."""

_CONNECT_TIMEOUT = 10
"""Seconds the lease connection waits to connect, unless the URL says otherwise: a
server that does not answer fails a lease, or the naming of its database, in time."""

_NOT_HELD = "its database session no longer holds the lock"
_UNREAD = "the worker registry was not read"
_UNRECORDED = "the worker was not recorded in the worker registry"


def make_workers_table(cursor: Any, workers: str) -> None:
    """Make the worker registry ``workers`` (quoted with its schema) through ``cursor``
    where the catalog shows none, or one without the column of its calls: an open that
    makes a store's tables makes it, so that a worker whose role does not own them need
    not (ADR 0117)."""
    cursor.execute(_WORKERS_FOUND, (workers,))
    if not all(cursor.fetchone().values()):
        cursor.execute(_CREATE_WORKERS.format(workers=workers))


def _decoded(text: str, kind: type[tuple[T, ...]]) -> tuple[T, ...]:
    """A JSON column of a worker's row; nothing from a row another writer spoiled."""
    try:
        return msgspec.json.decode(text, type=kind)
    except msgspec.DecodeError:
        return ()


def _key(stream: UUID) -> int:
    """The advisory lock key of a thread: the high 64 bits of its stored stream id,
    signed."""
    high = stream.int >> 64
    return high - (1 << 64) if high >= 1 << 63 else high


def lock_ids(stream: UUID) -> tuple[int, int]:
    """How ``pg_locks`` shows the advisory lock of the thread with stream id ``stream``:
    its ``classid`` and ``objid``, the high and low halves of the key (unsigned)."""
    key = stream.int >> 64
    return key >> 32, key & 0xFFFFFFFF
