"""Run leases as a store hands them out: one runner per thread at a time (ADR 0016).

Mixed into :class:`~covonaut_es.Store`. The lease mechanism of each back end is in
:mod:`covonaut_es.store._leases`. A lease is re-entrant within one task: a worker that
holds a thread's lease runs an agent on it, and the agent's own request for the lease
is granted, whichever store object of the same database it comes through.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar
from typing import Any
from urllib.parse import unquote, urlsplit
from uuid import UUID

import msgspec
from eventsourcing.application import Application

from covonaut_es.errors import ThreadBusyError
from covonaut_es.store._leases import LeaseBackend, MemoryLeases, WorkerRecord
from covonaut_es.store._leases_postgres import PostgresLeases
from covonaut_es.store._leases_sqlite import FileLeases

_HELD: ContextVar[frozenset[tuple[str, str]]] = ContextVar(
    "covonaut_es_leases_held", default=frozenset()
)
"""The (database, thread id) leases the current task holds."""

_CREATE_LOCK = threading.Lock()
_SEALED = "sealed:"
"""Starts the one entry of a worker record's threads when they are sealed."""


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
        return unquote(urlsplit(db_name).path)
    return db_name


def process_holder() -> str:
    """The holder name of a runner that is no worker: its process and host."""
    return f"pid {os.getpid()} on {socket.gethostname()}"


class ThreadLeasing:
    """Take and release run leases."""

    _app: Application[UUID]
    url: str
    _lease_backend: LeaseBackend | None = None
    _lease_holder: str | None = None

    def name_lease_holder(self, holder: str) -> None:
        """Name who holds the leases this store takes (a worker names itself), shown
        to runners that find a thread busy."""
        self._lease_holder = holder
        with _CREATE_LOCK:
            if self._lease_backend is not None:
                self._lease_backend.rename(holder)

    @property
    def _leases(self) -> LeaseBackend:
        with _CREATE_LOCK:
            if self._lease_backend is None:
                holder = self._lease_holder or process_holder()
                self._lease_backend = lease_backend(self._app, holder)
            return self._lease_backend

    @contextlib.contextmanager
    def lease(self, thread_id: str) -> Iterator[None]:
        """Hold the thread's run lease for the block.

        Raises:
            ThreadBusyError: Another runner holds it; nothing was done.
        """
        if self._held(thread_id):
            yield
            return
        self._acquire(thread_id)
        token = _HELD.set(_HELD.get() | {(self._leases.database, thread_id)})
        try:
            yield
        finally:
            _HELD.reset(token)
            self._leases.release(thread_id)

    @contextlib.asynccontextmanager
    async def alease(self, thread_id: str) -> AsyncIterator[None]:
        """Like :meth:`lease`, for asyncio: the database is asked in a worker thread."""
        if self._held(thread_id):
            yield
            return
        await asyncio.to_thread(self._acquire, thread_id)
        token = _HELD.set(_HELD.get() | {(self._leases.database, thread_id)})
        try:
            yield
        finally:
            _HELD.reset(token)
            await asyncio.to_thread(self._leases.release, thread_id)

    def _held(self, thread_id: str) -> bool:
        return (self._leases.database, thread_id) in _HELD.get()

    def _acquire(self, thread_id: str) -> None:
        if self._leases.try_acquire(thread_id):
            return
        holder = self._leases.holder_of(thread_id)
        by = f" by {holder}" if holder else ""
        msg = (
            f"thread {thread_id!r} in store {self.url} is being run{by}: one runner at a "
            "time; nothing was run, try again once that run pauses or ends"
        )
        raise ThreadBusyError(msg, thread_id=thread_id, holder=holder)

    def publish_worker(self, record: WorkerRecord) -> None:
        """Write a live worker's record (its heartbeat) to the registry. In an
        encrypted store the threads it holds are sealed under the store's key."""
        cipher = self._app.mapper.cipher
        if cipher is not None and record.threads:
            sealed = cipher.encrypt(msgspec.json.encode(record.threads))
            threads = (_SEALED + base64.b64encode(sealed).decode(),)
            record = msgspec.structs.replace(record, threads=threads)
        self._leases.publish(record)

    def live_workers(self) -> tuple[WorkerRecord, ...]:
        """The live workers' records, oldest first."""
        return tuple(self._unsealed(record) for record in self._leases.workers())

    def _unsealed(self, record: WorkerRecord) -> WorkerRecord:
        cipher = self._app.mapper.cipher
        if cipher is None or not record.threads or not record.threads[0].startswith(_SEALED):
            return record
        try:
            sealed = base64.b64decode(record.threads[0].removeprefix(_SEALED))
            threads = msgspec.json.decode(cipher.decrypt(sealed), type=tuple[str, ...])
        except Exception:  # spoiled by another writer: the cipher's errors vary
            threads = ("(unreadable)",)
        return msgspec.structs.replace(record, threads=threads)

    def _close_leases(self) -> None:
        with _CREATE_LOCK:
            backend, self._lease_backend = self._lease_backend, None
        if backend is not None:
            backend.close()
