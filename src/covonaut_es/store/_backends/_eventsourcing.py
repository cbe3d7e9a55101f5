"""The private parts of eventsourcing that the store and the projections' views rely
on outside the back ends' recorders, each behind a public name here.

Every use below names the eventsourcing version it was checked against (9.5.6; the
dependency is pinned below 9.6 for them). Only the store's modules import this one:
:mod:`covonaut_es.store._application` the save's steps (and the one step every
recording of an application takes) and the repository's rebuild of an aggregate,
:mod:`covonaut_es.store._reader` the projection that rebuilds a thread, and
:mod:`covonaut_es.store._tracking` (which projections import) the tracking recorders and
the batching projection runner. (The registry of topics, which the mapper reads for a
class renamed or moved, is read in :mod:`covonaut_es.store._topic_codes`, which the
mapper may import and this module's importers import.)
"""

from __future__ import annotations

import contextlib
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

import attrs
from eventsourcing.application import (
    AggregateNotFoundError,
    Application,
    ProcessingEvent,
    ProjectorFunction,
    Repository,
)
from eventsourcing.persistence import (
    IntegrityError,
    ListenNotifySubscription,
    Notification,
    Recording,
    Subscription,
    Tracking,
    TrackingRecorder,
)
from eventsourcing.popo import POPOTrackingRecorder
from eventsourcing.projection import ApplicationSubscription, BaseProjectionRunner

from covonaut_es.errors import SerializationError, StoredRowError
from covonaut_es.store._write_errors import database_error, database_errors_typed

TApplication = TypeVar("TApplication")


def take_snapshots(app: Application[Any], processing_event: ProcessingEvent[Any]) -> None:
    """Take the snapshots ``app``'s ``snapshotting_intervals`` ask for after a save, as
    eventsourcing's own ``save`` does."""
    # eventsourcing 9.5.6: Application._take_snapshots, the step of save() after recording.
    app._take_snapshots(processing_event)


def notify(app: Application[Any], recordings: list[Recording[Any]]) -> None:
    """Tell ``app`` of a save's recordings, as eventsourcing's own ``save`` does (a
    system's runner follows an application through this hook)."""
    # eventsourcing 9.5.6: Application._notify, the last step of save().
    app._notify(recordings)


class RecordsProcessingEvents(Application[Any]):
    """An application that records every processing event through
    :meth:`record_processing_event`: its own saves', and those a process application's
    policy collects when it runs in an ``eventsourcing.system.System``."""

    def record_processing_event(
        self, processing_event: ProcessingEvent[Any]
    ) -> list[Recording[Any]]:
        """Store ``processing_event``'s events (and its tracking), in one transaction."""
        raise NotImplementedError

    # eventsourcing 9.5.6: Application.save and EventSourcedProjection.process_event
    # (what a follower runs for each event it pulls) both store through _record.
    def _record(self, processing_event: ProcessingEvent[Any]) -> list[Recording[Any]]:
        return self.record_processing_event(processing_event)


class Rebuilt:
    """A projection for a :class:`RebuildingRepository`'s ``get`` that also rebuilds the
    aggregate where eventsourcing would rebuild it from the snapshot store and the
    events: a thread, whose snapshot only :meth:`SnapshotCache.trusted
    <covonaut_es.store._snapshot_cache.SnapshotCache.trusted>` judges (ADR 0097), which
    the snapshot store's reads cannot, not knowing a thread's stream from another
    aggregate's.

    Args:
        fold: Applies events to an aggregate: a cached one's new events.
        rebuild: The aggregate as of a version (None: its newest), or None when it has
            no events there.
    """

    def __init__(
        self, fold: Callable[[Any, Any], Any], rebuild: Callable[[int | None], Any]
    ) -> None:
        self.fold = fold
        self.rebuild = rebuild

    def __call__(self, aggregate: Any, events: Any) -> Any:
        return self.fold(aggregate, events)


class RebuildingRepository(Repository[Any]):
    """A repository that, given a :class:`Rebuilt` projection, rebuilds the aggregate
    with it, and caches what it gives as eventsourcing caches what it rebuilds; a read
    of a cached aggregate is whole, whatever other threads read at once."""

    _STRIPES = 64

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._copying = tuple(threading.Lock() for _ in range(self._STRIPES))

    def get(self, aggregate_id: Any, *, version: int | None = None, **kwargs: Any) -> Any:
        if not self.cache or version is not None:
            return super().get(aggregate_id, version=version, **kwargs)
        # eventsourcing 9.5.6 fast-forwards the cached aggregate in place under a lock,
        # then copies it after letting the lock go: a copy taken while another thread
        # fast-forwarded it held a message of the next version and not its version.
        with self._copying[hash(aggregate_id) % self._STRIPES]:
            return super().get(aggregate_id, version=version, **kwargs)

    # eventsourcing 9.5.6: Repository._reconstruct_aggregate, what get() calls for a
    # version or on a cache miss (and then caches what it gives).
    def _reconstruct_aggregate(
        self, aggregate_id: Any, version: int | None, projector_func: ProjectorFunction[Any, Any]
    ) -> Any:
        if not isinstance(projector_func, Rebuilt):
            return super()._reconstruct_aggregate(aggregate_id, version, projector_func)
        aggregate = projector_func.rebuild(version)
        if aggregate is None:
            msg = f"Aggregate {aggregate_id!r} version {version!r} not found."
            raise AggregateNotFoundError(msg)
        return aggregate


