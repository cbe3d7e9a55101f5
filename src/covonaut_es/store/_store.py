"""Thread stores: where threads' event streams and snapshots live.

A :class:`Store` wraps one eventsourcing ``Application`` configured for one back end
(in memory, a SQLite file, PostgreSQL) with the msgspec mapper: one that
:mod:`covonaut_es.store._application` opens, or the user's own. With that module it is the only
code that talks to eventsourcing's persistence; the runtime loads and saves threads
through it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any, Protocol, cast
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application, Repository
from eventsourcing.persistence import IntegrityError, OperationalError
from eventsourcing.utils import get_topic

from covonaut_es._aio import in_worker_thread
from covonaut_es._clock import utc_now
from covonaut_es._closing import Closing
from covonaut_es.domain import (
    AgentThread,
    Checkpoint,
    ForkRecord,
    Label,
    PauseKind,
    ThreadParent,
    ThreadSnapshot,
    ThreadState,
    thread_aggregate_id,
)
from covonaut_es.domain._named_states import StateSaved, state_stream_id
from covonaut_es.domain._tree import SessionTreeQueries
from covonaut_es.errors import (
    ConfigurationError,
    MissingEventError,
    MissingFirstEventError,
    ReadOnlyStoreError,
    SerializationError,
    ThreadConflictError,
    ThreadNotFoundError,
)
from covonaut_es.migrations import Upcaster
from covonaut_es.migrations._upcasting import NO_MIGRATORS
from covonaut_es.store import _audit
from covonaut_es.store._application import (
    AgentApplication,
    ThreadsApplication,
    open_application,
)
from covonaut_es.store._audit import AuditEntry, AuditReport
from covonaut_es.store._backend import backend_of
from covonaut_es.store._chain import chain_of
from covonaut_es.store._forks import ThreadForking
from covonaut_es.store._heads import FENCES
from covonaut_es.store._leasing import ThreadLeasing
from covonaut_es.store._positions import LogPositions
from covonaut_es.store._records import StoredRecords, following_fork, storable
from covonaut_es.store._snapshot_cache import SnapshotCache
from covonaut_es.store._submissions import ThreadSubmissions
from covonaut_es.store._urls import READ_ONLY, redact


class _BaseLoader(Protocol):
    def __call__(self, thread_id: str, *, version: int | None = None) -> AgentThread | None: ...


_FIRST_EVENTS = (AgentThread.Started, AgentThread.StartedFromState, AgentThread.Forked)
"""The events a thread's own stream can start with."""

SNAPSHOT_MIN_VERSION = 64
"""No snapshot is written for a thread shorter than this: replaying it is cheap."""

SNAPSHOT_TAIL_SHARE = 16
"""A new snapshot replaces the thread's last one once the events after that one are a
sixteenth of the thread (ADR 0014): replaying them then costs less than decoding the
snapshot, and rewriting the state that often costs a constant share per event."""


