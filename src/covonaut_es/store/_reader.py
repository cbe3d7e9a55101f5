"""Reading threads: loads from snapshots and events, histories and replays.

A :class:`~covonaut_es.Store` holds one :class:`ThreadReader` (``store._reader``); every
read of a thread's own events that rebuilds it, a load, a replay and an audit's
(:func:`~covonaut_es.store._audit.verify`), goes through :meth:`ThreadReader.fold`, which
checks that each event follows the one before and grafts a fork onto its parent.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, cast
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application

from covonaut_es.domain import (
    AgentThread,
    Label,
    SessionTree,
    ThreadSnapshot,
    check_thread_stream,
    thread_aggregate_id,
)
from covonaut_es.domain._values import relabelled
from covonaut_es.errors import (
    CovonautError,
    MissingEventError,
    MissingFirstEventError,
    SerializationError,
    StoredRowError,
    ThreadNotFoundError,
)
from covonaut_es.migrations import Upcaster
from covonaut_es.migrations._upcasting import NO_MIGRATORS
from covonaut_es.store._application import AgentApplication
from covonaut_es.store._backends._eventsourcing import RebuildingRepository, Rebuilt
from covonaut_es.store._chain import chain_of
from covonaut_es.store._lineage import Lineage, forks_followed, refuse_fork_loop
from covonaut_es.store._records import OPENING_EVENTS, StoredRecords, storable
from covonaut_es.store._review_index import HOLDING, entries, holders
from covonaut_es.store._snapshot_cache import SnapshotCache
from covonaut_es.store._topic_codes import stored_forms
from covonaut_es.store._write_errors import database_error

ParentOf = Callable[[AgentThread.Forked], AgentThread | None]
"""What :meth:`ThreadReader.fold` grafts a fork's first event onto: the fork's parent as
of the version it branches from, None when it is missing."""


_FIRST_EVENTS = (*OPENING_EVENTS, AgentThread.StartedFromState, AgentThread.Forked)
"""The events a thread's own stream can start with (each subclass has a topic of its
own, and the log is filtered by topic)."""
_STARTS = (ThreadSnapshot, *_FIRST_EVENTS)
"""What :meth:`ThreadReader.fold` starts a thread from."""
_THREAD_EVENTS = (AgentThread.Event, ThreadSnapshot)
"""What a thread's stream holds."""
_LABELLED = frozenset(stored_forms([AgentThread.Labelled]))
"""The topics a ``Labelled`` event is stored under."""
_STARTING: dict[type, bool] = {}
"""Whether each class of event read so far is one of :data:`_STARTS`."""


