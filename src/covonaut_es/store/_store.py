"""Thread stores: where threads' event streams and snapshots live.

A :class:`Store` wraps one eventsourcing ``Application`` configured for one back end
(in memory, a SQLite file, PostgreSQL) with the msgspec mapper: one that
:mod:`covonaut_es.store._application` opens, or the user's own. It is composed of
collaborators, each in a module of its own (ADR 0037), and its methods hand each call to
one of them: ``_records`` (stored records and the log), ``_reader`` (loads, histories,
replays), ``_writer`` (saves, snapshots), ``_forks``, ``_leasing``, ``_submissions`` and
``_states`` (named states). The library's other packages reach what they need of them
through the store's ports: :attr:`Store.log` (the log and its records),
:attr:`Store.submissions` and :attr:`Store.outstanding_threads`; never through a private
attribute (ADR 0121).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from datetime import datetime
from typing import Any

from covonaut_es._aio import in_worker_thread
from covonaut_es._arguments import check_instance, check_text, check_whole
from covonaut_es._clock import AwareClock, checked_time, utc_now
from covonaut_es._closing import Closing
from covonaut_es.domain import (
    AgentThread,
    BranchPoint,
    Checkpoint,
    ForkRecord,
    SessionTree,
    ThreadParent,
    ThreadState,
    ThreadTree,
    TreeStats,
)
from covonaut_es.errors import ConfigurationError, ThreadBusyError, ThreadNotFoundError
from covonaut_es.migrations import Upcaster
from covonaut_es.migrations._upcasting import NO_MIGRATORS
from covonaut_es.store import _audit
from covonaut_es.store._application import AgentApplication, ThreadsApplication, open_application
from covonaut_es.store._audit import AuditEntry, AuditReport
from covonaut_es.store._backend import backend_of
from covonaut_es.store._forks import Forks
from covonaut_es.store._leases import Lease, WorkerRecord, check_worker_id
from covonaut_es.store._leasing import Leasing
from covonaut_es.store._lineage import ancestry
from covonaut_es.store._listing import ThreadListing, ThreadPage
from covonaut_es.store._log import StoreLog
from covonaut_es.store._outstanding import OutstandingThreads
from covonaut_es.store._positions import LogPositions
from covonaut_es.store._read_only import WriteGuard, guarded
from covonaut_es.store._reader import ThreadReader
from covonaut_es.store._records import StoredRecords
from covonaut_es.store._review_index import ReviewIndex
from covonaut_es.store._states import StoredStates
from covonaut_es.store._submissions import Submissions
from covonaut_es.store._url_secrets import redact
from covonaut_es.store._urls import READ_ONLY
from covonaut_es.store._writer import ThreadWriter


@guarded("Store")
class Store(Closing):
    """Threads' event streams, snapshots and checkpoints in one back end.

    Create one with :func:`open_store`. A store is safe to share between agents and
    threads of one process; several processes may open the same SQLite file or
    PostgreSQL database, and optimistic concurrency keeps each thread's stream whole.
    Once closed, each of its methods and properties raises ``StoreClosedError``.
    """

    def __init__(
        self,
        url: str,
        env: Mapping[str, str],
        *,
        max_checkpoints_per_thread: int = 0,
        application: AgentApplication | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        check_whole("max_checkpoints_per_thread", max_checkpoints_per_thread, least=0)
        self.url = redact(url)
        self.read_only = env.get(READ_ONLY) == "y"
        self.max_checkpoints_per_thread = max_checkpoints_per_thread
        self.clock = AwareClock(clock)
        self._owns_app = application is None
        app = self._app = application or open_application(self.url, env)
        backend = self._backend = (
            app.backend
            if isinstance(app, ThreadsApplication)
            else backend_of(app.factory)  # a user's application
        )
        guard = self._guard = WriteGuard(self.url, read_only=self.read_only)
        self._records = StoredRecords(app, backend)
        self._leasing = Leasing(app, backend, guard)
        self._writer = ThreadWriter(app, backend, guard, self._leasing.held_lease)
        self._reader = ThreadReader(app, self._records, self.url, self._writer.remember_snapshot)
        self._forks = Forks(app, backend, self._records, self._reader, guard, self.clock)
        self._submissions = Submissions(
            app, guard, self._reader.exists, self._leasing.held_lease, self._reader.head_version
        )
        self._states = StoredStates(app, guard)
        self._listing = ThreadListing(app, backend, self._records, self._reader, guard)
        outstanding = None if self.read_only else backend.outstanding_table(app.recorder)
        self._outstanding = None if outstanding is None else OutstandingThreads(app, outstanding)
        reviews = None if self.read_only else backend.review_index_table(app.recorder)
        self._review_index = None if reviews is None else ReviewIndex(app, reviews)
        self._positions = LogPositions(app, guard)
        self.log = StoreLog(self._records, self._reader, self._positions, guard)
        """The store's log and its records as stored: what the workers, the review
        queue and the audits read of them."""

    @classmethod
    def from_application(
        cls, application: AgentApplication, *, max_checkpoints_per_thread: int = 0
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

    # Reading threads ---------------------------------------------------------------

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
            ThreadNotFoundError: The thread has no events, or no such version: one
                below 1 or past its head (a fork's go on from its parent's) is refused
                naming the versions it has, as a fork at it is.
            MissingEventError: Events the thread's later ones follow were deleted;
                ``MissingFirstEventError`` when its head was anchored and none of its
                events can be read (deleted, or hidden from this connection).
            SerializationError: A stored event cannot be read.
            ConfigurationError: ``version`` is no whole number, or
                ``snapshot_migrators`` no mapping.
        """
        _check_read(version, snapshot_migrators)
        return self._reader.load(thread_id, version=version, snapshot_migrators=snapshot_migrators)

    def find(
        self,
        thread_id: str,
        *,
        version: int | None = None,
        snapshot_migrators: Mapping[int, Upcaster] = NO_MIGRATORS,
    ) -> AgentThread | None:
        """Like :meth:`load`, but None when the thread does not exist (at that
        version)."""
        _check_read(version, snapshot_migrators)
        return self._reader.find(thread_id, version=version, snapshot_migrators=snapshot_migrators)

    def exists(self, thread_id: str) -> bool:
        """Whether the thread has any events."""
        return self._reader.exists(thread_id)

    def head_version(self, thread_id: str) -> int | None:
        """The version of the thread's newest stored event (one indexed read, nothing
        decoded); None when its own stream has none."""
        return self._reader.head_version(thread_id)

    def events_after(self, thread_id: str, version: int) -> tuple[AgentThread.Event, ...]:
        """The thread's own events after ``version``, in order (what other writers
        appended since a runner loaded it at that version).

        Raises:
            ConfigurationError: ``version`` is no whole number of at least 0.
        """
        check_whole("version", version, least=0)
        return self._reader.events_after(thread_id, version)

    def threads_with_review(self, review_id: str) -> tuple[str, ...]:
        """The threads that hold the review: the one that asked for it, and the forks
        that inherited it while it was pending, in creation order. Read from the log's
        review requests and forks, not from the threads themselves: through the store's
        index of them where it keeps one (a lookup by key), kept only if it names a
        thread, the first one named asked for the review and each one holds it, else
        from the log (ADR 0078).

        Raises:
            ConfigurationError: ``review_id`` is no str.
        """
        check_text("review_id", review_id)
        if self._review_index is not None:
            indexed = self._review_index.holders(review_id, self._records)
            if indexed and all(
                self._holds(t, review_id, asked=n == 0) for n, t in enumerate(indexed)
            ):
                return indexed
        return self._reader.threads_with_review(review_id)

    def _holds(self, thread_id: str, review_id: str, *, asked: bool) -> bool:
        """Whether the thread holds the review, and (``asked``) is the one whose request
        it is, not a fork that inherited it."""
        thread = self.find(thread_id)
        review = None if thread is None else thread.reviews.get(review_id)
        return review is not None and (not asked or review.request.thread_id == thread_id)

    def thread_ids(self) -> Iterator[str]:
        """The ids of all threads, forks included, in creation order.

        Raises:
            StoredRowError: A row of the log holds no topic (written around the library).
            ThreadStateError: A thread's first event is stored in another thread's stream.
        """
        return self._reader.thread_ids()

    def list_threads(self, *, after: int | None = None, limit: int = 1000) -> ThreadPage:
        """One page of the store's threads, forks included, each summarized (status,
        turns, first and last activity, pauses awaiting a person, whom it waits for),
        in the order the store first listed them (creation order, for threads written
        between listings). The first listing after writes loads each thread written
        since; otherwise a page costs one scan of the head anchors and the page.

        Args:
            after: The ``next_after`` of the previous page; None for the first page.
            limit: The most threads on the page, 1 to 10,000.

        Raises:
            ConfigurationError: ``limit`` or ``after`` is not allowed.
        """
        return self._listing.page(after=after, limit=limit)

    def checkpoints(self, thread_id: str) -> tuple[Checkpoint, ...]:
        """The thread's retained checkpoints, oldest first."""
        return tuple(self.load(thread_id).checkpoints)

    def history(self, thread_id: str) -> tuple[AgentThread.Event, ...]:
        """Every event of the thread in order, a fork's inherited events first; each
        has ``originator_version`` and ``timestamp``."""
        return self._reader.history(thread_id)

    def state_at(self, thread_id: str, version: int | None = None) -> ThreadState:
        """The thread's state as of ``version`` (default: the head), read-only; a
        version the thread does not have is refused as by :meth:`load`."""
        return self.load(thread_id, version=version).state

    def replay_state(self, thread_id: str) -> ThreadState:
        """The thread's state rebuilt from its events alone, ignoring snapshots."""
        thread = self._reader.replay(thread_id)
        if thread is None:
            raise ThreadNotFoundError.in_store(thread_id, self.url)
        return thread.state

    aload = in_worker_thread(load)
    afind = in_worker_thread(find)
    aexists = in_worker_thread(exists)
    acheckpoints = in_worker_thread(checkpoints)
    ahistory = in_worker_thread(history)
    astate_at = in_worker_thread(state_at)
    areplay_state = in_worker_thread(replay_state)

    # Writing threads ---------------------------------------------------------------

    def save(self, thread: AgentThread) -> None:
        """Append the thread's pending events atomically.

        Under the thread's run lease (:meth:`lease`), the save carries the lease's
        token, and the store refuses it once a newer lease of the thread exists.

        Raises:
            ThreadConflictError: Another writer appended to the thread first; nothing
                of this save was stored.
            LeaseLostError: The run lease this task holds on the thread was lost;
                nothing of this save was stored.
            StoreUnavailableError: The database failed the write (its disk full, its
                connection lost); nothing of this save was stored.
            ConfigurationError: ``thread`` is no AgentThread.
        """
        check_instance("thread", thread, AgentThread, "an AgentThread")
        self._writer.save(thread)

    def snapshot_if_due(self, thread: AgentThread, *, at_rest: bool = False) -> bool:
        """Store a snapshot of a just-saved thread if it pays, replacing its older one
        (ADR 0014); the run loop asks at every checkpoint, and when a run ends.

        A snapshot is written once the events since the thread's last one are at least
        a sixteenth of its versions (and at least 64), so a restore replays at most
        that share of the thread, and the snapshot bytes written per event stay
        constant. Only the newest snapshot is kept. No thread shorter than 64 events
        has one.

        Args:
            thread: The thread, saved up to its version.
            at_rest: A run of the thread has just ended, and its next read is a
                restore: a snapshot is due once the events since the last one are a
                sixty-fourth of the thread (and at least 32; ADR 0085), where the store
                keeps one snapshot per thread (not in memory, which keeps them all); a
                database error writing it is logged, not raised, as the run is stored.

        Returns:
            Whether a snapshot was written.

        Raises:
            ConfigurationError: ``thread`` is no AgentThread, or ``at_rest`` no bool.
        """
        check_instance("thread", thread, AgentThread, "an AgentThread")
        check_instance("at_rest", at_rest, bool, "True or False")
        return self._writer.snapshot_if_due(thread, at_rest=at_rest)

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

    def fork(
        self,
        thread_id: str,
        *,
        at_version: int | None = None,
        at_checkpoint: int | None = None,
        new_thread_id: str | None = None,
        now: datetime | None = None,
    ) -> str:
        """Create a thread whose history is ``thread_id``'s stream up to a version.

        The fork stores one small ``Forked`` event and no copy of the parent's events;
        the parent is not written to. Forking at an interrupt gives a branch paused on
        the same interrupt.

        Args:
            thread_id: The parent thread.
            at_version: The parent's version to branch at (default: its head).
            at_checkpoint: Or the sequence number of one of the parent's checkpoints.
            new_thread_id: The fork's id (default: derived from the parent's, unique).

        Returns:
            The new thread's id.

        Raises:
            ThreadNotFoundError: The parent, the version or the checkpoint is missing.
            ThreadConflictError: A thread with ``new_thread_id`` already exists.
            InvalidThreadIdError: ``new_thread_id`` is not a valid thread id.
            ConfigurationError: ``at_version`` or ``at_checkpoint`` is no whole number,
                or ``now`` no time a clock may give (timezone-aware, within the range
                of ``AwareClock``).
            StoreUnavailableError: The database failed the write; no fork was stored.
            ToolCallRunningError: A run holds the parent's lease and the parent holds
                calls open at that version: one may be running there, and the fork
                would take it open, in doubt, for a worker or a person to run again
                beside it. Nothing was stored.
        """
        for name, number in (("at_version", at_version), ("at_checkpoint", at_checkpoint)):
            if number is not None:
                check_whole(name, number)
        _check_now(now)
        self._guard.refuse_if_read_only(f"thread {thread_id!r} was not forked")
        return self._forks.fork(
            thread_id,
            at_version=at_version,
            at_checkpoint=at_checkpoint,
            new_thread_id=new_thread_id,
            now=now,
            holding=self._forking,
        )

    @contextlib.contextmanager
    def _forking(self, thread_id: str, version: int) -> Iterator[None]:
        """Hold ``thread_id``'s run lease while a fork of it at ``version`` is written, so
        that no run of it starts meanwhile; where a run holds it (another's, or the
        caller's own: a tool forking its own thread), refuse the fork if it would hold
        calls open, one of which may be running in that run (helper-253, helper-254)."""
        running = self._leasing.held_lease(thread_id) is not None
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(self._leasing.lease(thread_id))
            except ThreadBusyError:
                running = True
            if running:
                self._forks.refuse_open_calls(thread_id, version)
            yield

    def abandon(self, thread_id: str, reason: str = "", *, now: datetime | None = None) -> None:
        """Give a thread up: its pending reviews leave the reviewer queue and no run
        starts on it again (a fork of it still can).

        Deprecated: use :meth:`ThreadService(store).abandon
        <covonaut_es.service.ThreadService.abandon>`, which retries once on a conflict,
        checks the pause a person gave it up from and their scopes. This alias loads,
        abandons and saves, as before; the store cannot call the service above it.

        Raises:
            ConfigurationError: ``reason`` is no str, or ``now`` no time a clock may
                give (as for :meth:`fork`).
        """
        _deprecated("abandon")
        check_text("reason", reason)
        _check_now(now)
        thread = self.load(thread_id)
        thread.abandon(reason, now=now or self.clock())
        self.save(thread)

    def label(
        self, thread_id: str, label: str, *, version: int | None = None, now: datetime | None = None
    ) -> None:
        """Label a thread, or one of its versions; labels are events of the thread.

        Deprecated: use :meth:`ThreadService(store).label
        <covonaut_es.service.ThreadService.label>`, which retries once on a conflict.
        This alias loads, labels and saves, as before.

        Raises:
            ConfigurationError: ``label`` is no str, ``version`` no whole number, or
                ``now`` no time a clock may give (as for :meth:`fork`).
            ThreadStateError: The label is blank, or the thread has no such version.
        """
        _deprecated("label")
        _check_now(now)
        thread = self.load(thread_id)
        thread.label(label, version=version, now=now or self.clock())
        self.save(thread)

    def forks(self) -> tuple[ForkRecord, ...]:
        """Every fork in the store, read from the event log.

        Raises:
            StoredRowError: A row of the log holds no topic (written around the library).
            ThreadStateError: A fork's first event is stored in another thread's stream.
        """
        return self._forks.forks()

    def parent(self, thread_id: str) -> ThreadParent | None:
        """The thread and version a fork branched from; None for a root."""
        return self._forks.parent(thread_id)

    def session_tree(self) -> SessionTree:
        """The tree of all threads linked by forks, for several queries at once."""
        return SessionTree(self.forks())

    def children(self, thread_id: str) -> tuple[str, ...]:
        """The direct forks of a thread, oldest first."""
        return self._forks.under(thread_id).children(thread_id)

    def path_to_root(self, thread_id: str) -> tuple[str, ...]:
        """The thread, its parent, and so on up to the root.

        Raises:
            ThreadNotFoundError: The forks' first events were altered into a loop.
        """
        chain = ancestry(thread_id, None, self._records.forked_event, self.url)
        return tuple(owner for owner, _ in chain)

    def leaves(self, root_thread_id: str) -> tuple[str, ...]:
        """Threads under the root (the root included) that have no forks."""
        return self._forks.under(root_thread_id).leaves(root_thread_id)

    def branch_points(self, root_thread_id: str) -> tuple[BranchPoint, ...]:
        """Every (thread, version) under the root that forks branched from."""
        return self._forks.under(root_thread_id).branch_points(root_thread_id)

    def tree(self, root_thread_id: str) -> ThreadTree:
        """The nested tree of forks under the root, with every thread's labels."""

        tree = self._forks.under(root_thread_id)
        labels = self._reader.labels_under(tree, root_thread_id)
        return tree.tree(root_thread_id, labels.__getitem__)

    def tree_stats(self, root_thread_id: str) -> TreeStats:
        """Counts over the tree under the root: threads, forks, depth, leaves, branch
        points."""
        return self._forks.under(root_thread_id).stats(root_thread_id)

    # Run leases and workers --------------------------------------------------------

    @contextlib.contextmanager
    def lease(self, thread_id: str) -> Iterator[Lease]:
        """Hold the thread's run lease for the block; every save of the thread in the
        block is fenced by it (refused once a newer lease exists).

        Yields:
            The lease; :meth:`Lease.check` raises once it no longer stands.

        Raises:
            ThreadBusyError: Another runner holds it; nothing was done.
        """
        with self._leasing.lease(thread_id) as lease:
            yield lease

    @contextlib.asynccontextmanager
    async def alease(self, thread_id: str) -> AsyncIterator[Lease]:
        """Like :meth:`lease`, for asyncio: the database is asked in a worker thread."""
        async with self._leasing.alease(thread_id) as lease:
            yield lease

    def held_lease(self, thread_id: str) -> Lease | None:
        """The lease of the thread the current task holds in this store's database.

        Raises:
            InvalidThreadIdError: The id is no str.
        """
        return self._leasing.held_lease(thread_id)

    def name_lease_holder(self, holder: str) -> None:
        """Name who holds the leases this store takes (a worker names itself), shown
        to runners that find a thread busy.

        Raises:
            ConfigurationError: ``holder`` is no str.
        """
        check_text("holder", holder)
        self._leasing.name_lease_holder(holder)

    @property
    def lease_holder(self) -> str:
        """Who holds the leases this store takes from now on: the name
        :meth:`name_lease_holder` gave, else this process's host and id."""
        return self._leasing.holder

    @property
    def database(self) -> str:
        """Names the store's database, alike through every store opened on it, which its
        leases know each other by: a SQLite file by its device and inode; a PostgreSQL
        database by its cluster's system identifier and its oid, with the store's
        schema and events table (by the host, port and database its URL spells where
        the server does not tell its identifier). No credential is in the name."""
        return self._leasing.leases.database

    def threads_held(self) -> tuple[str, ...]:
        """The threads whose run leases this store holds now, sorted: what a worker's
        heartbeat says it runs."""
        return self._leasing.leases.held()

    def publish_worker(self, record: WorkerRecord) -> None:
        """Write a live worker's record (its heartbeat) to the registry. In an
        encrypted store the threads it holds and the calls it runs are sealed under the
        store's key.

        Raises:
            ConfigurationError: ``record`` is no WorkerRecord, or its ``worker_id`` is no
                worker id (:func:`~covonaut_es.store._leases.check_worker_id`), or is
                taken by a live worker.
            ReadOnlyStoreError: The store was opened read-only.
        """
        check_instance("record", record, WorkerRecord, "a WorkerRecord")
        check_worker_id("record.worker_id", record.worker_id)
        self._leasing.publish_worker(record)

    def live_workers(self) -> tuple[WorkerRecord, ...]:
        """The live workers' records, oldest first."""
        return self._leasing.live_workers()

    def withdraw_worker(self, worker_id: str) -> None:
        """Remove a stopping worker's record from the registry: the one this store
        published, or that of a worker that is dead (on SQLite, whose process holds its
        record's lock no more; on PostgreSQL, whose heartbeat is stale). A live worker's
        record, published by another store, is kept.

        Raises:
            ConfigurationError: ``worker_id`` is no worker id
                (:func:`~covonaut_es.store._leases.check_worker_id`), or names a live
                worker whose record another store published.
            ReadOnlyStoreError: The store was opened read-only.
        """
        check_worker_id("worker_id", worker_id)
        self._leasing.withdraw_worker(worker_id)

    @property
    def outstanding_threads(self) -> OutstandingThreads | None:
        """The store's table of the threads its workers may have to run, which a
        starting worker reads instead of the whole log; None in a store opened
        read-only, or whose back end keeps none."""
        return self._outstanding

    # Input for workers, and named states ------------------------------------------

    def submit(self, thread_id: str, text: str) -> int:
        """Hand ``text`` to a thread for a worker to run, as a user message.

        The submission is stored durably in the thread's own submission stream, so a
        :class:`~covonaut_es.Worker` on any machine that follows this store runs it
        (``agent.run(text)``) once the thread is free: not running, not paused. A
        thread that does not exist yet is started by the worker.

        Returns:
            The submission's number in the thread's stream of submissions (1, 2, ...).

        Raises:
            InvalidThreadIdError: The thread id is not allowed: for a thread the store
                does not hold, the rule a new thread's id follows.
            InvalidSubmissionError: ``text`` is not a string that can be stored.
        """
        return self._submissions.submit(thread_id, text)

    asubmit = in_worker_thread(submit)

    @property
    def submissions(self) -> Submissions:
        """The threads' submitted input, as workers read it; a runner records that it
        takes one through :meth:`ThreadService.take_input
        <covonaut_es.service.ThreadService.take_input>`."""
        return self._submissions

    def write_state(self, key: str, document: Mapping[str, Any]) -> None:
        """Save a named state document under ``key``; the last save wins.

        Each save is an event in the key's own stream, so the store keeps every save.

        Raises:
            InvalidStateKeyError: The key is not allowed.
            ConfigurationError: ``document`` is no mapping.
            NonFiniteNumberError: It holds NaN or an infinity; nothing was saved.
            NotJSONDataError: It holds what else JSON cannot carry (an object msgspec
                cannot encode, a key that is no text, a lone surrogate); nothing was
                saved.
        """
        self._states.write_state(key, document)

    def read_state(self, key: str) -> dict[str, Any] | None:
        """The document last saved under ``key``, or None.

        Raises:
            InvalidStateKeyError: The key is not allowed.
            SerializationError: The stored record cannot be read.
        """
        return self._states.read_state(key)

    def ping(self, *, timeout: float = 2.0) -> None:
        """Raise unless the store's database answers one read of its log's end within
        about ``timeout`` seconds, tried once: a health check. Reads of the store retry
        as eventsourcing's do, and wait tens of seconds before they fail when a
        PostgreSQL database is gone. On PostgreSQL the read has a connection of its own,
        which waits at least 2 s to connect (libpq's least ``connect_timeout``), and
        one ping runs at a time: others wait for it within their own timeout.

        Raises:
            ConfigurationError: ``timeout`` is not a number of seconds above 0 and at
                most 3600.
            StoreUnavailableError: It did not answer, or the store is closed
                (``StoreFileReplacedError`` for a SQLite file removed or replaced since
                the store opened it).
        """
        self._records.ping(timeout)

    def database_now(self) -> datetime | None:
        """The time by the database's own clock; None for a store in memory, which has
        none but the process's.

        Raises:
            StoreUnavailableError: The database did not answer.
        """
        return self._records.database_now()

    # Positions of the log's consumers ----------------------------------------------

    def last_log_position(self) -> int:
        """The position of the newest event in the store's log (0 when it is empty): a
        consumer that has recorded it is up to date."""
        return self._records.log_position()

    def log_position(self, consumer: str) -> int:
        """The last log position ``consumer`` recorded as done (0 before any), checked
        against the log's end (:meth:`last_log_position`, read as well).

        Raises:
            ConfigurationError: ``consumer`` is no str or holds a lone surrogate.
            StoredRowError: The position is past the log's end (the newest row was moved
                back, or the log restored, after the consumer passed it), where it would
                pass over every event written afterwards; or the end is refused.
        """
        return self.log.position_and_end(consumer)[0]

    def record_log_position(self, consumer: str, position: int) -> None:
        """Record that ``consumer`` is done with the log up to ``position``.

        Raises:
            ReadOnlyStoreError: The store was opened read-only.
            IntegrityError: The position was recorded already (another process of the
                same consumer got there first).
            ConfigurationError: ``consumer`` is no str or holds a lone surrogate, or
                ``position`` is no whole number from 0 to 2**63-1.
        """
        self._positions.record_log_position(consumer, position)

    # Lifecycle --------------------------------------------------------------------

    def close(self) -> None:
        """Release connections. The store cannot be used afterwards.

        A store made by :meth:`from_application` leaves the application open.
        """
        self._guard.closed = True
        self._leasing.close()
        if self._owns_app:
            self._app.close()

    def __repr__(self) -> str:
        return f"Store({self.url!r})"


def _check_read(version: object, snapshot_migrators: object) -> None:
    """A read's ``version`` is None or a whole number (1.5 was read as 1; at 0 no
    thread exists), and its ``snapshot_migrators`` a mapping."""
    if version is not None:
        check_whole("version", version)
    check_instance("snapshot_migrators", snapshot_migrators, Mapping, "a mapping of upcasters")


def _deprecated(command: str) -> None:
    """Warn that ``Store.<command>`` is an alias of the service's command."""
    msg = (
        f"Store.{command} is deprecated: use "
        f"covonaut_es.service.ThreadService(store).{command}, the one {command} command"
    )
    # The caller's line: past this function, the method and its closed-store check.
    warnings.warn(msg, DeprecationWarning, stacklevel=4)


def _check_now(now: object) -> None:
    """An event's ``now`` is None (the store's clock) or a time a clock may give
    (:func:`~covonaut_es._clock.checked_time`)."""
    if now is not None:
        checked_time(now, "now is")
