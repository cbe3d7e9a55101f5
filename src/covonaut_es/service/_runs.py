"""A run of one thread under its lease: fenced commits, and rebases over what commutes.

Internal: :meth:`ThreadService.session <covonaut_es.service.ThreadService.session>` opens
a :class:`RunSession`; the runtime's run loop changes its thread and commits through it.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import cast

from covonaut_es._text import exception_text
from covonaut_es.domain import AgentThread, ThreadStatus
from covonaut_es.errors import (
    LeaseLostError,
    ThreadAbandonedError,
    ThreadConflictError,
    ThreadStateError,
)
from covonaut_es.store import Store
from covonaut_es.store._leases import Lease

MAX_REBASES = 8
"""How many times in a row one commit is put after other writers' events before it gives
up with the conflict: each time, decisions or labels landed between load and save."""


class RunSession:
    """One runner's hold on a thread: its lease and its copy of the thread.

    Every save is fenced by the lease (the store refuses it once a newer lease exists).
    When another writer appended events that commute with a run (a review decided, a
    pause answered, a label, the thread given up) since the thread was loaded, the
    session's unsaved events are put after them and saved again (ADR 0025), so a tool
    that ran keeps its result.

    Attributes:
        thread: The thread the run changes, loaded under the lease.
        lease: The run lease; its token fences every save.
    """

    def __init__(self, store: Store, lease: Lease, thread: AgentThread) -> None:
        self.thread = thread
        self.lease = lease
        self._store = store
        self._abandoned = False
        # What was stored when the session began: only a run recorded after it is one
        # whose failure this session records.
        self._began = thread.version - len(thread.pending_events)

    def check_lease(self) -> None:
        """Raise unless the lease still stands; called before each tool call.

        Raises:
            LeaseLostError: It was lost: the run must stop before its next side effect.
        """
        self.lease.check()

    def commit(
        self, *, snapshot: bool = False, movable: Collection[str] = ()
    ) -> list[AgentThread.Event]:
        """Save the thread's new events, fenced by the lease, then store a snapshot if
        ``snapshot`` and one is due. ``movable``: calls that ran whose records may still
        take other versions (:meth:`AgentThread.rebase`).

        Returns:
            The events saved (renumbered, if they were put after other writers' events).

        Raises:
            ThreadConflictError: Another writer appended events that do not commute with
                the run; nothing was saved.
            LeaseLostError: The lease was lost (its lock, or to a newer lease); nothing
                was saved.
        """
        thread = self.thread
        # A save that fails has taken the events from the thread already: keep them.
        pending = [cast(AgentThread.Event, event) for event in thread.pending_events]
        if pending:
            # The save refuses an older token, and on PostgreSQL a session that no longer
            # holds the lock; a lock lost otherwise (a lock file removed) is found here:
            # a runner that lost its lease stores nothing, not a call it will not make.
            self.lease.check_before_save()
        for _ in range(MAX_REBASES):
            if not pending:
                break
            try:
                self._store.save(thread)
                break
            except ThreadConflictError:
                base = pending[0].originator_version - 1
                tail = self._store.events_after(thread.thread_id, base)
                head = self._store.load(thread.thread_id)
                if not thread.rebase(head, tail, pending, movable=movable):
                    raise
                if any(isinstance(event, AgentThread.Abandoned) for event in tail):
                    self._abandoned = True
                pending = [cast(AgentThread.Event, event) for event in thread.pending_events]
        else:
            msg = (
                f"thread {thread.thread_id!r} was changed by other writers {MAX_REBASES} times "
                "in a row while this run saved; nothing of this save was stored"
            )
            raise ThreadConflictError(msg, thread_id=thread.thread_id, expected_version=0)
        if snapshot:
            self._store.snapshot_if_due(thread)
        return pending

    def fail(self, error: Exception, *, now: datetime) -> list[AgentThread.Event]:
        """Record that the run failed by ``error`` and commit it, if the thread is still
        running a run recorded since the session began: whatever raised, in the library
        or in the application's code, a store never shows a run that ended as running
        (ADR 0091). The failure goes after the run's unsaved events; should they not
        save (a save failed on them, or took them), after what the store holds.

        Nothing is recorded for a refusal (a ``ThreadStateError``: the thread did not
        change), a lost lease (another runner holds the thread), or a run that already
        ended (its failure recorded, paused, given up).

        Returns:
            The events saved, the ``RunFailed`` last.

        Raises:
            CovonautError: The failure could not be saved either (the store's error).
        """
        if isinstance(error, ThreadStateError | LeaseLostError):
            return []
        thread = self.thread
        saved = thread.version - len(thread.pending_events)
        if (self._store.head_version(thread.thread_id) or 0) == saved and (
            thread.status is ThreadStatus.RUNNING or not thread.pending_events
        ):
            try:
                return self._record_failure(error, now)
            except LeaseLostError:
                raise
            except Exception:  # the unsaved events do not save: record it after what is stored
                pass
        found = self._store.find(thread.thread_id)
        if found is None:
            return []
        self.thread = found
        return self._record_failure(error, now)

    def _record_failure(self, error: Exception, now: datetime) -> list[AgentThread.Event]:
        thread = self.thread
        if thread.status is not ThreadStatus.RUNNING or thread.version <= self._began:
            return []
        thread.fail(type(error).__name__, exception_text(error), now=now)
        return self.commit()

    def rest(self) -> None:
        """The run is over: store a snapshot of the thread, saved as it stands, if one is
        due at rest (:meth:`Store.snapshot_if_due <covonaut_es.Store.snapshot_if_due>`),
        so that its next restore replays few events. A thread with unsaved events is
        left as it is."""
        if not self.thread.pending_events:
            self._store.snapshot_if_due(self.thread, at_rest=True)

    def stop_if_abandoned(self) -> None:
        """Raise if a commit found the thread given up meanwhile; the runner calls it
        once it has handed on what the commit saved.

        Raises:
            ThreadAbandonedError: What the run had recorded is saved after the
                abandonment, and nothing more runs.
        """
        if self._abandoned and self.thread.status is ThreadStatus.ABANDONED:
            msg = (
                f"thread {self.thread.thread_id!r} was given up while this run was going: what it "
                "had recorded is saved after the abandonment, and nothing more runs"
            )
            raise ThreadAbandonedError(msg)
