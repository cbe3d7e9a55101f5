"""Run leases and the worker registry: the interface, and the in-memory back end
(ADR 0016). The SQLite and PostgreSQL back ends are in :mod:`._leases_sqlite` and
:mod:`._leases_postgres`.

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
import threading
import weakref
from abc import ABC, abstractmethod
from datetime import datetime, timedelta
from typing import Any

import msgspec

from covonaut_es._clock import utc_now

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


def now_record(record: WorkerRecord, threads: tuple[str, ...]) -> WorkerRecord:
    """``record`` with a fresh heartbeat and the threads now held."""
    return msgspec.structs.replace(record, heartbeat_at=utc_now(), threads=threads)
