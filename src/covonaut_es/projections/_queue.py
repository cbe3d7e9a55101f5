"""The reviewer queue: every pending review and interrupt across all threads.

Built on eventsourcing's projection machinery: :class:`ReviewQueueProjection` processes
the thread events the queue needs (filtered by topic in the database), and an
eventsourcing ``ProjectionRunner`` feeds it from the store's notification log, with
PostgreSQL's LISTEN/NOTIFY, a polling subscription on SQLite, or in-process on a named
memory store. :class:`ReviewQueue` is the facade: follow a store (in this process or as
a separate one), list the queue, rebuild it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast
from uuid import UUID

import msgspec
from eventsourcing.persistence import DataError, InfrastructureFactory, IntegrityError, Tracking
from eventsourcing.projection import BaseProjectionRunner, Projection
from eventsourcing.utils import Environment, resolve_topic

from covonaut_es import _logs
from covonaut_es._arguments import check_callable, check_instance, check_text, positive_seconds
from covonaut_es._closing import Closing
from covonaut_es.errors import (
    ConfigurationError,
    CovonautError,
    ReadOnlyStoreError,
    StoredRowError,
    StoreUnavailableError,
)
from covonaut_es.projections._items import (
    NAMED_LATER,
    QUEUE_EVENT_TYPES,
    QUEUE_FOLLOWER,
    SELF_NAMED,
    PendingReview,
    QueueChange,
    ThreadGivenUp,
    ThreadNamed,
    changes_for,
)
from covonaut_es.projections._names import ThreadNames
from covonaut_es.projections._paging import EVERY_ITEM, MAX_PAGE_SIZE, QueueFilter, QueuePage
from covonaut_es.projections._sealing import QueueSealer
from covonaut_es.projections._views import (
    SEALED_VIEW_TOPICS,
    VIEW_TOPICS,
    ReviewQueueView,
    SealedReviewQueueView,
)
from covonaut_es.store import Store
from covonaut_es.store._application import AgentApplication, open_application
from covonaut_es.store._backend import backend_for_env, backend_of
from covonaut_es.store._cipher_keys import queue_key
from covonaut_es.store._open import LogSource, log_source, store_log
from covonaut_es.store._records import StoredRecords
from covonaut_es.store._topic_codes import stored_forms
from covonaut_es.store._tracking import (
    BatchingProjectionRunner,
    UnreadableRecord,
    altered_tracking_row,
)
from covonaut_es.store._url_secrets import redact, secrets_hidden
from covonaut_es.store._urls import (
    READ_ONLY,
    persistence_env,
    store_env,
)
from covonaut_es.store._write_errors import database_errors_typed

VIEW_NAME = "review_queue"
"""The projection's name: it names the view's tracking table and settings prefix."""

UNSTORABLE = (DataError, ValueError, msgspec.EncodeError)
"""What a view raises for a value it cannot hold: the record is passed over, not retried
forever. (Text that a back end's columns cannot hold, such as a NUL in PostgreSQL, is
escaped by the rows, not passed over; a lone surrogate never decodes from the log.)"""

_TICK = 0.01
"""How often (seconds) a wait looks again at a view that no projection here advances."""

log = _logs.logger(__name__)


class ReviewQueueProjection(Projection[ReviewQueueView]):
    """Keeps the queue: an interrupt adds an item; resuming past it, deciding it or
    abandoning its thread removes it; a fork adds the interrupts it inherited. A thread
    the view has no name for is named by ``names`` (:class:`ThreadNames`) when one of
    its events needs the name."""

    name = VIEW_NAME
    topics = stored_forms(QUEUE_EVENT_TYPES)

    def __init__(
        self, view: ReviewQueueView, names: Callable[[Collection[UUID]], dict[str, str]]
    ) -> None:
        super().__init__(view=view)
        self._names = names
        self._batches = 0
        self._passed_over = 0
        self._advanced = threading.Condition()

    def process_events(self, batch: Sequence[tuple[Any, Tracking]]) -> None:
        """Apply the queue changes of a batch of events and the last one's position in
        one transaction; a batch the view cannot hold whole is applied again one event
        at a time (:meth:`process_event`), so only the records it cannot hold are passed
        over. Then wake whoever waits for the view to advance (:meth:`wait_for_batch`)."""
        self._apply(batch)
        with self._advanced:
            self._batches += 1
            self._advanced.notify_all()

    def batches_applied(self) -> int:
        """How many batches the projection has applied so far."""
        with self._advanced:
            return self._batches

    def records_passed_over(self) -> int:
        """How many records of the log it has passed over so far, each with a warning."""
        with self._advanced:
            return self._passed_over

    def _pass_over(self, count: int = 1) -> None:
        with self._advanced:
            self._passed_over += count

    def wait_for_batch(self, seen: int, timeout: float) -> None:
        """Block until a batch after the first ``seen`` is applied, or ``timeout``
        seconds pass."""
        with self._advanced:
            self._advanced.wait_for(lambda: self._batches != seen, timeout)

    def _apply(self, batch: Sequence[tuple[Any, Tracking]]) -> None:
        self._unless_applied(batch, self._apply_batch)

    def _unless_applied(
        self,
        batch: Sequence[tuple[Any, Tracking]],
        apply: Callable[[Sequence[tuple[Any, Tracking]]], None],
    ) -> None:
        """``apply`` the events of ``batch`` past the position the view records. When
        another follower of the same view records a position of them first, having
        made the same changes, go on from where it got to."""
        while batch := self._unapplied(batch):
            try:
                apply(batch)
                return
            except IntegrityError:
                if len(self._unapplied(batch)) == len(batch):
                    raise

    def _apply_batch(self, batch: Sequence[tuple[Any, Tracking]]) -> None:
        readable = [e for e, t in batch if not _passed_over(e, t)]
        changes = self._changes(readable)
        try:
            self.view.apply(changes, batch[-1][1])
        except UNSTORABLE as exc:
            if isinstance(exc, CovonautError):
                raise  # the view is misconfigured: no record could be stored
            for domain_event, tracking in batch:
                self.process_event(domain_event, tracking)
            return
        self._pass_over(len(batch) - len(readable))

    def _unapplied(self, batch: Sequence[tuple[Any, Tracking]]) -> Sequence[tuple[Any, Tracking]]:
        """The events of ``batch`` past the position the view records: another follower
        of the same view (a second ``reviews --follow``) may have applied some."""
        position = self.view.max_tracking_id(batch[0][1].application_name) or 0
        if batch[0][1].notification_id > position:
            return batch
        return [item for item in batch if item[1].notification_id > position]

    def _changes(self, events: Sequence[Any]) -> list[QueueChange]:
        """The queue changes of ``events`` in turn. Their threads' names are read in one
        query of the view; those it lacks that an event needs, and no event of the
        batch names, in one read of the store; then kept as the events change them,
        before they are stored."""
        names = self.view.thread_ids_of({e.originator_id.hex for e in events})
        named_here = {e.originator_id for e in events if isinstance(e, SELF_NAMED)}
        unnamed = {
            e.originator_id
            for e in events
            if isinstance(e, NAMED_LATER)
            and e.originator_id.hex not in names
            and e.originator_id not in named_here
        }
        changes: list[QueueChange] = []
        for aggregate_id, thread_id in self._names(unnamed).items():
            names[aggregate_id] = thread_id
            changes.append(ThreadNamed(aggregate_id, thread_id))
        for domain_event in events:
            for change in changes_for(domain_event, names.get):
                if isinstance(change, ThreadNamed) and change.aggregate_id not in names:
                    names[change.aggregate_id] = change.thread_id  # the first name stays
                elif isinstance(change, ThreadGivenUp):
                    names[change.aggregate_id] = None
                changes.append(change)
        return changes

    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        """Apply the event's queue changes and its position in one transaction, unless
        another follower of the same view has.

        A record whose changes the view cannot hold (written behind the library's back,
        or by code older than the thread-id rule) is passed over with a warning: its
        position alone is recorded, so one bad record never stops the queue.
        """
        self._unless_applied([(domain_event, tracking)], self._apply_one)

    def _apply_one(self, item: Sequence[tuple[Any, Tracking]]) -> None:
        ((domain_event, tracking),) = item
        if isinstance(domain_event, UnreadableRecord):
            self.view.apply((), tracking)  # warned of already, as the batch was read
            self._pass_over()
            return
        changes = self._changes([domain_event])
        try:
            self.view.apply(changes, tracking)
        except UNSTORABLE as exc:
            if isinstance(exc, CovonautError):
                raise  # the view is misconfigured: no record could be stored
            log.warning(
                "review queue: passing over the %s event at log position %d, which the "
                "view cannot store (%s: %s); its thread's items will not be listed",
                type(domain_event).__name__,
                tracking.notification_id,
                type(exc).__name__,
                exc,
            )
            self.view.apply((), tracking)
            self._pass_over()


def _passed_over(event: Any, tracking: Tracking) -> bool:
    """Whether ``event`` is a record that does not decode, which the queue passes over
    with a warning."""
    if not isinstance(event, UnreadableRecord):
        return False
    _logs.pass_over(
        log,
        "review queue",
        tracking.notification_id,
        event.error,
        "its thread's items may be missing or stale. `covonaut-es replay --verify` names "
        "the thread; a queue kept in a database does not read the record again once it "
        "is repaired, until its tables are dropped (see the operations guide)",
    )
    return True


class QueueRunner(BatchingProjectionRunner[AgentApplication]):
    """eventsourcing's projection runner, handing the projection its events in batches,
    fed a view the queue has opened (and, for an encrypted store, given the key) before
    the first event is processed; it follows an application already open, or one it
    opens from its class and ``env``, whose store names the threads."""

    def __init__(
        self,
        view: ReviewQueueView,
        application: AgentApplication | type[AgentApplication],
        env: dict[str, str] | None = None,
    ) -> None:
        opened = application if isinstance(application, AgentApplication) else application(env)
        try:
            records = StoredRecords(opened, backend_of(opened.factory))
            self.view = view
            self.projection = ReviewQueueProjection(view=view, names=ThreadNames(records))
            super().__init__(
                projection=self.projection,
                application=opened,
                tracking_recorder=view,
                topics=self.projection.topics,
            )
        except BaseException:
            if opened is not application:
                opened.close()
            raise


class ReviewQueue(Closing):
    """The reviewer queue of one store.

    Args:
        store_url: The store to follow (for ``memory://NAME`` stores: in this process);
            for the threads of an application of your own, see :meth:`from_application`.
        view_url: Where the queue's table lives; default: the store's own database.
        cipher_key: The store's cipher key, if it is encrypted. The queue of an
            encrypted store is then sealed under the same key: its tables hold no thread
            id, reason or tool argument in clear.
        compress: Whether the store is compressed; default: as the store records it.
        create_tables: Create the store's tables (and a SQLite file) when they are
            missing, as :func:`~covonaut_es.open_store` does; pass False to follow an
            existing store without writing to it (its file may then be read-only), with
            the view kept elsewhere.

    Raises:
        ConfigurationError: ``store_url`` or ``view_url`` is no str, or the store's URL
            is an application's (``StoreURLError``: a URL that is not understood).
        StoreUnavailableError: Without ``create_tables``, there is no SQLite file at
            the store's path.
    """

    def __init__(
        self,
        store_url: str,
        *,
        view_url: str | None = None,
        cipher_key: str | None = None,
        compress: bool | None = None,
        create_tables: bool = True,
    ) -> None:
        check_text("ReviewQueue(store_url)", store_url)
        if store_url.startswith("application:"):  # the url of Store.from_application's
            msg = (
                f"{redact(store_url)} is an application of your own, not a store's URL: open its "
                "queue with ReviewQueue.from_application(app)"
            )
            raise ConfigurationError(msg)
        with secrets_hidden(store_url):
            env = store_env(
                store_url, cipher_key=cipher_key, compress=compress, create_tables=create_tables
            )
            source = store_log(store_url, env)
        self._configure(source, view_url)

    @classmethod
    def from_application(
        cls, application: AgentApplication, *, view_url: str | None = None
    ) -> ReviewQueue:
        """The reviewer queue of the threads kept in your own eventsourcing application.

        The queue follows the application's own log, opening its class again with the
        application's settings (its environment, its tables), and keeps its tables in
        the application's database unless ``view_url`` names another. It never creates
        a store's tables beside the application's. An encrypted application's queue is
        sealed under its ``CIPHER_KEY``.

        Args:
            application: An application of a subclass of
                :class:`~covonaut_es.AgentApplication` on SQLite or PostgreSQL, whose
                class opens with ``env=`` alone (as eventsourcing's runners open it).
            view_url: Where the queue's tables live; default: the application's database.

        Raises:
            ConfigurationError: It is not an ``AgentApplication``, or keeps its events in
                this process's memory.
        """
        queue = cls.__new__(cls)
        queue._configure(log_source(application), view_url)
        return queue

    def _configure(self, source: LogSource, view_url: str | None) -> None:
        if view_url is not None:
            check_text("ReviewQueue(view_url)", view_url)
        self._source = source
        self.store_url = source.shown
        self._view_url = view_url
        shown = redact(view_url) if view_url else self.store_url
        self._view_where = f"the review queue's view {shown}"
        self._rebuilt = (
            "; a view kept apart holds only what the store's log holds: delete it, and it is "
            "built again from the log"
            if view_url
            else ""
        )
        with secrets_hidden(view_url or ""):
            view_env = persistence_env(view_url) if view_url else source.env
        self._view_read_only = view_env.get(READ_ONLY) == "y"
        # The view makes its tables unless its own database is read-only (a read-only
        # store's setting must not reach a view kept elsewhere, nor an application's
        # opened without creating its own tables reach the view's).
        view_env = {**view_env, "CREATE_TABLE": "n" if self._view_read_only else "y"}
        self._view_env = view_env
        key = queue_key(source.env) if source.cipher_key is not None else None
        self._sealer = QueueSealer(key) if key is not None else None
        topics = VIEW_TOPICS if self._sealer is None else SEALED_VIEW_TOPICS
        self._view_topic = topics[backend_for_env(view_env).name]
        # The view reads the settings prefixed with its name first.
        prefix = VIEW_NAME.upper() + "_"
        self._env = {**source.env, **{prefix + k: v for k, v in view_env.items()}}
        self._factory: InfrastructureFactory[Any] | None = None
        self._view: ReviewQueueView | None = None
        self._followed: list[ReviewQueueProjection] = []
        self._passed_over_before = 0  # by the projections that stopped

    @property
    def view_class(self) -> type[ReviewQueueView]:
        """The view's class for this back end."""
        view_class: type[ReviewQueueView] = resolve_topic(self._view_topic)
        return view_class

    def view(self) -> ReviewQueueView:
        """The queue's view, opened once (its tables created if needed); reading it
        does not follow the store.

        Raises:
            StoreUnavailableError: Its database failed to make its tables, or its file
                cannot be opened or read now.
            NotAStoreError: Its file is not a SQLite database.
            ReadOnlyStoreError: Its file is read-only, and the view was to be written.
        """
        if self._view is None:
            where = self._view_where
            backend_for_env(self._view_env).check_projection_file(self._view_env, where)
            self._factory = InfrastructureFactory.construct(env=Environment(VIEW_NAME, self._env))
            # Queues started at once on a database no queue ran on make its tables once.
            with (
                database_errors_typed(where, f"its tables were not made{self._rebuilt}"),
                secrets_hidden(self._view_url or ""),
                backend_of(self._factory).tables_lock(self._factory),
            ):
                try:
                    view = cast(ReviewQueueView, self._factory.tracking_recorder(self.view_class))
                except TypeError as exc:
                    # eventsourcing 9.5.6 carries an older tracking table's rows over as it
                    # opens one: a damaged file's row reads as None where a name was.
                    msg = (
                        f"{where} does not read as a view ({exc}): nothing was read{self._rebuilt}"
                    )
                    raise StoreUnavailableError(msg) from exc
            if isinstance(view, SealedReviewQueueView) and self._sealer is not None:
                view.seal_with(self._sealer)
            self._view = view
        return self._view

    def close(self) -> None:
        """Close the view's connections; the queue opens them again when used."""
        if self._factory is not None:
            self._factory.close()
        self._factory, self._view = None, None

    def position(self) -> int:
        """The store log position the view has processed (0 before the first event).

        Raises:
            StoreUnavailableError: The view's database failed the read (as
                :meth:`pending`).
            StoredRowError: Its tracking row holds a position below the log's start.
        """
        with self._reading("its position"):
            view = self.view()
            position = view.max_tracking_id(self._source.name) or 0
        if position < 0:
            raise altered_tracking_row(self._source.name)
        return position

    @contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """The view's database failing a read of ``what`` in the block, typed (a damaged
        file among the failures: the view is rebuilt from the log, never repaired)."""
        try:
            with database_errors_typed(self._view_where, f"{what} was not read{self._rebuilt}"):
                yield
        except StoredRowError as exc:  # a text column's bytes not UTF-8, say
            raise StoredRowError(f"{self._view_where}: {exc}{self._rebuilt}") from exc

    def wait_until_current(
        self,
        store: Store,
        timeout: float = 10.0,
        runner: BaseProjectionRunner[AgentApplication] | None = None,
    ) -> None:
        """Block until the view has processed every queue event in ``store``'s log.

        Args:
            store: The store the view follows.
            timeout: How long to wait, in seconds.
            runner: The runner :meth:`follow` gave, whose failure ends the wait.

        Raises:
            TimeoutError: The view is still behind after ``timeout`` seconds.
            SerializationError: The runner stopped on a record it cannot read (or
                whatever else stopped it).
            ConfigurationError: ``timeout`` is no positive number of seconds.
        """
        positive_seconds("timeout", timeout)
        deadline = time.monotonic() + timeout
        # In this process, the projection says when the view advanced; a view that
        # another process keeps is looked at again every tick.
        projection = runner.projection if isinstance(runner, QueueRunner) else None
        seen = 0 if projection is None else projection.batches_applied()
        while store.log.has_events_after(
            self.position(), *QUEUE_EVENT_TYPES, follower=QUEUE_FOLLOWER
        ):
            if runner is not None and runner.is_interrupted.is_set():
                runner.run_forever(timeout=0)  # raises what stopped it, if anything did
                return
            if time.monotonic() > deadline:
                msg = f"the review queue of {self.store_url} is still behind after {timeout}s"
                raise TimeoutError(msg)
            if projection is None:
                time.sleep(_TICK)
            else:
                projection.wait_for_batch(seen, _TICK)
                seen = projection.batches_applied()

    def pending(self) -> tuple[PendingReview, ...]:
        """Every pending item, oldest first: one query on the view's index. A listing
        that may be long reads :meth:`page` by page instead.

        Raises:
            StoreUnavailableError: The view's database failed the read (its file damaged
                among the failures).
        """
        with self._reading("the queue"):
            return self.view().pending()

    def page(
        self,
        *,
        after: str | None = None,
        limit: int = MAX_PAGE_SIZE,
        only: QueueFilter = EVERY_ITEM,
        newest_first: bool = False,
        where: Callable[[PendingReview], bool] | None = None,
    ) -> QueuePage:
        """One page of the pending items ``only`` lists, oldest first (or newest first),
        after the cursor the previous page gave: read by key from the view's index, so
        it costs its own size, however long the queue is.

        Args:
            after: The previous page's ``next_cursor``; None for the first page.
            limit: The most items the page holds (1 to 500).
            only: Which items to list (by thread, tool, kind).
            newest_first: List the newest first.
            where: Lists only the items it is true of, besides (a check no index
                holds, such as a reviewer's scopes: the items it passes over are read).

        Raises:
            InvalidPageRequestError: The cursor or the limit is not one the queue serves.
            ConfigurationError: ``newest_first`` is no bool, or ``where`` not callable.
            StoreUnavailableError: As :meth:`pending`.
        """
        check_instance("newest_first", newest_first, bool, "True or False")
        if where is not None:
            check_callable("where", where)
        with self._reading("the page"):
            return self.view().page(
                after=after, limit=limit, only=only, newest_first=newest_first, where=where
            )

    def threads_with_review(self, review_id: str, store: Store) -> tuple[str, ...] | None:
        """The threads where the review is pending, from the view's index of review ids;
        None while the view is behind ``store``'s log (it cannot tell yet).

        Raises:
            ConfigurationError: ``review_id`` is no str.
            StoreUnavailableError: As :meth:`pending`.
        """
        check_text("review_id", review_id)
        with self._reading("the review's threads"):
            position = self.position()
            found = self.view().threads_with_review(review_id)
        if store.log.has_events_after(position, *QUEUE_EVENT_TYPES, follower=QUEUE_FOLLOWER):
            return None
        return found

    def check_can_follow(self) -> None:
        """Refuse to follow the store into a view kept in a database opened read-only
        (``?mode=ro``), where the projection could record nothing: what :meth:`follow`
        asks first, and a caller may ask before, to say in its own words what to do.

        Raises:
            ReadOnlyStoreError: The view's database was opened read-only.
        """
        if self._view_read_only:
            msg = (
                f"the review queue of {self.store_url} is kept in a database opened "
                "read-only, so it cannot follow the store: pass view_url= a writable "
                "database (or memory://) to follow a read-only store"
            )
            raise ReadOnlyStoreError(msg)

    @contextmanager
    def follow(self) -> Iterator[BaseProjectionRunner[AgentApplication]]:
        """Run the projection in this process until the block exits.

        ``wait_until_current(store)`` blocks until the view has caught up; the
        runner's ``run_forever()`` blocks until it is stopped.

        Raises:
            ReadOnlyStoreError: As :meth:`check_can_follow`.
        """
        self.check_can_follow()
        view, source = self.view(), self._source
        if not source.opens_store:
            with (
                QueueRunner(view, source.application_class, self._env) as runner,
                self._counted(runner.projection),
            ):
                yield runner
            return
        # Opened as a store is (its tables created, its settings checked and taken, such
        # as its compression), and followed as opened.
        assert source.url is not None  # a store's log: opened by its URL
        opened = open_application(source.url, source.env)
        try:
            runner = QueueRunner(view, opened)
        except BaseException:
            opened.close()
            raise
        with runner, self._counted(runner.projection):
            yield runner

    @contextmanager
    def _counted(self, projection: ReviewQueueProjection) -> Iterator[None]:
        """Count what ``projection`` passes over while it follows, and keep its count,
        not it, once it stopped (a follower started again holds no runner it left)."""
        self._followed.append(projection)
        try:
            yield
        finally:
            self._followed.remove(projection)
            self._passed_over_before += projection.records_passed_over()

    def records_passed_over(self) -> int:
        """How many records of the store's log this queue's projection passed over (each
        with a warning) while it followed the log in this process (:meth:`follow`):
        records that do not decode, or whose changes its view cannot hold. Their
        threads' items may be missing from what it lists (ADR 0070)."""
        live = sum(projection.records_passed_over() for projection in self._followed)
        return self._passed_over_before + live

    def run_forever(self) -> None:
        """Follow the store until the process is stopped (for a separate process)."""
        with self.follow() as runner:
            runner.run_forever()