class TrackedSQL:
    """Mixed into a view that is an eventsourcing SQL tracking recorder (SQLite's or
    PostgreSQL's): it applies changes and records its position in one transaction
    (:meth:`tracked`), under a tracking name of its own (:meth:`tracked_name`)."""

    datastore: Any  # the SQL tracking recorder's

    def tracked_name(self, application_name: str) -> str:
        """The name the view records its position of ``application_name`` under."""
        return application_name

    @contextlib.contextmanager
    def tracked(self, tracking: Tracking) -> Iterator[Any]:
        """A cursor in a transaction that records ``tracking`` when the block ends.

        Raises:
            StoreUnavailableError: The database failed the transaction; the view stays
                at the position it had.
        """
        with (
            database_errors_typed(
                f"the view of {tracking.application_name!r}",
                f"its changes to log position {tracking.notification_id} were not written",
            ),
            self.datastore.transaction(commit=True) as cursor,
        ):
            yield cursor
            self._insert_tracking(cursor, tracking)

    def max_tracking_id(self, application_name: str) -> int | None:
        """The position of ``application_name`` the view has processed."""
        found: int | None = super().max_tracking_id(  # type: ignore[misc]
            self._named(application_name)
        )
        return found

    # eventsourcing 9.5.6: SQLiteTrackingRecorder and PostgresTrackingRecorder write every
    # tracking row through _insert_tracking(cursor, tracking), the rows their table
    # migration carries over included.
    def _insert_tracking(self, cursor: Any, tracking: Tracking) -> None:
        named = Tracking(self._named(tracking.application_name), tracking.notification_id)
        try:
            super()._insert_tracking(cursor, named)  # type: ignore[misc]
        except IntegrityError:
            # A later position recorded by another runner is a conflict, the caller's
            # to tell; a row holding no position, or a bookkeeping row eventsourcing
            # cannot move on from, was altered behind the library.
            name = named.application_name
            held = super().max_tracking_id(name)  # type: ignore[misc]
            # The bookkeeping row holds the table's migration, 1 (eventsourcing 9.5.6):
            # another opener's row is a race the caller tells apart, as for the others.
            least = 1 if name == getattr(self, "table_migration_identifier", None) else 0
            if held is not None and held >= least:
                raise
            raise altered_tracking_row(name) from None

    def _named(self, application_name: str) -> str:
        # eventsourcing 9.5.6: table_migration_identifier names the recorder's own
        # bookkeeping row, which keeps its name.
        if application_name == getattr(self, "table_migration_identifier", None):
            return application_name
        return self.tracked_name(application_name)


def altered_tracking_row(name: str) -> StoredRowError:
    """The refusal of a view's tracking row ``name`` that holds no position it records
    (none, or below the log's start): a writer altered it behind the library."""
    msg = (
        f"the view's tracking row {name!r} holds no position it records: it was altered "
        "behind the library; delete that row, and the view is built again from the log"
    )
    return StoredRowError(msg)


class MemoryTracking(POPOTrackingRecorder):
    """An eventsourcing in-memory tracking recorder whose view applies changes and
    records its position under one lock (:meth:`tracked`)."""

    @contextlib.contextmanager
    def tracked(self, tracking: Tracking) -> Iterator[None]:
        """Hold the recorder's lock, refuse a position already recorded, and record
        ``tracking`` when the block ends.

        Raises:
            IntegrityError: The view has processed that position.
        """
        # eventsourcing 9.5.6: POPOTrackingRecorder.insert_tracking is these three steps.
        with self._database_lock:
            self._assert_tracking_uniqueness(tracking)
            yield
            self._insert_tracking(tracking)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the recorder's lock, to read the view's tables whole."""
        with self._database_lock:  # eventsourcing 9.5.6: POPORecorder's RLock
            yield


BATCH_LIMIT = 500
"""The most events a batching runner hands its projection at once (eventsourcing's
subscriptions select 500 notifications at a time)."""


class BatchProjection(Protocol):
    """A projection that processes several events, and records the last one's
    position, in one transaction."""

    def process_events(self, batch: Sequence[tuple[Any, Tracking]]) -> None:
        """Process the events in order, and record the last one's position with them."""


