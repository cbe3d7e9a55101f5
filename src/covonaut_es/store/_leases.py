"""Run leases and the worker registry, one implementation per back end (ADR 0016).

A run lease gives one runner at a time the right to run a thread. Each back end uses
a lock its operating system or database server releases by itself when the holder
dies, so a lease never has to time out:

* PostgreSQL: a session-level advisory lock (``pg_try_advisory_lock``) on a dedicated
  connection; the server drops it when that connection ends.
* SQLite: an exclusive ``flock`` on a lock file per thread in a directory beside the
  database file; the kernel drops it when the process ends. It excludes the processes
  of one machine (the machine a SQLite file can be shared on).
* Memory: a table in this process.

The registry of live workers sits beside the leases: a table on PostgreSQL (liveness
by the heartbeat, in the server's time), a record file per worker held under ``flock``
on SQLite (liveness by the lock), a table in this process for memory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import weakref
from abc import ABC, abstractmethod
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
from eventsourcing.application import Application

from covonaut_es._clock import utc_now
from covonaut_es.domain import thread_aggregate_id
from covonaut_es.errors import ReadOnlyStoreError

HEARTBEAT_INTERVAL = 2.0
"""Seconds between a worker's heartbeats."""
STALE_AFTER = timedelta(seconds=15)
"""A worker whose last heartbeat is older than this is not listed as live (PostgreSQL;
on SQLite and in memory liveness is known exactly)."""


class WorkerRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A worker as the registry lists it.

    Attributes:
        worker_id: The worker's id, unique in the store.
        host: The machine it runs on.
        pid: Its process id there.
        started_at: When it started.
        heartbeat_at: Its last heartbeat.
        threads: The threads it holds leases on.
    """

    worker_id: str
    host: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    threads: tuple[str, ...] = ()


class LeaseBackend(ABC):
    """Leases and worker records in one database. Safe to share between threads.

    Attributes:
        database: Names the database, so that a lease taken through one store is
            known to be held when another store of the same database asks again in
            the same task.
    """

    database: str

    def __init__(self, holder: str) -> None:
        self.holder = holder
        self._held: set[str] = set()
        self._lock = threading.Lock()

    def rename(self, holder: str) -> None:
        """Name the holder of the leases taken from now on."""
        self.holder = holder

    def try_acquire(self, thread_id: str) -> bool:
        """Take the thread's lease if no runner holds it; whether it was taken."""
        with self._lock:
            if thread_id in self._held:
                return False
            self._held.add(thread_id)
        try:
            taken = self._try_lock(thread_id)
        except BaseException:
            self._forget(thread_id)
            raise
        if not taken:
            self._forget(thread_id)
        return taken

    def release(self, thread_id: str) -> None:
        """Give the thread's lease back."""
        try:
            self._unlock(thread_id)
        finally:
            self._forget(thread_id)

    def held(self) -> tuple[str, ...]:
        """The threads whose leases this back end holds."""
        with self._lock:
            return tuple(sorted(self._held))

    def _forget(self, thread_id: str) -> None:
        with self._lock:
            self._held.discard(thread_id)

    @abstractmethod
    def _try_lock(self, thread_id: str) -> bool: ...

    @abstractmethod
    def _unlock(self, thread_id: str) -> None: ...

    @abstractmethod
    def holder_of(self, thread_id: str) -> str | None:
        """Who holds the thread's lease, if the back end can tell."""

    @abstractmethod
    def publish(self, record: WorkerRecord) -> None:
        """Write (or refresh) a live worker's record: its heartbeat."""

    @abstractmethod
    def withdraw(self, worker_id: str) -> None:
        """Remove a stopping worker's record."""

    @abstractmethod
    def workers(self) -> tuple[WorkerRecord, ...]:
        """The live workers' records."""

    def close(self) -> None:
        """Release every lease and the back end's connection or files."""
        for thread_id in self.held():
            with contextlib.suppress(Exception):
                self.release(thread_id)


# Memory -----------------------------------------------------------------------------


class _MemoryTables:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.leases: dict[str, str] = {}
        self.workers: dict[str, WorkerRecord] = {}


_MEMORY: weakref.WeakKeyDictionary[Any, _MemoryTables] = weakref.WeakKeyDictionary()
_MEMORY_LOCK = threading.Lock()


class MemoryLeases(LeaseBackend):
    """Leases of an in-memory store: a table shared by the stores of its recorder."""

    def __init__(self, holder: str, recorder: Any) -> None:
        super().__init__(holder)
        with _MEMORY_LOCK:
            self._tables = _MEMORY.setdefault(recorder, _MemoryTables())
        self.database = f"memory:{id(self._tables)}"

    def _try_lock(self, thread_id: str) -> bool:
        with self._tables.lock:
            if thread_id in self._tables.leases:
                return False
            self._tables.leases[thread_id] = self.holder
            return True

    def _unlock(self, thread_id: str) -> None:
        with self._tables.lock:
            self._tables.leases.pop(thread_id, None)

    def holder_of(self, thread_id: str) -> str | None:
        with self._tables.lock:
            return self._tables.leases.get(thread_id)

    def publish(self, record: WorkerRecord) -> None:
        with self._tables.lock:
            self._tables.workers[record.worker_id] = record

    def withdraw(self, worker_id: str) -> None:
        with self._tables.lock:
            self._tables.workers.pop(worker_id, None)

    def workers(self) -> tuple[WorkerRecord, ...]:
        with self._tables.lock:
            return tuple(self._tables.workers.values())