class ThreadReader:
    """Rebuild threads and read their events.

    Args:
        app: The store's application.
        records: The store's records (a fork's first event is read there).
        url: The store's redacted URL, for messages.
        snapshot_seen: Told the version of the newest snapshot a load of a thread's
            head started from (the writer's snapshot schedule).
    """

    def __init__(
        self,
        app: Application[UUID],
        records: StoredRecords,
        url: str,
        snapshot_seen: Callable[[UUID, int], None],
    ) -> None:
        self._app = app
        self._records = records
        self._url = url
        self._snapshot_seen = snapshot_seen
        self._loads = Lineage(self._grafted_onto, self.find, records.forked_event, url)
        self._replays = Lineage(self.replay, self.replay, records.forked_event, url)

    def load(
        self,
        thread_id: str,
        *,
        version: int | None = None,
        snapshot_migrators: Mapping[int, Upcaster] = NO_MIGRATORS,
    ) -> AgentThread:
        """As :meth:`covonaut_es.Store.load`."""
        thread = self.find(thread_id, version=version, snapshot_migrators=snapshot_migrators)
        if thread is None:
            raise self.not_found_at(thread_id, version, "read")
        return thread

    def not_found_at(self, thread_id: str, version: int | None, doing: str) -> ThreadNotFoundError:
        """The error for a read or a fork of the thread at ``version`` (None: its head)
        that found nothing there: the one check of the versions a thread has. A version
        outside them, below 1 or past its head (a fork's go on from its parent's), is
        refused naming them; a thread with no events, or one that has reached the
        version since the read, is not found (at that version) (ADR 0143).

        Args:
            thread_id: The thread read.
            version: The version asked for.
            doing: What the thread cannot be at that version ("read", "forked").
        """
        head = self.head_version(thread_id)
        if head is not None and version is not None and not 1 <= version <= head:
            msg = (
                f"thread {thread_id!r} has versions 1 to {head}; "
                f"it cannot be {doing} at version {version}"
            )
            return ThreadNotFoundError(msg)
        return ThreadNotFoundError.in_store(thread_id, self._url, version=version)

    def find(
        self,
        thread_id: str,
        *,
        version: int | None = None,
        snapshot_migrators: Mapping[int, Upcaster] = NO_MIGRATORS,
    ) -> AgentThread | None:
        """As :meth:`covonaut_es.Store.find`; a read up to ``version`` that ends below it
        finds nothing (the thread has no such version), unless the thread's stream goes
        on there, which is refused (:meth:`_refuse_lost_after`)."""
        return self._find(thread_id, version, snapshot_migrators, whole=True)

    def _grafted_onto(self, thread_id: str, *, version: int | None = None) -> AgentThread | None:
        """A fork's parent as of the fork's branch point, for grafting: a parent that ends
        below it is refused there, naming the fork (:meth:`_started`)."""
        return self._find(thread_id, version, NO_MIGRATORS, whole=False)

    def _find(
        self,
        thread_id: str,
        version: int | None,
        snapshot_migrators: Mapping[int, Upcaster],
        *,
        whole: bool,
    ) -> AgentThread | None:
        if version is not None and version < 1:
            return None
        version = storable(version)
        aggregate_id = thread_aggregate_id(thread_id)
        with self.reading(thread_id):
            thread, snapshot_version = self._rebuild(
                thread_id, aggregate_id, version, snapshot_migrators
            )
        if thread is None:
            thread = self._inherited(thread_id, version, self._loads)
            if thread is None:
                self._refuse_lost_stream(thread_id)
            return thread
        if whole and version is not None and thread.version < version:
            with self.reading(thread_id):
                self._refuse_lost_after(thread_id, aggregate_id, thread.version)
            return None  # past the head: the thread has no such version
        if snapshot_version is not None and version is None:
            self._snapshot_seen(aggregate_id, snapshot_version)
        return thread

    def _refuse_lost_after(self, thread_id: str, stream: UUID, head: int) -> None:
        """Refuse a read up to a version that ended at ``head`` below it, when the
        stream holds events after ``head`` but none at ``head + 1``: that one was lost
        (or given another version), and the read would give the thread as it stood
        before it. Events another writer appended since the read begin at ``head + 1``
        (a save writes a thread's next versions in one transaction): the version was
        past the head as of the read, which finds nothing. Every row of the stream is
        read, each checked: a row at no version (NULL, text) meets no bound, and an
        application of the user's own reads through eventsourcing's bounded statement.
        (Asked only of a read that ended below its version: one past the head, or of a
        damaged stream.)

        Raises:
            MissingEventError: Naming the version lost.
            StoredRowError: A row of the stream holds no version.
        """
        versions = {row.originator_version for row in self._app.recorder.select_events(stream)}
        if head + 1 not in versions and any(v > head for v in versions):
            raise self._lost_event(thread_id, head, f"goes on after version {head}")

    def _refuse_lost_stream(self, thread_id: str) -> None:
        """Refuse to report as missing a thread the store anchored: a read found none
        of its events, while its head anchor (ADR 0013) says it had some, so they were
        deleted behind the library, or are hidden from this connection (row-level
        security), or the anchor row was written without them (a writer can so keep a
        new thread from being made under that id, as any writer of the database can
        deny it: it is refused, never made over events that may have existed). Asked
        only of a read that found nothing, so a load pays nothing for it (ADR 0118).
        The anchor is read first, then the stream once more: a thread written since the
        read (its events and its anchor in one transaction) shows its events then, and
        stays not found as of the read.

        Raises:
            MissingFirstEventError: Naming the thread and its anchored version.
            StoredRowError: The thread's anchor row holds a value of the wrong type.
        """
        with self.reading(thread_id):
            anchored = self._records.head_anchor(thread_id).version
            if anchored is None or self.exists(thread_id):
                return
        msg = (
            f"thread {thread_id!r} in store {self._url} has lost every event: its head "
            f"was anchored at version {anchored}, but none of its stream can be read (the "
            "rows were deleted, or are hidden from this connection); restore the store "
            "from a backup. If the store never held this thread, its head anchor row was "
            "written without it: delete that row, and the id is free again"
        )
        raise MissingFirstEventError(msg, thread_id=thread_id, version=anchored)

    def _rebuild(
        self,
        thread_id: str,
        stream: UUID,
        version: int | None,
        snapshot_migrators: Mapping[int, Upcaster],
    ) -> tuple[AgentThread | None, int | None]:
        """The thread stored as ``stream``, as of ``version``, folded from its newest
        trusted snapshot and the events after it (None when it has no events there),
        and that snapshot's version (None without one).

        The store's own application reads the snapshot and the events in one statement
        (:meth:`StoredRecords.thread_rows`), its snapshot judged by
        :meth:`SnapshotCache.trusted` alone; an application of the user's own that
        caches its aggregates rebuilds a thread missing from its cache the same way,
        and one that keeps no sealed snapshots is read by its repository.
        """
        snapshots, repository = self._app.snapshots, self._app.repository
        parent = self.parent_loader(thread_id, self._loads)
        if not isinstance(snapshots, SnapshotCache):
            seen: list[int] = []

            def project(thread: AgentThread | None, events: Any) -> AgentThread | None:
                def noting(events: Iterable[Any]) -> Iterator[Any]:
                    for event in events:
                        if isinstance(event, ThreadSnapshot):
                            seen.append(event.originator_version)
                        yield event

                return self.fold(thread, noting(events), thread_id, parent)

            try:
                thread: AgentThread = repository.get(
                    stream, version=version, projector_func=project
                )
            except AggregateNotFoundError:
                return None, None
            return thread, seen[0] if seen else None
        cached = repository.cache and version is None and not snapshot_migrators
        if not (cached and isinstance(repository, RebuildingRepository)):
            return self._from_rows(
                thread_id, stream, version, snapshots, parent, snapshot_migrators
            )
        rebuilt: list[int | None] = []

        def rebuild(at: int | None) -> AgentThread | None:
            thread, snapshot_version = self._from_rows(thread_id, stream, at, snapshots, parent)
            rebuilt.append(snapshot_version)
            return thread

        def fold(thread: AgentThread, events: Iterable[Any]) -> AgentThread | None:
            return self.fold(thread, events, thread_id, parent)

        try:
            thread = repository.get(stream, projector_func=Rebuilt(fold, rebuild))
        except AggregateNotFoundError:
            return None, None
        return thread, rebuilt[0] if rebuilt else None

    def _from_rows(
        self,
        thread_id: str,
        stream: UUID,
        version: int | None,
        snapshots: SnapshotCache,
        parent: ParentOf,
        snapshot_migrators: Mapping[int, Upcaster] = NO_MIGRATORS,
    ) -> tuple[AgentThread | None, int | None]:
        """As :meth:`_rebuild`, from the rows :meth:`StoredRecords.thread_rows` reads."""
        rows = self._records.thread_rows(snapshots, stream, version)
        snapshot = None
        if rows.snapshot is not None:
            if snapshot_migrators:
                snapshots = snapshots.with_migrators(snapshot_migrators)
            snapshot = snapshots.trusted(rows.snapshot, rows.events)
        records = rows.events
        if snapshot is not None:
            after = snapshot.originator_version
            records = [e for e in records if e.originator_version > after]
        elif rows.snapshot is not None:  # passed over: every event is needed
            records = list(self._app.recorder.select_events(stream, lte=version))
        events: Iterable[Any] = map(self._app.mapper.to_domain_event, records)
        if snapshot is not None:
            events = itertools.chain((snapshot,), events)
        folded = self.fold(None, events, thread_id, parent)
        # Trusted, a snapshot was sealed to its event's chain hash: the thread's own from
        # there. Without one, the object may be a fork grafted onto its parent's, whose
        # point is the parent's.
        at = None if snapshot is None else snapshot.originator_version
        chain = None if snapshot is None else snapshot.state.get("chain_head")
        if folded is not None and isinstance(self._app, AgentApplication):
            point = (at, chain) if at is not None and isinstance(chain, str) else None
            self._app.sealed_points.note(folded, point)
        return folded, at

    def replay(self, thread_id: str, *, version: int | None = None) -> AgentThread | None:
        """The thread rebuilt from its events alone, ignoring snapshots; None when it
        has none (at that version)."""
        parent = self.parent_loader(thread_id, self._replays)
        with self.reading(thread_id):
            events = self._app.events.get(thread_aggregate_id(thread_id), lte=version)
            thread = self.fold(None, events, thread_id, parent)
        thread = thread or self._inherited(thread_id, version, self._replays)
        if thread is None:
            self._refuse_lost_stream(thread_id)
        return thread

    def fold(
        self,
        thread: AgentThread | None,
        events: Iterable[Any],
        thread_id: str,
        parent: ParentOf,
    ) -> AgentThread | None:
        """``events``, read in order from the stream of thread ``thread_id``, applied in
        turn to ``thread`` (None: before the stream's first), and its chain head set to
        the last one's (a snapshot brings its own): the one fold of a load, a replay and
        :func:`~covonaut_es.store._audit.verify`. A fork's first event is grafted onto
        the state ``parent`` gives.

        Raises:
            MissingEventError: An event does not follow the one before.
            ThreadNotFoundError: A fork's parent is missing.
            StoredRowError: An event has no place in the stream, or does not apply to
                the thread (its stored fields name a call, a review or a position the
                thread does not have).
            ThreadStateError: A fork's first event does not fit its parent.
        """
        head = None if thread is None else thread.version
        event = None
        for event in events:
            starts = _STARTING.get(type(event))
            if starts is None:  # isinstance costs a load more than a dict does, event by event
                starts = _STARTING[type(event)] = isinstance(event, _STARTS)
            try:
                if head is None or starts:
                    thread = self._started(thread, event, thread_id, parent)
                else:
                    # Each event after the first: checked here to be the thread's next
                    # version, so it follows the thread without the same checks made
                    # again by eventsourcing's mutate.
                    if event.originator_version != head + 1:
                        self.check_follows(thread_id, head, event)
                    thread = event.follow(thread)
            except CovonautError:
                raise
            # The apply methods trust the events the thread itself wrote: a stored event
            # altered behind the library (a call id no call has), or one that has no
            # apply method, fails inside, which is reported as the damaged record it is.
            except (LookupError, ValueError, TypeError, AttributeError) as exc:
                msg = (
                    f"stored event {type(event).__qualname__} of thread {thread_id!r} at "
                    f"version {event.originator_version} does not apply to the thread its "
                    f"earlier events make ({type(exc).__name__}: {exc}): it was altered or "
                    "damaged"
                )
                raise StoredRowError(msg) from exc
            head = event.originator_version
        if thread is not None and event is not None and not isinstance(event, ThreadSnapshot):
            thread.chain_head = chain_of(event)
        return thread

    def parent_loader(self, thread_id: str, lineage: Lineage) -> ParentOf:
        """The :data:`ParentOf` of a fork read alone: its parent as ``lineage`` reads
        the parent a fork's first event is grafted onto."""

        def parent(forked: AgentThread.Forked) -> AgentThread | None:
            at, parent_id = forked.parent_version, forked.parent_thread_id
            return lineage.read_parent(thread_id, parent_id, at, lineage.grafted)

        return parent

    def _started(
        self, thread: AgentThread | None, event: Any, thread_id: str, parent: ParentOf
    ) -> AgentThread:
        """As :meth:`fold`, for an event that starts a thread: its first, a fork's first
        grafted onto its parent, or a snapshot."""
        self.check_follows(thread_id, None if thread is None else thread.version, event)
        refuse_out_of_place(thread, event, thread_id)
        folded: AgentThread
        if thread is None and isinstance(event, AgentThread.Forked):
            base = parent(event)
            if base is None:
                msg = (
                    f"fork {event.thread_id!r} branches from {event.parent_thread_id!r} at "
                    f"version {event.parent_version}, which is missing from {self._url}"
                )
                raise ThreadNotFoundError(msg)
            parent_id = event.parent_thread_id
            if base.thread_id == parent_id and base.version < event.parent_version:
                raise self._lost_before_fork(
                    parent_id, thread_id, event.parent_version, base.version
                )
            folded = event.graft(base)
        else:
            folded = event.mutate(thread)
        if folded.thread_id != thread_id:  # a row of another thread's, copied in
            msg = (
                f"stored {type(event).__qualname__} at version {event.originator_version} "
                f"in the stream of thread {thread_id!r} makes thread {folded.thread_id!r}: "
                "it was copied or altered behind the library"
            )
            raise StoredRowError(msg)
        return folded

    def _lost_before_fork(
        self, parent_id: str, fork_id: str, branch: int, last: int
    ) -> MissingEventError:
        """The error of a parent whose events end at ``last``, below the version
        ``branch`` its fork branches from."""
        msg = (
            f"thread {parent_id!r} in store {self._url} has lost its events from version "
            f"{last + 1}: its fork {fork_id!r} branches from it at version {branch}, past "
            f"its last at {last}; restore the store from a backup"
        )
        return MissingEventError(msg, thread_id=parent_id, version=last + 1)

    def reading(self, thread_id: str) -> _NamingThread:
        """Name the thread in a SerializationError raised while reading its stream (a
        record knows only its stream's id), and type a database's failure of the read
        (:func:`~covonaut_es.store._write_errors.database_error`)."""
        return _NamingThread(thread_id, self._url)

    def check_follows(self, thread_id: str, head: int | None, event: Any) -> None:
        """Raise unless ``event`` follows ``head`` (None: the stream's first) in the
        thread's stream; a snapshot follows anything."""
        if isinstance(event, ThreadSnapshot):
            return
        version: int = event.originator_version
        if head is None and not isinstance(event, _FIRST_EVENTS):
            msg = (
                f"thread {thread_id!r} in store {self._url} has lost its first event: its "
                f"stream starts with a {type(event).__name__} at version {version}; "
                "restore the store from a backup"
            )
            raise MissingFirstEventError(msg, thread_id=thread_id, version=version)
        if head is not None and version != head + 1:
            raise self._lost_event(thread_id, head, f"goes from version {head} to {version}")

    def _lost_event(self, thread_id: str, head: int, stream: str) -> MissingEventError:
        """The error for the event at ``head + 1`` missing, saying how the ``stream``
        goes on past it."""
        msg = (
            f"thread {thread_id!r} in store {self._url} has lost its event at version "
            f"{head + 1}: its stream {stream}; restore the store from a backup"
        )
        return MissingEventError(msg, thread_id=thread_id, version=head + 1)

    def _inherited(
        self, thread_id: str, version: int | None, lineage: Lineage
    ) -> AgentThread | None:
        """A fork's versions up to its branch point are its parent's."""
        if version is None:  # the thread has no events at all: nothing to inherit
            return None
        forked = self._records.forked_event(thread_id)
        if forked is None or version > forked.parent_version:
            return None
        parent_id = forked.parent_thread_id
        return lineage.read_parent(thread_id, parent_id, version, lineage.inherited)

    def exists(self, thread_id: str) -> bool:
        """As :meth:`covonaut_es.Store.exists`."""
        events = self._app.events.get(thread_aggregate_id(thread_id), limit=1)
        return any(True for _ in events)

    def head_version(self, thread_id: str) -> int | None:
        """As :meth:`covonaut_es.Store.head_version`."""
        stream = thread_aggregate_id(thread_id)
        newest = self._app.recorder.select_events(stream, desc=True, limit=1)
        return newest[0].originator_version if newest else None

    def events_after(self, thread_id: str, version: int) -> tuple[AgentThread.Event, ...]:
        """As :meth:`covonaut_es.Store.events_after`."""
        with self.reading(thread_id):
            # Past the last version a database holds there is nothing: asked as that.
            events = self._app.events.get(thread_aggregate_id(thread_id), gt=storable(version))
            return tuple(cast(AgentThread.Event, event) for event in events)

    def history(self, thread_id: str) -> tuple[AgentThread.Event, ...]:
        """As :meth:`covonaut_es.Store.history`: each ancestor's events up to where the
        thread's history leaves it, then the thread's own, read from the thread up to
        its root (a loop, not a recursion: a chain of forks may be of any depth). Every
        event of each stream read is checked, those past the branch point too, and an
        ancestor whose events end below it is refused as a load refuses it.

        Raises:
            MissingEventError: An ancestor's events end below where its fork branches.
        """
        kept: list[tuple[str, list[AgentThread.Event], int | None, str]] = []
        descendants = set(forks_followed())
        owner, last, fork = thread_id, None, thread_id  # the fork that cut the history last
        while True:
            own = self._own_events(owner)
            kept.append(
                (
                    owner,
                    [e for e in own if last is None or e.originator_version <= last],
                    last,
                    fork,
                )
            )
            first = own[0]
            if not isinstance(first, AgentThread.Forked):
                break
            first.check_place()
            refuse_fork_loop(owner, first.parent_thread_id, descendants, self._url)
            descendants.add(owner)
            if last is None or first.parent_version < last:
                last, fork = first.parent_version, owner
            owner = first.parent_thread_id
        for owner, events, last, fork in reversed(kept):  # the oldest's loss first
            if events and last is not None and events[-1].originator_version < last:
                raise self._lost_before_fork(owner, fork, last, events[-1].originator_version)
        return tuple(itertools.chain.from_iterable(events for _, events, _, _ in reversed(kept)))

    def _own_events(self, thread_id: str) -> tuple[AgentThread.Event, ...]:
        """The events of the thread's own stream, each checked to follow the one before.

        Raises:
            ThreadNotFoundError: The stream holds none.
        """
        with self.reading(thread_id):
            own: tuple[AgentThread.Event, ...] = tuple(
                self._app.events.get(thread_aggregate_id(thread_id))  # type: ignore[arg-type]
            )
        if not own:
            self._refuse_lost_stream(thread_id)
            raise ThreadNotFoundError.in_store(thread_id, self._url)
        refuse_out_of_place(None, own[0], thread_id)
        head: int | None = None
        for event in own:
            self.check_follows(thread_id, head, event)
            head = event.originator_version
        return own

    def labels_under(self, tree: SessionTree, root_thread_id: str) -> dict[str, tuple[Label, ...]]:
        """The labels of the root and of each thread forked from it in ``tree``, as a load
        of each gives them: the root's and those of the root its forks branch from by
        loads of it; a deeper fork's its parent's as of where it branched, then its own
        ``Labelled`` events'. Each thread's own stream is read once, where a load of
        each would read its ancestors' again (a chain of n forks, n times over).

        Raises:
            ThreadNotFoundError: The root has no events.
            SerializationError: A ``Labelled`` event does not decode.
        """
        labels = {root_thread_id: tuple(self.load(root_thread_id).labels)}
        inherited: dict[str, list[Label]] = {}
        own: dict[str, list[AgentThread.Labelled]] = {}

        @functools.cache
        def root_at(version: int) -> list[Label]:
            return self.load(root_thread_id, version=version).labels

        for thread_id in tree.descendants(root_thread_id)[1:]:  # each parent before its forks
            parent = tree.parent(thread_id)
            assert parent is not None  # a fork under the root
            if parent.thread_id == root_thread_id:
                inherited[thread_id] = root_at(parent.version)
            else:
                given = (
                    e.label for e in own[parent.thread_id] if e.originator_version <= parent.version
                )
                inherited[thread_id] = functools.reduce(
                    relabelled, given, inherited[parent.thread_id]
                )
            own[thread_id] = self._own_labelled(thread_id)
            mine = (e.label for e in own[thread_id])
            labels[thread_id] = tuple(functools.reduce(relabelled, mine, inherited[thread_id]))
        return labels

    def _own_labelled(self, thread_id: str) -> list[AgentThread.Labelled]:
        """The ``Labelled`` events of the thread's own stream, in order."""
        with self.reading(thread_id):
            return [
                cast(AgentThread.Labelled, self._app.mapper.to_domain_event(record))
                for record in self._records.own_records(thread_id)
                if record.topic in _LABELLED
            ]

    def thread_ids(self) -> Iterator[str]:
        """As :meth:`covonaut_es.Store.thread_ids`.

        Raises:
            StoredRowError: A row of the log holds no topic.
            ThreadStateError: A thread's first event is stored in another's stream.
        """
        for event in self._records.events_of_type(*_FIRST_EVENTS, topicless=True):
            check_first_event(event)
            yield event.thread_id

    def threads_with_review(self, review_id: str) -> tuple[str, ...]:
        """As :meth:`covonaut_es.Store.threads_with_review`, read from the whole log."""
        events = self._records.events_of_type(*HOLDING)
        return holders(e for event in events for r, e in entries(event) if r == review_id)