class Store(
    StoredRecords,
    ThreadForking,
    ThreadLeasing,
    ThreadSubmissions,
    LogPositions,
    SessionTreeQueries,
    Closing,
):
    """Threads' event streams, snapshots and checkpoints in one back end.

    Create one with :func:`open_store`. A store is safe to share between agents and
    threads of one process; several processes may open the same SQLite file or
    PostgreSQL database, and optimistic concurrency keeps each thread's stream whole.
    """

    def __init__(
        self,
        url: str,
        env: Mapping[str, str],
        *,
        max_checkpoints_per_thread: int = 0,
        application: Application[UUID] | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        if max_checkpoints_per_thread < 0:
            msg = (
                "max_checkpoints_per_thread must be 0 (no cap) or more, "
                f"got {max_checkpoints_per_thread}"
            )
            raise ConfigurationError(msg)
        self.url = redact(url)
        self.read_only = env.get(READ_ONLY) == "y"
        self.max_checkpoints_per_thread = max_checkpoints_per_thread
        self.clock = clock
        self._owns_app = application is None
        self._app = application or open_application(self.url, env)
        self._backend = (
            self._app.backend
            if isinstance(self._app, ThreadsApplication)
            else backend_of(self._app.factory)  # a user's application
        )
        self._snapshot_versions: dict[UUID, int] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_application(
        cls, application: Application[UUID], *, max_checkpoints_per_thread: int = 0
    ) -> Store:
        """A store of the threads kept in your own eventsourcing application.

        Agents configured with it load and save their threads through ``application``,
        in its database, beside your aggregates; ``store.load(thread_id)`` gives you a
        thread to change and save together with them: ``application.save(claim,
        thread)``. Closing the store leaves the application open.

        Args:
            application: An application of a subclass of
                :class:`~covonaut_es.AgentApplication` (it reads threads and seals their
                chains).
            max_checkpoints_per_thread: As for :func:`open_store`.

        Raises:
            ConfigurationError: The application is not an ``AgentApplication``.
        """
        if not isinstance(application, AgentApplication):
            msg = (
                f"{type(application).__name__} is not an AgentApplication (it maps events "
                f"with {type(application.mapper).__name__}), so it can neither read agent "
                "threads nor seal their hash chains; make covonaut_es.AgentApplication its "
                "base class (or a mixin)"
            )
            raise ConfigurationError(msg)
        url = f"application:{type(application).__name__}"
        return cls(
            url, {}, max_checkpoints_per_thread=max_checkpoints_per_thread, application=application
        )

    # Threads ----------------------------------------------------------------------

    def load(
        self,
        thread_id: str,
        *,
        version: int | None = None,
        snapshot_migrators: Mapping[int, Upcaster] = NO_MIGRATORS,
    ) -> AgentThread:
        """Rebuild a thread from its newest snapshot at or below ``version`` and the
        events after it.

        Args:
            thread_id: The thread.
            version: The version to rebuild; the head by default.
            snapshot_migrators: The application's upcasters for snapshots, replacing
                the library's own for their steps (``CheckpointSettings.migrators``). A
                snapshot that cannot be upgraded is passed over and the thread rebuilt
                from its events.

        Raises:
            ThreadNotFoundError: The thread has no events (at that version).
            SerializationError: A stored event cannot be read.
        """
        thread = self.find(thread_id, version=version, snapshot_migrators=snapshot_migrators)
        if thread is None:
            at = "" if version is None else f" at version {version}"
            msg = f"thread {thread_id!r} not found{at} in store {self.url}"
            raise ThreadNotFoundError(msg)
        return thread

    def find(
        self,
        thread_id: str,
        *,
        version: int | None = None,
        snapshot_migrators: Mapping[int, Upcaster] = NO_MIGRATORS,
    ) -> AgentThread | None:
        """Like :meth:`load`, but None when the thread does not exist."""
        if version is not None and version < 1:
            return None
        version = storable(version)
        aggregate_id = thread_aggregate_id(thread_id)
        snapshot_seen: list[int] = []

        def project(thread: AgentThread | None, events: Any) -> AgentThread | None:
            for event in events:
                if isinstance(event, ThreadSnapshot):
                    snapshot_seen.append(event.originator_version)
                thread = self._fold(thread, event, self.find, thread_id)
            return thread

        try:
            with self._reading(thread_id):
                thread = self._repository(snapshot_migrators).get(
                    aggregate_id, version=version, projector_func=project
                )
        except AggregateNotFoundError:
            return self._inherited(thread_id, version, self.find)
        if snapshot_seen and version is None:
            self._remember_snapshot(aggregate_id, snapshot_seen[0])
        return thread

    def _fold(
        self, thread: AgentThread | None, event: Any, load_base: _BaseLoader, thread_id: str
    ) -> AgentThread | None:
        self._check_follows(thread_id, None if thread is None else thread.version, event)
        if thread is None and isinstance(event, AgentThread.Forked):
            with following_fork(thread_id, event.parent_thread_id, self.url):
                base = load_base(event.parent_thread_id, version=event.parent_version)
            if base is None:
                msg = (
                    f"fork {event.thread_id!r} branches from {event.parent_thread_id!r} at "
                    f"version {event.parent_version}, which is missing from {self.url}"
                )
                raise ThreadNotFoundError(msg)
            folded = event.graft(base)
        else:
            folded = event.mutate(thread)
        if not isinstance(event, ThreadSnapshot):  # a snapshot brings its own
            folded.chain_head = chain_of(event)
        return folded

    @contextlib.contextmanager
    def _reading(self, thread_id: str) -> Iterator[None]:
        """Name the thread in a SerializationError raised while reading its stream (a
        record knows only its stream's id)."""
        try:
            yield
        except SerializationError as exc:
            named = f"thread {thread_id!r}"
            if str(exc).startswith(named):
                raise
            raise type(exc)(f"{named} in store {self.url}: {exc}") from exc

    def _check_follows(self, thread_id: str, head: int | None, event: Any) -> None:
        """Raise unless ``event`` follows ``head`` (None: the stream's first) in the
        thread's stream; a snapshot follows anything."""
        if isinstance(event, ThreadSnapshot):
            return
        version: int = event.originator_version
        if head is None and not isinstance(event, _FIRST_EVENTS):
            msg = (
                f"thread {thread_id!r} in store {self.url} has lost its first event: its "
                f"stream starts with a {type(event).__name__} at version {version}; "
                "restore the store from a backup"
            )
            raise MissingFirstEventError(msg, thread_id=thread_id, version=version)
        if head is not None and version != head + 1:
            msg = (
                f"thread {thread_id!r} in store {self.url} has lost its event at version "
                f"{head + 1}: its stream goes from version {head} to {version}; restore "
                "the store from a backup"
            )
            raise MissingEventError(msg, thread_id=thread_id, version=head + 1)

    def _inherited(
        self, thread_id: str, version: int | None, load_base: _BaseLoader
    ) -> AgentThread | None:
        """A fork's versions up to its branch point are its parent's."""
        forked = self._forked_event(thread_id)
        if forked is None or version is None or version > forked.parent_version:
            return None
        with following_fork(thread_id, forked.parent_thread_id, self.url):
            return load_base(forked.parent_thread_id, version=version)

    def _forked_event(self, thread_id: str) -> AgentThread.Forked | None:
        first = next(iter(self._app.events.get(thread_aggregate_id(thread_id), limit=1)), None)
        return first if isinstance(first, AgentThread.Forked) else None

    def exists(self, thread_id: str) -> bool:
        """Whether the thread has any events."""
        events = self._app.events.get(thread_aggregate_id(thread_id), limit=1)
        return any(True for _ in events)

    def head_version(self, thread_id: str) -> int | None:
        """The version of the thread's newest stored event (one indexed read, nothing
        decoded); None when its own stream has none."""
        stream = thread_aggregate_id(thread_id)
        newest = self._app.recorder.select_events(stream, desc=True, limit=1)
        return newest[0].originator_version if newest else None

    def save(self, thread: AgentThread) -> None:
        """Append the thread's pending events atomically.

        Under the thread's run lease (:meth:`lease`), the save carries the lease's
        token, and the store refuses it once a newer lease of the thread exists.

        Raises:
            ThreadConflictError: Another writer appended to the thread first; nothing
                of this save was stored.
            LeaseLostError: The run lease this task holds on the thread was lost;
                nothing of this save was stored.
        """
        pending = thread.pending_events
        if not pending:
            return
        self._refuse_if_read_only(f"thread {thread.thread_id!r} was not saved")
        expected = pending[0].originator_version - 1
        lease = self.held_lease(thread.thread_id)
        fences = (
            {FENCES: [(thread.id, lease.token, lease.session)]} if lease and lease.fenced else {}
        )
        try:
            self._app.save(thread, **fences)
        except OperationalError as exc:
            if "readonly" not in str(exc):
                raise
            msg = (
                f"store {self.url} is read-only: thread {thread.thread_id!r} was not saved; "
                "make the file writable, or open it without ?mode=ro"
            )
            raise ReadOnlyStoreError(msg) from exc
        except IntegrityError as exc:
            msg = (
                f"thread {thread.thread_id!r} was changed by another writer: this writer "
                f"started from version {expected} but that version is no longer the head; "
                "reload the thread and try again"
            )
            raise ThreadConflictError(
                msg, thread_id=thread.thread_id, expected_version=expected
            ) from exc

    def snapshot_if_due(self, thread: AgentThread) -> bool:
        """Store a snapshot of a just-saved thread if it pays, replacing its older one
        (ADR 0014); the run loop asks at every checkpoint.

        A snapshot is written once the events since the thread's last one are at least
        a sixteenth of its versions (and at least 64), so a restore replays at most
        that share of the thread, and the snapshot bytes written per event stay
        constant. Only the newest snapshot is kept.

        Returns:
            Whether a snapshot was written.
        """
        aggregate_id = thread.id
        with self._lock:
            last = self._snapshot_versions.get(aggregate_id, 0)
        tail = thread.version - last
        if tail < max(SNAPSHOT_MIN_VERSION, thread.version // SNAPSHOT_TAIL_SHARE):
            return False
        if not isinstance(self._app.snapshots, SnapshotCache):
            return False  # an application of the caller's, with snapshotting off
        with contextlib.suppress(IntegrityError):  # another writer stored this very one
            self._backend.replace_snapshot(self._app.snapshots, ThreadSnapshot.take(thread))
        self._remember_snapshot(aggregate_id, thread.version)
        return True

    def _log_position(self) -> int:
        """The position of the newest event in the store's log (0 when empty):
        projections have caught up when they reach it."""
        return self._app.recorder.max_notification_id() or 0

    def _has_events_after(self, position: int, *event_types: type[AgentThread.Event]) -> bool:
        """Whether the log holds events (of these types, or any) after ``position``."""
        topics = [get_topic(cls) for cls in event_types]
        found = self._app.recorder.select_notifications(
            position, 1, topics=topics, inclusive_of_start=False
        )
        return bool(found)

    def events_after(self, thread_id: str, version: int) -> tuple[AgentThread.Event, ...]:
        """The thread's own events after ``version``, in order (what other writers
        appended since a runner loaded it at that version)."""
        with self._reading(thread_id):
            events = self._app.events.get(thread_aggregate_id(thread_id), gt=version)
            return tuple(cast(AgentThread.Event, event) for event in events)

    def threads_with_review(self, review_id: str) -> tuple[str, ...]:
        """The threads that hold the review: the one that asked for it, and the forks
        that inherited it while it was pending, in creation order. Read from the log's
        review requests and forks, not from the threads themselves."""
        found: list[str] = []
        for event in self._events_of_type(AgentThread.ReviewRequested, AgentThread.Forked):
            if isinstance(event, AgentThread.ReviewRequested):
                if event.request.review_id == review_id:
                    found.append(event.request.thread_id)
            elif event.parent_thread_id in found and any(
                isinstance(i.data, dict) and i.data.get("review_id") == review_id
                for i in event.interrupts
                if i.kind is PauseKind.REVIEW
            ):
                found.append(event.thread_id)
        return tuple(dict.fromkeys(found))

    def thread_ids(self) -> Iterator[str]:
        """The ids of all threads, forks included, in creation order."""
        for event in self._events_of_type(
            AgentThread.Started, AgentThread.StartedFromState, AgentThread.Forked
        ):
            yield event.thread_id

    def checkpoints(self, thread_id: str) -> tuple[Checkpoint, ...]:
        """The thread's retained checkpoints, oldest first."""
        return tuple(self.load(thread_id).checkpoints)

    def history(self, thread_id: str) -> tuple[AgentThread.Event, ...]:
        """Every event of the thread in order, a fork's inherited events first; each
        has ``originator_version`` and ``timestamp``."""
        with self._reading(thread_id):
            own: tuple[AgentThread.Event, ...] = tuple(
                self._app.events.get(thread_aggregate_id(thread_id))  # type: ignore[arg-type]
            )
        if not own:
            msg = f"thread {thread_id!r} not found in store {self.url}"
            raise ThreadNotFoundError(msg)
        head: int | None = None
        for event in own:
            self._check_follows(thread_id, head, event)
            head = event.originator_version
        if isinstance(own[0], AgentThread.Forked):
            parent = own[0].parent_thread_id
            with following_fork(thread_id, parent, self.url):
                inherited = self.history(parent)[: own[0].parent_version]
            return inherited + own
        return own

    def state_at(self, thread_id: str, version: int | None = None) -> ThreadState:
        """The thread's state as of ``version`` (default: the head), read-only."""
        return self.load(thread_id, version=version).state

    def replay_state(self, thread_id: str) -> ThreadState:
        """The thread's state rebuilt from its events alone, ignoring snapshots."""
        thread = self._replay(thread_id)
        if thread is None:
            msg = f"thread {thread_id!r} not found in store {self.url}"
            raise ThreadNotFoundError(msg)
        return thread.state

    aload = in_worker_thread(load)
    afind = in_worker_thread(find)
    aexists = in_worker_thread(exists)
    acheckpoints = in_worker_thread(checkpoints)
    ahistory = in_worker_thread(history)
    astate_at = in_worker_thread(state_at)
    areplay_state = in_worker_thread(replay_state)

    def _replay(self, thread_id: str, *, version: int | None = None) -> AgentThread | None:
        thread: AgentThread | None = None
        with self._reading(thread_id):
            for event in self._app.events.get(thread_aggregate_id(thread_id), lte=version):
                thread = self._fold(thread, event, self._replay, thread_id)
        return thread or self._inherited(thread_id, version, self._replay)

    # Audits -------------------------------------------------------------------------

    def replay(self, thread_id: str) -> Iterator[AuditEntry]:
        """Each event of the thread (a fork's inherited ones first) with its version,
        time and a readable summary, read from the log alone."""
        return _audit.replay(self, thread_id)

    def verify(self, thread_id: str) -> AuditReport:
        """Check the thread's hash chain, and its checkpoints and snapshots against the
        state rebuilt from its events alone; see :class:`~covonaut_es.store.AuditReport`."""
        return _audit.verify(self, thread_id)

    # Forks and the session tree ---------------------------------------------------

    def forks(self) -> tuple[ForkRecord, ...]:
        """Every fork in the store, read from the event log."""
        return tuple(
            ForkRecord(
                event.thread_id,
                ThreadParent(event.parent_thread_id, event.parent_version),
                event.timestamp,
            )
            for event in self._events_of_type(AgentThread.Forked)
        )

    def parent(self, thread_id: str) -> ThreadParent | None:
        """The thread and version a fork branched from; None for a root."""
        forked = self._forked_event(thread_id)
        return ThreadParent(forked.parent_thread_id, forked.parent_version) if forked else None

    def _labels_of(self, thread_id: str) -> tuple[Label, ...]:
        return tuple(self.load(thread_id).labels)

    def _events_of_type(self, *event_classes: type[AgentThread.Event]) -> Iterator[Any]:
        """Events of these types across all threads, in log order (filtered in SQL)."""
        for notification in self._notifications(*event_classes):
            yield self._app.mapper.to_domain_event(notification)

    # Named states -----------------------------------------------------------------

    def write_state(self, key: str, document: Mapping[str, Any]) -> None:
        """Save a named state document under ``key``; the last save wins.

        Each save is an event in the key's own stream, so the store keeps every save.

        Raises:
            InvalidStateKeyError: The key is not allowed.
        """
        stream = state_stream_id(key)
        self._refuse_if_read_only(f"state {key!r} was not saved")
        while True:
            last = self._app.recorder.select_events(stream, desc=True, limit=1)
            saved = StateSaved(
                originator_id=stream,
                originator_version=last[0].originator_version + 1 if last else 1,
                timestamp=StateSaved.create_timestamp(),
                key=key,
                document=dict(document),
            )
            with contextlib.suppress(IntegrityError):  # another writer saved first: go after it
                self._app.events.put([saved])
                return

    def read_state(self, key: str) -> dict[str, Any] | None:
        """The document last saved under ``key``, or None.

        Raises:
            InvalidStateKeyError: The key is not allowed.
            SerializationError: The stored record cannot be read.
        """
        for saved in self._app.events.get(state_stream_id(key), desc=True, limit=1):
            assert isinstance(saved, StateSaved)
            return saved.document
        return None

    # Lifecycle --------------------------------------------------------------------

    def close(self) -> None:
        """Release connections. The store cannot be used afterwards.

        A store made by :meth:`from_application` leaves the application open.
        """
        self._close_leases()
        if self._owns_app:
            self._app.close()

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    def _repository(self, snapshot_migrators: Mapping[int, Upcaster]) -> Repository[UUID]:
        if not snapshot_migrators:
            return self._app.repository
        assert isinstance(self._app.snapshots, SnapshotCache)
        cache = self._app.snapshots.with_migrators(snapshot_migrators)
        return Repository(self._app.events, snapshot_store=cache)

    def _remember_snapshot(self, aggregate_id: UUID, version: int) -> None:
        with self._lock:
            if version > self._snapshot_versions.get(aggregate_id, 0):
                self._snapshot_versions[aggregate_id] = version