# SQLite -----------------------------------------------------------------------------


class FileLeases(LeaseBackend):
    """Leases of a SQLite store: ``flock`` on files in ``<database>.leases/``.

    A lock file is named after the thread's aggregate id (a thread id may hold any
    character) and holds its holder's name while locked. Lock files are left in place:
    removing one while another process opens it would let two processes lock two
    different files of the same name.
    """

    def __init__(self, holder: str, database_file: str) -> None:
        super().__init__(holder)
        self.directory = Path(database_file + ".leases")
        self.database = f"sqlite:{Path(database_file).resolve()}"
        self._files: dict[str, int] = {}
        self._record_fd: int | None = None

    def _path(self, thread_id: str) -> Path:
        return self.directory / f"{thread_aggregate_id(thread_id).hex}.lock"

    def _try_lock(self, thread_id: str) -> bool:
        try:
            self.directory.mkdir(exist_ok=True)
            fd = _locked_file(self._path(thread_id))
        except OSError as exc:
            msg = (
                f"cannot take the run lease of thread {thread_id!r} in {self.directory}: "
                f"{exc}; runs need a writable directory beside the SQLite file"
            )
            raise ReadOnlyStoreError(msg) from exc
        if fd is None:
            return False
        _rewrite(fd, self.holder.encode())
        with self._lock:
            self._files[thread_id] = fd
        return True

    def _unlock(self, thread_id: str) -> None:
        with self._lock:
            fd = self._files.pop(thread_id, None)
        if fd is not None:
            _rewrite(fd, b"")
            os.close(fd)  # closing the only descriptor drops the lock

    def holder_of(self, thread_id: str) -> str | None:
        try:
            text = self._path(thread_id).read_text(errors="replace").strip()
        except OSError:
            return None
        return text or None

    def _records(self) -> Path:
        return self.directory / "workers"

    def publish(self, record: WorkerRecord) -> None:
        records = self._records()
        if self._record_fd is None:
            records.mkdir(parents=True, exist_ok=True)
            self._record_fd = _locked_file(records / f"{record.worker_id}.json")
            if self._record_fd is None:
                msg = f"worker id {record.worker_id!r} is taken by a live worker"
                raise RuntimeError(msg)
        _rewrite(self._record_fd, msgspec.json.encode(record))

    def withdraw(self, worker_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self._records() / f"{worker_id}.json").unlink()
        if self._record_fd is not None:
            os.close(self._record_fd)
            self._record_fd = None

    def workers(self) -> tuple[WorkerRecord, ...]:
        found = []
        records = self._records()
        for path in sorted(records.glob("*.json")) if records.is_dir() else ():
            probe = _locked_file(path, create=False)
            if probe is not None:  # nobody holds it: its worker died
                os.close(probe)
                continue
            with contextlib.suppress(OSError, msgspec.DecodeError):
                found.append(msgspec.json.decode(path.read_bytes(), type=WorkerRecord))
        return tuple(found)

    def close(self) -> None:
        super().close()
        if self._record_fd is not None:
            os.close(self._record_fd)
            self._record_fd = None


def _locked_file(path: Path, *, create: bool = True) -> int | None:
    """A descriptor of ``path`` under an exclusive ``flock``; None when another
    descriptor holds it (or, without ``create``, when it is gone)."""
    try:
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o600)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _rewrite(fd: int, data: bytes) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


# PostgreSQL -------------------------------------------------------------------------

_CREATE_WORKERS = (
    "CREATE TABLE IF NOT EXISTS covonaut_workers (worker_id TEXT PRIMARY KEY, "
    "host TEXT NOT NULL, pid INTEGER NOT NULL, started_at TIMESTAMPTZ NOT NULL, "
    "heartbeat_at TIMESTAMPTZ NOT NULL, threads TEXT NOT NULL)"
)
_UPSERT_WORKER = (
    "INSERT INTO covonaut_workers (worker_id, host, pid, started_at, heartbeat_at, threads) "
    "VALUES (%s, %s, %s, %s, now(), %s) ON CONFLICT (worker_id) DO UPDATE SET "
    "heartbeat_at = now(), threads = excluded.threads"
)
_SELECT_WORKERS = (
    "SELECT worker_id, host, pid, started_at, heartbeat_at, threads FROM covonaut_workers "
    "WHERE heartbeat_at > now() - %s "
    "ORDER BY started_at, worker_id"
)
_HOLDER = (
    "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.database = "
    "(SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND l.classid = %s AND l.objid = %s AND l.objsubid = 1"
)
_APPLICATION_PREFIX = "covonaut-es "


