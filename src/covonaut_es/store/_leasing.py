"""Run leases as a store hands them out: one runner per thread at a time (ADR 0016).

A :class:`~covonaut_es.Store` holds one :class:`Leasing` (``store._leasing``); a
worker reaches the database's leases and registry through it. The lease mechanism of
each back end is in :mod:`covonaut_es.store._leases`. A lease is re-entrant within one
task: a worker that holds a thread's lease runs an agent on it, and the agent's own
request for the lease is granted, whichever store object of the same database it comes
through.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import os
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextvars import ContextVar
from types import MappingProxyType
from uuid import UUID

import msgspec
from eventsourcing.application import Application

from covonaut_es.domain import thread_aggregate_id
from covonaut_es.errors import ThreadBusyError
from covonaut_es.store._backend import Backend
from covonaut_es.store._leases import (
    CallRunning,
    Lease,
    LeaseBackend,
    WorkerRecord,
)
from covonaut_es.store._read_only import WriteGuard
from covonaut_es.store._side_tables import opened_row, sealed_row

_HELD: ContextVar[Mapping[tuple[str, str], Lease]] = ContextVar(
    "covonaut_es_leases_held", default=MappingProxyType({})
)
"""The leases the current task holds, by database and thread id."""

_CREATE_LOCK = threading.Lock()
_SEALED = "sealed:"
"""Starts the one entry of a worker record's threads when they are sealed."""


class _Held(msgspec.Struct, frozen=True):
    """What an encrypted store's worker record seals: the threads held, the calls run."""

    threads: tuple[str, ...]
    calls: tuple[CallRunning, ...] = ()


_HELD_DECODER = msgspec.json.Decoder(_Held | tuple[str, ...])
"""A sealed record's threads and calls; a bare tuple of threads was sealed by code before
calls were reported."""


def process_holder() -> str:
    """The holder name of a runner that is no worker: its process and host."""
    return f"pid {os.getpid()} on {socket.gethostname()}"


