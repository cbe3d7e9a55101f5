"""Forking threads and reading their forks: the store's side of the session tree.

A :class:`~covonaut_es.Store` holds one :class:`Forks` (``store._forks``). A fork reads
only the tail of its parent's stream and writes one ``Forked`` event (ADR 0009); the
store's forks are read from the log's ``Forked`` events alone. The forks under one thread
are found in an index of forks by parent, kept in this process and brought up to date
from the log written since it last read it (ADR 0049); a thread's ancestors are read from
their first events.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import IntegrityError

from covonaut_es import _logs
from covonaut_es.domain import (
    AgentThread,
    ForkRecord,
    SessionTree,
    ThreadParent,
    check_thread_id,
    check_thread_stream,
    default_fork_id,
    thread_aggregate_id,
)
from covonaut_es.domain._forks import fork_event, fork_point
from covonaut_es.errors import (
    CheckpointNotFoundError,
    ConfigurationError,
    ThreadConflictError,
    ThreadStateError,
    ToolCallRunningError,
)
from covonaut_es.store._application import AgentApplication
from covonaut_es.store._backend import Backend
from covonaut_es.store._chain import chain_of
from covonaut_es.store._chain_key import sealed_predecessor
from covonaut_es.store._read_only import WriteGuard
from covonaut_es.store._reader import ThreadReader, check_first_event
from covonaut_es.store._records import StoredRecords, storable
from covonaut_es.store._write_errors import database_errors_typed

logger = _logs.logger("covonaut_es.store")


class Forks:
    """Fork a thread at any version; list the forks.

    Args:
        app: The store's application.
        backend: The port of its back end (whether it guards new streams).
        records: The store's records and log.
        reader: Loads the threads forked and tells whether a fork's id is taken.
        guard: Refuses writes to a store opened read-only.
        clock: The time of the events written when a call passes no ``now``.
    """

    def __init__(
        self,
        app: Application[UUID],
        backend: Backend,
        records: StoredRecords,
        reader: ThreadReader,
        guard: WriteGuard,
        clock: Callable[[], datetime],
    ) -> None:
        self._app = app
        self._backend = backend
        self._records = records
        self._reader = reader
        self._guard = guard
        self.url = guard.url
        self.clock = clock
        # The forks by parent thread, read from the log up to position _indexed_to.
        self._children: dict[str, list[ForkRecord]] = {}
        self._indexed_to = 0
        self._index_lock = threading.Lock()

    def _newest_first(self, thread_id: str, version: int | None) -> Iterator[Any]:
        """The thread's own events up to ``version`` (None: its head), newest first,
        read in pages."""
        aggregate_id = thread_aggregate_id(thread_id)
        while version is None or version >= 1:
            page = list(
                self._app.events.get(aggregate_id, lte=storable(version), desc=True, limit=16)
            )
            yield from page
            if len(page) < 16:
                return
            version = page[-1].originator_version - 1

    def _branch_point(self, thread_id: str, version: int | None) -> tuple[str, Iterator[Any]]:
        """The thread whose own stream holds ``version`` (None: ``thread_id``'s head),
        and its events up to that version, newest first.

        A fork's versions up to its branch point are its parent's, so a fork there
        branches from the parent. Reads one page of the stream in the common case.

        Raises:
            ThreadNotFoundError: The thread or the version is missing.
        """
        requested = thread_id
        while True:
            events = self._newest_first(thread_id, version)
            newest = next(events, None)
            if newest is not None and version in (None, newest.originator_version):
                return thread_id, itertools.chain([newest], events)
            forked = None
            if newest is None and version is not None and version >= 1:
                forked = self._records.forked_event(thread_id)
            if forked is None:
                raise self._reader.not_found_at(requested, version, "forked")
            # Below the fork's own first version: inherited, so branch from its owner.
            thread_id = forked.parent_thread_id

    def fork(
        self,
        thread_id: str,
        *,
        at_version: int | None = None,
        at_checkpoint: int | None = None,
        new_thread_id: str | None = None,
        now: datetime | None = None,
        holding: Callable[[str, int], contextlib.AbstractContextManager[None]],
    ) -> str:
        """As :meth:`covonaut_es.Store.fork`; the fork, once checked, is written
        ``holding`` the thread forked and the version forked at."""
        if at_version is not None and at_checkpoint is not None:
            msg = "fork() takes at_version or at_checkpoint, not both"
            raise ConfigurationError(msg)
        if at_checkpoint is not None:
            at_version = self._checkpoint_version(thread_id, at_checkpoint)
        thread_id, newest_first = self._branch_point(thread_id, at_version)
        newest = next(newest_first)
        first = next(iter(self._app.events.get(thread_aggregate_id(thread_id), limit=1)))
        if isinstance(first, AgentThread.Started | AgentThread.Forked):  # not sealed on a copy
            check_thread_stream(first.originator_id, first.thread_id)
        version = newest.originator_version
        if new_thread_id is None:  # an empty id is refused, not read as none given
            new_thread_id = default_fork_id(thread_id, uuid.uuid4().hex[:8])
        new_thread_id = check_thread_id(new_thread_id)
        taken = f"cannot fork {thread_id!r} as {new_thread_id!r}: that thread already exists"
        # Where the back end does not guard new streams, checked here, then written.
        guarded = self._backend.guards_new_streams(self._app.recorder)
        if not guarded and self._reader.exists(new_thread_id):
            raise ThreadConflictError(taken, thread_id=new_thread_id, expected_version=0)
        interrupts, abandoned = fork_point(itertools.chain([newest], newest_first))
        if abandoned:
            msg = (
                f"thread {thread_id!r} is abandoned at version {version}: "
                "fork it at a version before it was abandoned"
            )
            raise ThreadStateError(msg)
        event = fork_event(
            thread_id,
            version,
            new_thread_id=new_thread_id,
            interrupts=interrupts,
            now=now or self.clock(),
        )
        app = self._app
        assert isinstance(app, AgentApplication)
        key = app.chain_key
        base = (  # the fork is sealed into its parent's chain
            chain_of(newest)
            if key is None
            else sealed_predecessor(app, key, thread_id, newest.originator_id, version)
        )
        try:
            with (
                holding(thread_id, version),
                database_errors_typed(
                    f"store {self._guard.url}", f"thread {thread_id!r} was not forked"
                ),
            ):
                app.put_and_tell(
                    [event], {event.originator_id: base}, new_streams={event.originator_id}
                )
        except IntegrityError as exc:
            raise ThreadConflictError(taken, thread_id=new_thread_id, expected_version=0) from exc
        return new_thread_id

    def refuse_open_calls(self, thread_id: str, version: int) -> None:
        """Refuse a fork of a thread that a run holds now, at a ``version`` that holds
        calls open: one of them may be running in that run.

        Raises:
            ToolCallRunningError: Naming the first open call; nothing was stored.
        """
        open_calls = self._reader.load(thread_id, version=version).open_calls
        if not open_calls:
            return
        call_id = next(iter(open_calls))
        msg = (
            f"thread {thread_id!r} is being run, and at that version it holds call "
            f"{call_id!r} open, which may be running there: a fork would hold it open "
            "too, for a worker or a person to run again beside it; nothing was forked. "
            "Fork it once that run pauses or ends, or at a version before the call"
        )
        raise ToolCallRunningError(msg, thread_id=thread_id, tool_call_id=call_id)

    def _checkpoint_version(self, thread_id: str, sequence: int) -> int:
        checkpoints = self._reader.load(thread_id).checkpoints
        for checkpoint in checkpoints:
            if checkpoint.sequence == sequence:
                return checkpoint.version
        msg = (
            f"thread {thread_id!r} has no checkpoint {sequence}; it keeps "
            f"{[c.sequence for c in checkpoints]}"
        )
        raise CheckpointNotFoundError(msg)

    def forks(self) -> tuple[ForkRecord, ...]:
        """As :meth:`covonaut_es.Store.forks`."""
        return tuple(map(_record, self._records.events_of_type(AgentThread.Forked, topicless=True)))

    def under(self, root_thread_id: str) -> SessionTree:
        """The tree of the root and the threads forked from it, directly or not, read
        from the index of forks by parent: it costs the threads under the root.

        Raises:
            InvalidThreadIdError: The id is no str.
        """
        thread_aggregate_id(root_thread_id)  # the index is read by id: refuse no text
        records: list[ForkRecord] = []
        seen = {root_thread_id}
        stack = [root_thread_id]
        with self._index_lock:
            self._catch_up()
            while stack:
                for fork in self._children.get(stack.pop(), ()):
                    if fork.thread_id not in seen:  # forks altered into a loop end here
                        seen.add(fork.thread_id)
                        records.append(fork)
                        stack.append(fork.thread_id)
        return SessionTree(records)

    def _catch_up(self) -> None:
        """Add the forks the log recorded since the index last read it (the first call
        reads every fork once); the caller holds the index's lock."""
        top = self._records.log_position()
        if top <= self._indexed_to:
            return
        # A fork's first event that does not decode, or was moved out of its stream, is
        # left out, with a warning: the fork does not load, and the trees of the others
        # are read on (forks() refuses it).
        for notification, fork in _logs.passing_over(
            logger,
            self._records.notifications(AgentThread.Forked, after=self._indexed_to),
            self._fork_of,
            reader="the fork index",
            then="its fork is left out of its parent's tree",
        ):
            if fork is not None:
                self._children.setdefault(fork.parent.thread_id, []).append(fork)
            top = max(top, notification.id)
        self._indexed_to = top

    def _fork_of(self, notification: Any) -> ForkRecord | None:
        """The fork a ``Forked`` record of the log records.

        Raises:
            SerializationError: It does not decode.
            ThreadStateError: Its row was moved out of its stream.
        """
        event = self._app.mapper.to_domain_event(notification)
        return _record(event) if isinstance(event, AgentThread.Forked) else None

    def parent(self, thread_id: str) -> ThreadParent | None:
        """As :meth:`covonaut_es.Store.parent`."""
        forked = self._records.forked_event(thread_id)
        return ThreadParent(forked.parent_thread_id, forked.parent_version) if forked else None


def _record(event: AgentThread.Forked) -> ForkRecord:
    """The fork ``event`` (read from the log) records, refused when its row was moved or
    copied out of its place (:func:`check_first_event`)."""
    check_first_event(event)
    return ForkRecord(
        event.thread_id,
        ThreadParent(event.parent_thread_id, event.parent_version),
        event.timestamp,
    )