class PostgresLeases(LeaseBackend):
    """Leases of a PostgreSQL store: session-level advisory locks on one connection of
    their own, named after the holder (``application_name``) so others can tell who
    holds a thread. TCP keepalives make the server notice a holder whose machine
    vanished, and drop its locks, within about a minute."""

    def __init__(self, holder: str, connect_kwargs: dict[str, Any]) -> None:
        super().__init__(holder)
        self._kwargs = {k: v for k, v in connect_kwargs.items() if k != "row_factory"}
        self.database = (
            f"postgresql:{self._kwargs.get('host')}:{self._kwargs.get('port')}/"
            f"{self._kwargs.get('dbname')}"
        )
        self._connection: Any = None
        self._connect_lock = threading.Lock()

    def _conn(self) -> Any:
        with self._connect_lock:
            if self._connection is None or self._connection.closed:
                import psycopg

                self._connection = psycopg.connect(
                    **self._kwargs,
                    autocommit=True,
                    application_name=self._application_name(),
                    keepalives=1,
                    keepalives_idle=10,
                    keepalives_interval=5,
                    keepalives_count=6,
                )
            return self._connection

    def _application_name(self) -> str:
        # PostgreSQL keeps 63 bytes of it.
        encoded = (_APPLICATION_PREFIX + self.holder).encode()[:63]
        return encoded.decode(errors="ignore")

    def rename(self, holder: str) -> None:
        super().rename(holder)
        with self._connect_lock:
            if self._connection is not None and not self._connection.closed:
                self._connection.execute(
                    "SELECT set_config('application_name', %s, false)",
                    (self._application_name(),),
                )

    def _try_lock(self, thread_id: str) -> bool:
        row = self._conn().execute("SELECT pg_try_advisory_lock(%s)", (_key(thread_id),))
        return bool(row.fetchone()[0])

    def _unlock(self, thread_id: str) -> None:
        connection = self._connection
        if connection is not None and not connection.closed:
            connection.execute("SELECT pg_advisory_unlock(%s)", (_key(thread_id),))

    def holder_of(self, thread_id: str) -> str | None:
        key = _key(thread_id) & 0xFFFFFFFFFFFFFFFF
        rows = self._conn().execute(_HOLDER, (key >> 32, key & 0xFFFFFFFF)).fetchall()
        names = [str(row[0]) for row in rows]
        return names[0].removeprefix(_APPLICATION_PREFIX) if names else None

    def publish(self, record: WorkerRecord) -> None:
        conn = self._conn()
        conn.execute(_CREATE_WORKERS)
        conn.execute(
            _UPSERT_WORKER,
            (
                record.worker_id,
                record.host,
                record.pid,
                record.started_at,
                msgspec.json.encode(record.threads).decode(),
            ),
        )

    def withdraw(self, worker_id: str) -> None:
        self._conn().execute("DELETE FROM covonaut_workers WHERE worker_id = %s", (worker_id,))

    def workers(self) -> tuple[WorkerRecord, ...]:
        conn = self._conn()
        if conn.execute("SELECT to_regclass('covonaut_workers')").fetchone()[0] is None:
            return ()  # no worker ever ran here: reading creates no table
        rows = conn.execute(_SELECT_WORKERS, (STALE_AFTER,)).fetchall()
        return tuple(
            WorkerRecord(
                worker_id=row[0],
                host=row[1],
                pid=row[2],
                started_at=row[3],
                heartbeat_at=row[4],
                threads=tuple(msgspec.json.decode(row[5], type=list[str])),
            )
            for row in rows
        )

    def close(self) -> None:
        super().close()
        with self._connect_lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None


def _key(thread_id: str) -> int:
    """The advisory lock key of a thread: the high 64 bits of its aggregate id, signed."""
    high = thread_aggregate_id(thread_id).int >> 64
    return high - (1 << 64) if high >= 1 << 63 else high


def lease_backend(app: Application[Any], holder: str) -> LeaseBackend:
    """The lease back end for the database of ``app``."""
    datastore = getattr(app.factory, "datastore", None)
    pool = getattr(datastore, "pool", None)
    if pool is not None and isinstance(getattr(pool, "kwargs", None), dict):
        return PostgresLeases(holder, dict(pool.kwargs))
    db_name = getattr(pool, "db_name", None)
    if isinstance(db_name, str) and not getattr(pool, "is_sqlite_memory_mode", False):
        path = _sqlite_file(db_name)
        if path is not None:
            return FileLeases(holder, path)
    return MemoryLeases(holder, app.recorder)


def _sqlite_file(db_name: str) -> str | None:
    """The file of a SQLite database name (a path or a ``file:`` URI); None for an
    in-memory database."""
    if db_name == ":memory:" or "mode=memory" in db_name:
        return None
    if db_name.startswith("file:"):
        from urllib.parse import unquote, urlsplit

        return unquote(urlsplit(db_name).path)
    return db_name


def now_record(record: WorkerRecord, threads: tuple[str, ...]) -> WorkerRecord:
    """``record`` with a fresh heartbeat and the threads now held."""
    return msgspec.structs.replace(record, heartbeat_at=utc_now(), threads=threads)
