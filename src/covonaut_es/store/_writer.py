"""Writing threads: saves, fenced by the run lease, and the snapshot schedule.

A :class:`~covonaut_es.Store` holds one :class:`ThreadWriter` (``store._writer``); the
chain is sealed and each event encoded by the application's save
(:mod:`covonaut_es.store._application`), which this calls once per save.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import IntegrityError, InterfaceError, OperationalError

from covonaut_es import _logs
from covonaut_es.domain import AgentThread, ThreadSnapshot
from covonaut_es.errors import ThreadConflictError
from covonaut_es.store._backend import Backend
from covonaut_es.store._leases import Lease
from covonaut_es.store._read_only import WriteGuard
from covonaut_es.store._snapshot_cache import SnapshotCache
from covonaut_es.store._write_errors import database_errors_typed

logger = _logs.logger(__name__)

SNAPSHOT_MIN_VERSION = 64
"""No snapshot is written for a thread shorter than this: replaying it is cheap."""

SNAPSHOT_TAIL_SHARE = 16
"""A new snapshot replaces the thread's last one once the events after that one are a
sixteenth of the thread (ADR 0014): replaying them then costs less than decoding the
snapshot, and rewriting the state that often costs a constant share per event."""

SNAPSHOT_AT_REST_SHARE = 64
"""When a run ends, the thread's snapshot is replaced once the events after it are a
sixty-fourth of the thread (ADR 0085): the thread's next read is a restore, which then
replays at most that share; the snapshot bytes written per event stay constant."""

SNAPSHOT_AT_REST_MIN = 32
"""The fewest events after a thread's last snapshot that make one due when a run ends:
one snapshot per 32 events at most, however short the runs."""


class ThreadWriter:
    """Save threads' new events; write their snapshots when due.

    Args:
        app: The store's application.
        backend: The port of its back end (which replaces snapshots).
        guard: Refuses writes to a store opened read-only.
        held_lease: The run lease of a thread the current task holds, if any.
    """

    def __init__(
        self,
        app: Application[UUID],
        backend: Backend,
        guard: WriteGuard,
        held_lease: Callable[[str], Lease | None],
    ) -> None:
        self._app = app
        self._backend = backend
        self._guard = guard
        self._held_lease = held_lease
        self.snapshot_versions: dict[UUID, int] = {}
        """The version of each thread's newest snapshot this process knows of."""
        self._lock = threading.Lock()

    def save(self, thread: AgentThread) -> None:
        """As :meth:`covonaut_es.Store.save`."""
        pending = thread.pending_events
        if not pending:
            return
        self._guard.refuse_if_read_only(f"thread {thread.thread_id!r} was not saved")
        expected = pending[0].originator_version - 1
        lease = self._held_lease(thread.thread_id)
        fenced = lease if lease is not None and lease.fenced else None
        try:
            with database_errors_typed(
                f"store {self._guard.url}", f"thread {thread.thread_id!r} was not saved"
            ):
                self._app.save(thread, **(fenced.fences() if fenced else {}))
        except IntegrityError as exc:
            msg = (
                f"thread {thread.thread_id!r} was changed by another writer: this writer "
                f"started from version {expected} but that version is no longer the head; "
                "reload the thread and try again"
            )
            raise ThreadConflictError(
                msg, thread_id=thread.thread_id, expected_version=expected
            ) from exc
        if fenced is not None:
            fenced.saved()

    def snapshot_if_due(self, thread: AgentThread, *, at_rest: bool = False) -> bool:
        """As :meth:`covonaut_es.Store.snapshot_if_due`."""
        aggregate_id = thread.id
        with self._lock:
            last = self.snapshot_versions.get(aggregate_id, 0)
        tail = thread.version - last
        share, least = (
            (SNAPSHOT_AT_REST_SHARE, SNAPSHOT_AT_REST_MIN)
            if at_rest
            else (SNAPSHOT_TAIL_SHARE, SNAPSHOT_MIN_VERSION)
        )
        if thread.version < SNAPSHOT_MIN_VERSION or tail < max(least, thread.version // share):
            return False
        if not isinstance(self._app.snapshots, SnapshotCache):
            return False  # an application of the caller's, with snapshotting off
        if at_rest and not self._backend.keeps_one_snapshot:
            return False
        self._guard.refuse_if_read_only(
            f"the snapshot of thread {thread.thread_id!r} at version {thread.version} was not "
            "stored"
        )
        snapshot = ThreadSnapshot.take(thread)
        try:
            with contextlib.suppress(IntegrityError):  # another writer stored this very one
                self._backend.replace_snapshot(self._app.snapshots, snapshot)
        except (OperationalError, InterfaceError) as exc:
            if not at_rest:
                raise
            # The run it ends is stored: a cache not written leaves the next restore a
            # longer tail, not the run an error its caller would take for a failure.
            logger.warning(
                "the snapshot of thread %r at version %d, at its run's end, was not "
                "stored (%s: %s); its next restore folds more events",
                thread.thread_id,
                thread.version,
                type(exc).__name__,
                exc,
            )
            return False
        self.remember_snapshot(aggregate_id, thread.version)
        return True

    def remember_snapshot(self, aggregate_id: UUID, version: int) -> None:
        """Note that the thread has a snapshot at ``version`` (a load started from it,
        or this writer stored it)."""
        with self._lock:
            if version > self.snapshot_versions.get(aggregate_id, 0):
                self.snapshot_versions[aggregate_id] = version