@runtime_checkable
class ReadsAhead(Protocol):
    """A subscription that says whether its next notification is read already (the
    SQLite back end's)."""

    def buffered(self) -> bool:
        """Whether taking the next notification cannot block."""


def _read_ahead(inner: Subscription[Any]) -> Callable[[], bool]:
    """What says whether the subscription's next notification is read already, so
    taking it cannot block."""
    if isinstance(inner, ReadsAhead):
        return inner.buffered
    if not isinstance(inner, ListenNotifySubscription):
        return lambda: False
    # eventsourcing 9.5.6: ListenNotifySubscription (the memory and PostgreSQL
    # subscriptions) keeps the notifications it selected in _notifications, read up to
    # _notifications_index, and further selects in _notifications_queue.
    return lambda: (
        inner._notifications_index < len(inner._notifications)
        or not inner._notifications_queue.empty()
    )


@attrs.frozen
class UnreadableRecord:
    """A record of the log that does not decode into an event, handed to a batching
    projection in place of its event (its position beside it), for it to pass over: one
    damaged row must not stop a projection of every thread (ADR 0070)."""

    error: SerializationError


def batches(
    subscription: ApplicationSubscription[Any], limit: int = BATCH_LIMIT
) -> Iterator[list[tuple[Any, Tracking]]]:
    """The subscription's events in batches: each waits for one event, then takes those
    already read after it, up to ``limit``. A record that does not decode is an
    :class:`UnreadableRecord` in its event's place."""
    # eventsourcing's ApplicationSubscription would make each event itself, and a record
    # that does not decode would end the iteration with its position unknown.
    notifications, name = subscription.subscription, subscription.name
    to_event, buffered = subscription.mapper.to_domain_event, _read_ahead(notifications)

    def read(notification: Notification) -> tuple[Any, Tracking]:
        event: Any
        try:
            event = to_event(notification)
        except SerializationError as exc:
            event = UnreadableRecord(exc)
        return event, Tracking(name, notification.id)

    for first in notifications:
        batch = [read(first)]
        while len(batch) < limit and buffered():
            following = next(notifications, None)
            if following is None:
                break
            batch.append(read(following))
        yield batch


class _AlreadyOpen(Application[Any]):
    """Stands in for an open application's class: made with that application as its
    ``env``, it gives back the application itself (not an instance of this class, so
    no ``__init__`` runs), for a runner to follow an application already open."""

    def __new__(cls, env: Any) -> Any:
        return env


class BatchingProjectionRunner(BaseProjectionRunner[TApplication]):
    """eventsourcing's projection runner, handing its projection every event its
    subscription has read already in one call (:class:`BatchProjection`), so that a
    view catching up on a long log commits once per batch, not once per event.

    It follows an application it opens from its class and ``env``, or one already open
    (which it closes when it stops, as it does its own): a follower that opened the
    application to create its tables and read its settings does not open it again.
    """

    def __init__(
        self,
        *,
        projection: Any,
        application: type[TApplication] | TApplication,
        tracking_recorder: TrackingRecorder,
        topics: Sequence[str],
        env: dict[str, str] | None = None,
    ) -> None:
        # eventsourcing 9.5.6: BaseProjectionRunner.__init__ subscribes to what
        # application_class(env) returns, and closes it when the runner exits.
        opened = isinstance(application, Application)
        super().__init__(
            projection=projection,
            application_class=_AlreadyOpen if opened else application,  # type: ignore[arg-type]
            tracking_recorder=tracking_recorder,
            topics=topics,
            env=application if opened else env,  # type: ignore[arg-type]
        )

    # eventsourcing 9.5.6: BaseProjectionRunner.__init__ starts its processing thread on
    # self._process_events_loop(subscription, projection, is_stopping, runner), and a
    # failure is handed to run_forever() through the runner's _thread_error.
    @staticmethod
    def _process_events_loop(
        subscription: ApplicationSubscription[Any],
        projection: Any,
        is_stopping: threading.Event,
        runner: weakref.ReferenceType[Any],
    ) -> None:
        batched: BatchProjection = projection
        try:
            for batch in batches(subscription):
                batched.process_events(batch)
        except BaseException as exc:
            found = runner()
            if found is not None:
                found._thread_error = _typed(exc)
            else:  # as eventsourcing's own loop does
                msg = f"projection runner deleted before its error was kept: {exc!r}"
                warnings.warn(msg, RuntimeWarning, stacklevel=2)
        finally:
            is_stopping.set()


def _typed(exc: BaseException) -> BaseException:
    """What a follower's processing thread hands on of its failure ``exc``: a database's
    failure typed (the subscription's session ended, say), which run_forever(), the
    runner's exit and a wait for the view raise; anything else as it is."""
    typed = database_error(
        exc, "the subscription to the store's log", "the follower stopped; start it again"
    )
    if typed is None:
        return exc
    typed.__cause__ = exc
    return typed