class Leasing:
    """Take and release run leases; publish and list live workers.

    Args:
        app: The store's application.
        backend: The port of its back end, which makes the leases.
        guard: Refuses leases on a store opened read-only.
    """

    def __init__(self, app: Application[UUID], backend: Backend, guard: WriteGuard) -> None:
        self._app = app
        self._backend = backend
        self._guard = guard
        self._lease_backend: LeaseBackend | None = None
        self._lease_holder: str | None = None

    def name_lease_holder(self, holder: str) -> None:
        """As :meth:`covonaut_es.Store.name_lease_holder`."""
        self._lease_holder = holder
        with _CREATE_LOCK:
            if self._lease_backend is not None:
                self._lease_backend.rename(holder)

    @property
    def holder(self) -> str:
        """The name of the holder of the leases taken from now on."""
        return self._lease_holder or process_holder()

    @property
    def leases(self) -> LeaseBackend:
        """The database's leases and worker registry, made on first use; never again
        once the store is closed."""
        self._guard.refuse_if_closed()
        with _CREATE_LOCK:
            if self._lease_backend is None:
                self._lease_backend = self._backend.lease_backend(
                    self._app.factory, self._app.recorder, self.holder
                )
            return self._lease_backend

    @contextlib.contextmanager
    def lease(self, thread_id: str) -> Iterator[Lease]:
        """As :meth:`covonaut_es.Store.lease`."""
        held = self.held_lease(thread_id)
        if held is not None:
            yield held
            return
        leases = self.leases  # the one that grants the lease lets it go, closed or not
        lease = self._acquire(leases, thread_id)
        _HELD.set(self._with_held(lease))
        try:
            yield lease
        finally:
            _HELD.set(self._without_held(lease))
            leases.release(lease)

    @contextlib.asynccontextmanager
    async def alease(self, thread_id: str) -> AsyncIterator[Lease]:
        """As :meth:`covonaut_es.Store.alease`."""
        held = self.held_lease(thread_id)
        if held is not None:
            yield held
            return
        leases = self.leases
        taking = _Taking(functools.partial(self._acquire, leases, thread_id), leases.release)
        try:
            lease = await asyncio.to_thread(taking.take)
        except asyncio.CancelledError:
            taking.abandon()
            raise
        _HELD.set(self._with_held(lease))
        try:
            yield lease
        finally:
            _HELD.set(self._without_held(lease))
            # Shielded: a task cancelled again while it lets go (anyio's cancel scopes
            # cancel at every await; a stream's consumer leaving cancels its run) would
            # cancel the release before a worker thread took it, and keep the lease.
            await asyncio.shield(asyncio.to_thread(leases.release, lease))

    def held_lease(self, thread_id: str) -> Lease | None:
        """As :meth:`covonaut_es.Store.held_lease`; every lease is looked up here first,
        so it is where an id that is no str is refused."""
        thread_aggregate_id(thread_id)
        return _HELD.get().get((self.leases.database, thread_id))

    def _with_held(self, lease: Lease) -> Mapping[tuple[str, str], Lease]:
        held = dict(_HELD.get())
        held[lease.database, lease.thread_id] = lease
        return MappingProxyType(held)

    def _without_held(self, lease: Lease) -> Mapping[tuple[str, str], Lease]:
        # Not a reset to the value before the lease was taken: leases held through an
        # ExitStack may be let go in any order, and a reset would bring back, or drop,
        # the leases taken or let go in between.
        held = dict(_HELD.get())
        held.pop((lease.database, lease.thread_id), None)
        return MappingProxyType(held)

    def _acquire(self, leases: LeaseBackend, thread_id: str) -> Lease:
        self._guard.refuse_if_read_only(f"the run lease of thread {thread_id!r} was not taken")
        lease = leases.try_acquire(thread_id)
        if lease is not None:
            return lease
        holder = leases.holder_of(thread_id)
        by = f" by {holder}" if holder else ""
        msg = (
            f"thread {thread_id!r} in store {self._guard.url} is being run{by}: one runner at a "
            "time; nothing was run, try again once that run pauses or ends"
        )
        raise ThreadBusyError(msg, thread_id=thread_id, holder=holder)

    def publish_worker(self, record: WorkerRecord) -> None:
        """As :meth:`covonaut_es.Store.publish_worker`."""
        self._guard.refuse_if_read_only(
            f"the record of worker {record.worker_id!r} was not written"
        )
        cipher = self._app.mapper.cipher
        if cipher is not None and (record.threads or record.calls):
            sealed = sealed_row(cipher, msgspec.json.encode(_Held(record.threads, record.calls)))
            threads = (_SEALED + base64.b64encode(sealed).decode(),)
            record = msgspec.structs.replace(record, threads=threads, calls=())
        self.leases.publish(record)

    def withdraw_worker(self, worker_id: str) -> None:
        """As :meth:`covonaut_es.Store.withdraw_worker`."""
        self._guard.refuse_if_read_only(f"the record of worker {worker_id!r} was not removed")
        self.leases.withdraw(worker_id)

    def live_workers(self) -> tuple[WorkerRecord, ...]:
        """As :meth:`covonaut_es.Store.live_workers`."""
        return tuple(self._unsealed(record) for record in self.leases.workers())

    def _unsealed(self, record: WorkerRecord) -> WorkerRecord:
        cipher = self._app.mapper.cipher
        if cipher is None or not record.threads or not record.threads[0].startswith(_SEALED):
            return record
        try:
            sealed = base64.b64decode(record.threads[0].removeprefix(_SEALED))
        except ValueError:  # spoiled by another writer
            sealed = b""
        held = opened_row(cipher, sealed, _HELD_DECODER.decode)
        if held is None:
            held = _Held(("(unreadable)",))
        if not isinstance(held, _Held):  # sealed by code before calls were reported
            held = _Held(held)
        return msgspec.structs.replace(record, threads=held.threads, calls=held.calls)

    def close(self) -> None:
        """Release the leases' connections, if any were made."""
        with _CREATE_LOCK:
            backend, self._lease_backend = self._lease_backend, None
        if backend is not None:
            backend.close()


class _Taking:
    """A lease taken in a worker thread for a task that may stop waiting for it (it was
    cancelled, or its event loop ended): the thread cannot be stopped, so whichever of
    the two comes last lets the lease go, and no runner is locked out."""

    def __init__(self, acquire: Callable[[], Lease], release: Callable[[Lease], None]) -> None:
        self._acquire = acquire
        self._release = release
        self._lock = threading.Lock()
        self._abandoned = False
        self._taken: Lease | None = None  # taken, and not yet the task's

    def take(self) -> Lease:
        """Take the lease, in the worker thread; let it go at once if the task has
        stopped waiting."""
        lease = self._acquire()
        with self._lock:
            if not self._abandoned:
                self._taken = lease
                return lease
        self._release(lease)
        return lease

    def abandon(self) -> None:
        """The task stopped waiting: let go, in a thread of its own, the lease if it was
        taken already (the thread lets go one it takes later)."""
        with self._lock:
            self._abandoned = True
            taken, self._taken = self._taken, None
        if taken is not None:
            threading.Thread(target=self._release, args=(taken,), name="lease-release").start()
