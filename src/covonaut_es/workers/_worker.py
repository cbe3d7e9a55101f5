"""The worker: follow the store's log and run every thread that is ready (ADR 0017)."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from datetime import datetime, timedelta
from uuid import UUID

import attrs

from covonaut_es import _logs
from covonaut_es._arguments import (
    check_callable,
    check_instance,
    check_whole,
    positive_seconds,
    refuse,
)
from covonaut_es._clock import AwareClock, utc_now
from covonaut_es._closing import Closing
from covonaut_es.errors import (
    StoreFileReplacedError,
    StoreUnavailableError,
    ThreadAbandonedError,
    ThreadBusyError,
    ToolCallsInDoubtError,
)
from covonaut_es.runtime import AgentConfig, running_calls
from covonaut_es.runtime._config import bound_config
from covonaut_es.service import ThreadService
from covonaut_es.store import Store
from covonaut_es.store._backend import POLL_INTERVAL
from covonaut_es.store._leases import (
    HEARTBEAT_INTERVAL,
    WorkerRecord,
    check_worker_id,
    now_record,
)
from covonaut_es.store._write_errors import passes_when_answered
from covonaut_es.workers._candidates import Candidates
from covonaut_es.workers._deadlines import ReviewDeadlines
from covonaut_es.workers._notices import NoticeSender, ReviewNotifier
from covonaut_es.workers._outstanding import FOLLOWED, catch_up, events, fold, restore
from covonaut_es.workers._ready import ReadyThreads
from covonaut_es.workers._recall import recalling
from covonaut_es.workers._step import Action, pause_in_doubt, step

logger = _logs.logger("covonaut_es.workers")

CATCH_UP_INTERVAL = 10.0
"""Seconds between a running worker's updates of the store's table of outstanding
threads, which the next worker to start reads instead of the whole log."""


@attrs.frozen
class WorkerSummary:
    """What :meth:`Worker.run` did.

    Attributes:
        steps: Thread steps that ran something (resumed, ran input, took over, ...).
        failed: The threads whose step failed (an error the worker logged), in order.
    """

    steps: int = 0
    failed: tuple[str, ...] = ()


class Worker(Closing):
    """Runs every thread of a store that is ready, to its next pause or end.

    A thread is ready when it is paused only on reviews that are all decided, when an
    application handed it input with :meth:`Store.submit <covonaut_es.Store.submit>`,
    or when the runner of its last run died mid-run (a call in doubt is then retried
    if its tool is idempotent, and otherwise left for a person: the worker logs it and
    goes on). Each thread is run under its run lease, so any number of workers, in
    any number of processes and machines, can follow one store.

    A worker also sweeps review deadlines (see ``Tool.review_deadline``): a review past
    its deadline, by the clock, is expired (it fails closed, and the thread goes on as
    after a rejection), and with ``notice_lead`` a review expiring within it is noted
    once. With a ``notifier``, it sends the store's review notices (a review asked for,
    a deadline near) in a thread of its own, each at least once (ADR 0043).

    Args:
        store: The store to follow; the worker takes leases through it and names
            itself as their holder.
        make_config: Gives the agent configuration of a thread id; one without
            checkpoint settings is bound to ``store`` and that thread.
        concurrency: How many threads this worker runs at once.
        poll_interval: Seconds between reads of the store's log.
        worker_id: The worker's id in the registry; by default host, process id and
            a random suffix. Visible text of at most 200 bytes, without ``/``
            (:func:`~covonaut_es.store._leases.check_worker_id`).
        notifier: Delivers the review notices, e.g. a
            :class:`~covonaut_es.workers.WebhookNotifier`; None sends none.
        notice_lead: How long before a review's deadline its notice is recorded; None
            records none.
        clock: The time deadlines are judged by and the sweep's events record; the
            store's clock by default. A time it gives without a timezone is a
            ``ConfigurationError`` naming it.

    Raises:
        ConfigurationError: An argument is of the wrong type or out of range (a
            concurrency of 0, a poll interval that is no positive number of seconds).
    """

    def __init__(
        self,
        store: Store,
        make_config: Callable[[str], AgentConfig],
        *,
        concurrency: int = 1,
        poll_interval: float = POLL_INTERVAL,
        worker_id: str | None = None,
        notifier: ReviewNotifier | None = None,
        notice_lead: timedelta | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        check_instance("Worker(store)", store, Store, "a Store (see open_store)")
        check_callable("Worker(make_config)", make_config)
        check_whole("Worker(concurrency)", concurrency, least=1)
        positive_seconds("Worker(poll_interval)", poll_interval)
        if worker_id is not None:
            check_worker_id("Worker(worker_id)", worker_id)
        if notice_lead is not None:
            check_instance("Worker(notice_lead)", notice_lead, timedelta, "a timedelta")
            if notice_lead <= timedelta(0):
                refuse("Worker(notice_lead)", "a positive timedelta", notice_lead)
        if notifier is not None:
            check_callable("Worker(notifier)", notifier)
        self.store = store
        self.make_config = make_config
        self.concurrency = concurrency
        self.poll_interval = poll_interval
        host, pid = socket.gethostname(), os.getpid()
        self.worker_id = worker_id or f"{host}-{pid}-{uuid.uuid4().hex[:6]}"
        store.name_lease_holder(f"worker {self.worker_id}")
        self._record = WorkerRecord(
            worker_id=self.worker_id,
            host=host,
            pid=pid,
            started_at=utc_now(),
            heartbeat_at=utc_now(),
        )
        self._stopping = threading.Event()
        self._changed = threading.Event()
        self._ready = ReadyThreads(store.log.thread_id_of, recalling(store))
        self._candidates = Candidates(self._ready)
        self._deadlines = ReviewDeadlines()
        self.notice_lead = notice_lead
        self._clock = AwareClock(store.clock if clock is None else clock)
        self._service = ThreadService(store, clock=self._clock)
        self._sender = None if notifier is None else NoticeSender(store, notifier)
        self._position = 0
        self._table_due = time.monotonic() + CATCH_UP_INTERVAL
        self._steps = 0
        self._failed: list[str] = []
        self._lost: StoreFileReplacedError | None = None

    def stop(self) -> None:
        """Ask the worker to stop: it finishes the steps it is running, releases their
        leases and returns from :meth:`run`. Safe to call from a signal handler."""
        self._stopping.set()

    def close(self) -> None:
        """Stop the worker; the store stays open."""
        self.stop()

    def run(self, *, once: bool = False) -> WorkerSummary:
        """Follow the store and run ready threads until :meth:`stop`; with ``once``,
        until no thread is ready that this worker could run (threads other runners
        hold are left to them).

        Returns:
            How many steps ran and which failed (``covonaut-es worker --once`` exits
            nonzero when any did).
        """
        heartbeat = threading.Thread(target=self._beat, name="worker-heartbeat", daemon=True)
        notices = threading.Thread(
            target=self._notify, args=(once,), name="worker-notices", daemon=True
        )
        self.store.publish_worker(self._record)
        heartbeat.start()
        if self._sender is not None:
            notices.start()
        logger.info(
            "worker %s: following %s, concurrency %d",
            self.worker_id,
            self.store.url,
            self.concurrency,
        )
        self._steps, self._failed = 0, []
        try:
            with ThreadPoolExecutor(self.concurrency, thread_name_prefix="worker") as pool:
                self._loop(pool, once=once)
            if self._lost is not None:
                raise self._lost
            return WorkerSummary(self._steps, tuple(self._failed))
        finally:
            self._stopping.set()
            self._changed.set()
            heartbeat.join()
            if notices.is_alive():
                notices.join()
            self._withdraw()
            logger.info("worker %s: stopped", self.worker_id)

    def _withdraw(self) -> None:
        """Withdraw the worker's record; one that cannot be withdrawn (its database
        down) lapses with its heartbeat, and must not hide why the worker stopped."""
        try:
            self.store.withdraw_worker(self.worker_id)
        except Exception as exc:
            logger.warning(
                "worker %s: its record was not withdrawn (%s); it lapses once its heartbeat stops",
                self.worker_id,
                exc,
            )

    def _loop(self, pool: ThreadPoolExecutor, *, once: bool) -> None:
        running: dict[Future[Action | None], tuple[UUID, str]] = {}
        self._start()
        while not self._stopping.is_set():
            if not self._followed(once=once):
                self._stopping.wait(self.poll_interval)
                continue
            self._keep_table(time.monotonic())
            if self._sweep():
                continue  # the expired threads are ready: follow their events first
            chosen = self._candidates.next(
                self.concurrency - len(running), time.monotonic(), once=once
            )
            if once and not chosen and not running:
                return
            for stream in chosen:
                thread_id = self._ready.thread_id(stream)
                if thread_id is not None:  # else no thread has the stream: forgotten
                    self._candidates.started(stream)
                    running[pool.submit(self._step, thread_id)] = (stream, thread_id)
            if not running:  # wait() returns at once on no futures
                self._stopping.wait(self.poll_interval)
                continue
            done, _ = wait(running, timeout=self.poll_interval, return_when=FIRST_COMPLETED)
            for future in done:
                (stream, thread_id), action = running.pop(future), future.result()
                self._candidates.finished(stream, action, time.monotonic())
                if action is Action.FAILED:
                    self._failed.append(thread_id)
                elif action not in (None, Action.NOTHING):
                    self._steps += 1
        for future in list(running):  # stopping: finish the steps under way
            future.result()

    def _followed(self, *, once: bool) -> bool:
        """Fold the log's new events of the tracked types; False when the database did
        not answer (a failover, a restart: eventsourcing's retries of the read ran out),
        which is logged, and asked again at the next step, as long as the worker runs
        (a run ``once`` raises it)."""
        try:
            self._follow()
        except StoreUnavailableError as exc:
            if once or not passes_when_answered(exc):
                raise
            if not self._stopping.is_set():
                logger.warning(
                    "worker %s: the store's log was not read (%s); reading it again",
                    self.worker_id,
                    exc,
                )
            return False
        return True

    def _follow(self) -> None:
        """Fold the log's new events of the tracked types."""
        found = self.store.log.notifications(*FOLLOWED, after=self._position)
        for position, event in events(self.store, found, self.worker_id):
            if event is not None:
                fold(self._ready, self._deadlines, event)
            self._position = position

    def _start(self) -> None:
        """Begin from the store's table of outstanding threads, brought up to date, and
        follow the log after its position; with no table (or one that cannot be read),
        from the start of the log."""
        table = self.store.outstanding_threads
        if table is None or self._position:
            return
        for _ in range(2):  # a table spoiled by another writer is made again once
            catch_up(self.store, self.worker_id)
            found = table.read()
            if found is not None:
                names, recall = self.store.log.thread_id_of, recalling(self.store)
                ready, deadlines = ReadyThreads(names, recall), ReviewDeadlines()
                if restore(found[1], ready, deadlines):
                    self._ready, self._deadlines, self._position = ready, deadlines, found[0]
                    self._candidates = Candidates(ready)
                    return
            table.clear()

    def _keep_table(self, now: float) -> None:
        """Bring the table of outstanding threads up to date, every
        :data:`CATCH_UP_INTERVAL`; a failure only leaves more for the next."""
        if self.store.outstanding_threads is None or now < self._table_due:
            return
        self._table_due = now + CATCH_UP_INTERVAL
        try:
            catch_up(self.store, self.worker_id)
        except Exception as exc:
            logger.warning("worker %s: updating the outstanding threads: %s", self.worker_id, exc)

    def _sweep(self) -> bool:
        """Expire the reviews past their deadline and note the ones near it, in the
        threads the log says hold any (the service decides from each thread itself);
        whether any expired."""
        now, any_expired = self._clock(), False
        for thread_id in self._deadlines.due(now, self.notice_lead):
            try:
                expired = self._service.expire_reviews(thread_id)
                if self.notice_lead is not None:
                    self._service.note_deadlines_near(thread_id, self.notice_lead)
            except Exception:
                logger.exception(
                    "worker %s: sweeping the review deadlines of thread %r failed",
                    self.worker_id,
                    thread_id,
                )
                continue
            self._deadlines.swept(thread_id, now, self.notice_lead)
            any_expired = any_expired or bool(expired)
            for decision in expired:
                logger.info(
                    "worker %s: review %s of thread %r expired at its deadline",
                    self.worker_id,
                    decision.review_id,
                    thread_id,
                )
        return any_expired

    def _notify(self, once: bool) -> None:
        """Send the review notices until the worker stops (with ``once``, those its
        last steps recorded too); one that fails is tried again, before any later
        one, after a poll interval."""
        assert self._sender is not None
        while True:
            stopping = self._stopping.wait(self.poll_interval)
            if stopping and not once:
                return
            try:
                self._sender.send_pending()
            except Exception as exc:
                logger.warning("worker %s: review notices: %s", self.worker_id, exc)
            if stopping:
                return

    def _step(self, thread_id: str) -> Action | None:
        """Run one thread under its lease; None when another runner holds it."""
        started, held = time.monotonic(), False
        try:
            with self.store.lease(thread_id):
                held = True
                self._changed.set()  # the registry lists the thread now held
                try:
                    action = self._run(thread_id)
                finally:
                    self._report_still_running(thread_id)
        except ThreadBusyError:
            return None
        except Exception:
            logger.exception("worker %s: thread %r failed", self.worker_id, thread_id)
            return Action.FAILED
        finally:
            if held:
                self._changed.set()  # ...and, released, no longer
        if action is not Action.NOTHING:
            status = self.store.state_at(thread_id).status  # what the step left
            logger.info(
                "worker %s: thread %r %s, now %s (%.0f ms)",
                self.worker_id,
                thread_id,
                action.value,
                status,
                (time.monotonic() - started) * 1000,
            )
        return action

    def _run(self, thread_id: str) -> Action:
        """Run a thread whose lease is held; pause it on calls in doubt that no runner
        may retry."""
        config = bound_config(self.make_config, self.store, thread_id)
        try:
            return step(self.store, config, thread_id)
        except ThreadAbandonedError:  # what a person asked for: no failure of the step
            return Action.ABANDONED
        except ToolCallsInDoubtError as exc:
            pause_in_doubt(self.store, config, thread_id)
            logger.warning(
                "worker %s: thread %r has calls in doubt %s that no runner may retry: "
                "paused for a person to settle them",
                self.worker_id,
                thread_id,
                list(exc.tool_call_ids),
            )
            return Action.PAUSED_IN_DOUBT

    def _report_still_running(self, thread_id: str) -> None:
        """Publish the worker's record now if a call of the thread still runs (past its
        timeout), before the lease is let go: a person's settle or retry of it, which
        takes the lease, then finds it listed, where the next beat would come too late."""
        if any(call.thread_id == thread_id for call in running_calls(self.store)):
            self._publish()

    def _publish(self) -> None:
        record = now_record(self._record, self.store.threads_held(), running_calls(self.store))
        self.store.publish_worker(record)

    def _beat(self) -> None:
        while not self._stopping.is_set():
            self._changed.wait(HEARTBEAT_INTERVAL)  # a beat, or the threads held changed
            self._changed.clear()
            try:
                self._publish()
            except StoreFileReplacedError as exc:  # it would follow the old file unseen
                self._lost = exc
                self.stop()
            except Exception:
                logger.exception("worker %s: heartbeat failed", self.worker_id)