def check_first_event(event: AgentThread.Started | AgentThread.Forked) -> None:
    """Refuse a thread's first event read from the log where no first event is: in
    another thread's stream (:func:`check_thread_stream`), or at another version of its
    own (a copy, which would name its thread twice in a listing).

    Raises:
        ThreadStateError: It is in another thread's stream, or a fork's is not one past
            the version the fork branches from.
        StoredRowError: A thread's ``Started`` is at another version than 1.
    """
    check_thread_stream(event.originator_id, event.thread_id)
    if isinstance(event, AgentThread.Forked):
        event.check_place()
    else:
        refuse_out_of_place(None, event, event.thread_id)


def refuse_out_of_place(thread: AgentThread | None, event: Any, thread_id: str) -> None:
    """Refuse an event read from a thread's stream that has no place there: one that is
    not a thread's (another aggregate's, a named state's), one that starts a thread (a
    first event, a snapshot) read after the thread's first: a stream holds one, and a
    snapshot is read from its own table; or a root thread's first event at another
    version than 1 (a fork's is checked against its parent when it is grafted).

    Raises:
        StoredRowError: Naming the event, its version and the thread.
    """
    if not isinstance(event, _THREAD_EVENTS):
        where = "is not a thread's event"
    elif thread is not None and isinstance(event, _STARTS):
        where = "starts a thread in the middle of its stream"
    elif isinstance(event, AgentThread.Started) and event.originator_version != 1:
        where = "starts its thread at another version than 1, where a thread's first event is"
    else:
        return
    msg = (
        f"stored {type(event).__qualname__} at version {event.originator_version} of "
        f"thread {thread_id!r} {where}: it was copied or altered behind the library"
    )
    raise StoredRowError(msg)


class _NamingThread:
    """:meth:`ThreadReader.reading`'s context: a class, not a generator, as a load
    enters one and a generator's context costs a short thread's restore 1% more
    instructions."""

    __slots__ = ("_thread_id", "_url")

    def __init__(self, thread_id: str, url: str) -> None:
        self._thread_id = thread_id
        self._url = url

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if exc is None:
            return
        if not isinstance(exc, SerializationError):
            unread = f"thread {self._thread_id!r} was not read"
            typed = database_error(exc, f"store {self._url}", unread)
            if typed is not None:
                raise typed from exc
            return
        named = f"thread {self._thread_id!r}"
        if str(exc).startswith(named):
            return
        raise type(exc)(f"{named} in store {self._url}: {exc}") from exc
