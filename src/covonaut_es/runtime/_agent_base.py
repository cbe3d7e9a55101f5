"""The base of :class:`~covonaut_es.Agent`: what every command of an agent shares.

Internal. An agent is bound to one thread, loaded from the store on first use; it runs
one command at a time, each through the store's service layer
(:class:`~covonaut_es.service.ThreadService`): a run holds the thread's lease and commits
through a :class:`~covonaut_es.service.RunSession`, then publishes the new events to
``AgentConfig.on_event`` and the log. An agent without checkpoint settings keeps its
thread in a store of its own, in memory. The commands are in
:mod:`covonaut_es.runtime._agent` (running), :mod:`covonaut_es.runtime._reviews` (review
decisions) and :mod:`covonaut_es.runtime._states` (checkpoints and named states).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import cast

from covonaut_es import _logs
from covonaut_es._arguments import check_instance
from covonaut_es._closing import Closing
from covonaut_es.domain import AgentThread, RunMode
from covonaut_es.errors import ThreadStateError
from covonaut_es.messages import Delta
from covonaut_es.migrations import Upcaster
from covonaut_es.migrations._upcasting import NO_MIGRATORS
from covonaut_es.runtime._config import AgentConfig
from covonaut_es.runtime._drivers import AsyncDriver, SyncDriver
from covonaut_es.runtime._loop import Commit, Program
from covonaut_es.runtime._streaming import CommittedEvent, StreamItem
from covonaut_es.runtime._tracing import RunTrace, start_run
from covonaut_es.service import RunSession, ThreadService
from covonaut_es.store import Store, open_store

logger = _logs.logger("covonaut_es")

DEFAULT_THREAD_ID = "default"

MakeProgram = Callable[[AgentThread, str], Program]
"""Makes the program a command drives, given the thread and the W3C ``traceparent`` of
the run's trace (empty when the command is not traced)."""


class AgentBase(Closing):
    """An agent's hold on its thread: binding, one command at a time, and commits."""

    def __init__(self, config: AgentConfig) -> None:
        check_instance("Agent(config)", config, AgentConfig, "an AgentConfig")
        self.config = config
        settings = config.checkpoint
        self._thread_id = settings.thread_id if settings else DEFAULT_THREAD_ID
        if settings and not self._thread_id:
            logger.warning(
                "agent %r has no thread id: using %r; unrelated sessions must not share "
                "it, so set CheckpointSettings(thread_id=...) per user and session",
                config.name,
                DEFAULT_THREAD_ID,
            )
            self._thread_id = DEFAULT_THREAD_ID
        # Without checkpoint settings the thread lives in this agent's own memory store.
        self._own_store: Store | None = None if settings else open_store("memory://")
        store = settings.store if settings else self._own_store
        assert store is not None  # the settings' store is checked to be a Store
        self._service = ThreadService(store, verifier=config.reviewer_verifier, clock=config.clock)
        self._thread: AgentThread | None = None
        self._published_version = 0  # the last event handed to on_event and the log
        self._run_lock = threading.Lock()
        self._sink: Callable[[StreamItem], None] | None = None  # the running astream's

    @property
    def _current(self) -> AgentThread:
        if self._thread is None:
            found = self._service.store.find(self._thread_id, snapshot_migrators=self._migrators)
            thread = found or AgentThread.start(self._thread_id, now=self.config.clock())
            self._bind(thread)
            return thread
        return self._thread

    @property
    def _migrators(self) -> Mapping[int, Upcaster]:
        settings = self.config.checkpoint
        return settings.migrators if settings else NO_MIGRATORS

    def _bind(self, thread: AgentThread) -> None:
        self._thread = thread
        # Events already stored are history, not news: publish only what comes next.
        self._published_version = thread.version - len(thread.pending_events)

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        if not self._run_lock.acquire(blocking=False):
            msg = f"agent for thread {self._thread_id!r} is already running"
            raise ThreadStateError(msg)
        try:
            yield
        finally:
            self._run_lock.release()

    # Running a program in a session ---------------------------------------------------

    def _perform(self, make_program: MakeProgram, run: RunMode | None = None) -> str:
        """Drive the program under the thread's lease; ``run``: it is a run, in that
        mode, and traced if tracing is on."""
        with (
            self._exclusive(),
            self._service.session(
                self._thread_id, thread=self._thread, migrators=self._migrators
            ) as session,
        ):
            self._bind_session(session)
            driver = SyncDriver(
                self.config.provider,
                session.lease.database,
                lambda c: self._commit(session, c),
                session.check_lease,
                self._delta_receiver(),
                self._service.review_time,
            )
            trace = self._trace(session.thread, run)
            with self._failing(session, run):
                if trace is None:
                    return driver.drive(make_program(session.thread, ""))
                with trace.driving():
                    program = trace.traced(make_program(session.thread, trace.trace_parent))
                    return driver.drive(program)

    async def _aperform(
        self,
        make_program: MakeProgram,
        run: RunMode | None = None,
        sink: Callable[[StreamItem], None] | None = None,
    ) -> str:
        """Like :meth:`_perform`, awaited; ``sink`` gets what ``astream`` yields: each
        piece of the answers and each committed event."""
        with self._exclusive(), self._streaming_to(sink):
            async with self._service.asession(
                self._thread_id, thread=self._thread, migrators=self._migrators
            ) as session:
                self._bind_session(session)

                async def commit(step: Commit) -> None:
                    saved = await asyncio.to_thread(self._save, session, step)
                    self._after_commit(session, saved)

                async def guard() -> None:
                    await asyncio.to_thread(session.check_lease)

                driver = AsyncDriver(
                    self.config.provider,
                    session.lease.database,
                    commit,
                    guard,
                    self._delta_receiver(),
                    self._service.review_time,
                )
                trace = self._trace(session.thread, run)
                async with self._afailing(session, run):
                    if trace is None:
                        return await driver.drive(make_program(session.thread, ""))
                    with trace.driving():
                        program = trace.traced(make_program(session.thread, trace.trace_parent))
                        return await driver.drive(program)

    @contextlib.contextmanager
    def _failing(self, session: RunSession, run: RunMode | None) -> Iterator[None]:
        """Record the run's failure on any exception the run raises once it started,
        as :meth:`RunSession.fail <covonaut_es.service.RunSession.fail>` decides; the
        exception goes on. A ``BaseException`` (an interrupt, a cancellation) stops the
        run as a crash does: it is not recorded."""
        try:
            yield
        except Exception as exc:
            if run is not None:
                self._publish(self._failure(session, exc))
            raise

    @contextlib.asynccontextmanager
    async def _afailing(self, session: RunSession, run: RunMode | None) -> AsyncIterator[None]:
        """Like :meth:`_failing`, the store asked in a worker thread."""
        try:
            yield
        except Exception as exc:
            if run is not None:
                # Recorded in a worker thread, published on the loop: a stream's queue
                # takes its items on the loop's thread only.
                self._publish(await asyncio.to_thread(self._failure, session, exc))
            raise

    def _failure(self, session: RunSession, error: Exception) -> Sequence[AgentThread.Event]:
        """Record the run's failure (:meth:`RunSession.fail
        <covonaut_es.service.RunSession.fail>`); the events it saved, none when it could
        not (logged)."""
        try:
            news = session.fail(error, now=self.config.clock())
        except Exception:
            self._thread = None  # what is stored is read again on the next command
            logger.exception(
                "thread %r: the failure of its run (%s) could not be recorded",
                self._thread_id,
                type(error).__name__,
            )
            return ()
        self._bind_session(session)
        return news

    def _trace(self, thread: AgentThread, run: RunMode | None) -> RunTrace | None:
        return None if run is None else start_run(self.config, thread, run)

    @contextlib.contextmanager
    def _streaming_to(self, sink: Callable[[StreamItem], None] | None) -> Iterator[None]:
        self._sink = sink
        try:
            yield
        finally:
            self._sink = None

    def _delta_receiver(self) -> Callable[[Delta], None] | None:
        """Who gets the answers' pieces: ``on_delta`` and the running ``astream``; None
        when nobody asked for them, so the answers are asked for in one piece."""
        sink, on_delta = self._sink, self.config.on_delta
        if sink is None and on_delta is None:
            return None

        def receive(piece: Delta) -> None:
            if sink is not None:
                sink(piece)
            if on_delta is None:
                return
            try:
                on_delta(piece)
            except Exception:
                logger.exception(
                    "on_delta callback of agent %r failed on %s; the run goes on",
                    self.config.name,
                    type(piece).__name__,
                )

        return receive

    def _bind_session(self, session: RunSession) -> None:
        if session.thread is not self._thread:
            self._bind(session.thread)

    def _commit(self, session: RunSession, step: Commit) -> None:
        self._after_commit(session, self._save(session, step))

    def _save(self, session: RunSession, step: Commit) -> Sequence[AgentThread.Event]:
        """Save what the step asks for; the events it makes news of (with
        ``durability="checkpoint"`` a step that saves nothing still ends: its events are
        news)."""
        settings = self.config.checkpoint
        durability = settings.durability if settings else "step"
        if not (step.checkpoint or step.always or durability == "step"):
            return [cast(AgentThread.Event, e) for e in session.thread.pending_events]
        try:
            return session.commit(snapshot=step.checkpoint, movable=step.movable)
        except BaseException:
            self._thread = None  # a failed save took the events: reload what is stored
            raise

    def _after_commit(self, session: RunSession, news: Sequence[AgentThread.Event]) -> None:
        self._publish(news)
        session.stop_if_abandoned()

    def _publish(self, events: Sequence[AgentThread.Event]) -> None:
        for event in events:
            if event.originator_version <= self._published_version:
                continue
            self._published_version = event.originator_version
            _log_event(self._thread_id, event)
            if self._sink is not None:
                self._sink(CommittedEvent(event))
            if self.config.on_event is None:
                continue
            try:
                self.config.on_event(event)
            except Exception:
                logger.exception(
                    "on_event callback of agent %r failed on %s; the run goes on",
                    self.config.name,
                    type(event).__name__,
                )

    def close(self) -> None:
        """Forget the in-memory thread; nothing unsaved is written. An agent without
        checkpoint settings loses its thread."""
        self._thread = None
        if self._own_store is not None:
            self._own_store.close()


def _log_event(thread_id: str, event: AgentThread.Event) -> None:
    # Run boundaries at INFO, failures at WARNING, every other event at DEBUG. Contents
    # of messages and tool results are never logged: they may hold personal data.
    version = event.originator_version
    match event:
        case AgentThread.RunStarted(mode=mode):
            logger.info("thread %r: %s started at version %d", thread_id, mode, version)
        case AgentThread.RunFinished():
            logger.info("thread %r: run finished at version %d", thread_id, version)
        case AgentThread.Interrupted(interrupt=interrupt):
            logger.info(
                "thread %r: paused at version %d (%s) by tool %r: %s",
                thread_id,
                version,
                interrupt.kind,
                interrupt.tool_name,
                interrupt.reason,
            )
        case AgentThread.RunFailed(error_type=error_type, message=message):
            logger.warning(
                "thread %r: run failed at version %d: %s: %s",
                thread_id,
                version,
                error_type,
                message,
            )
        case _:
            logger.debug("thread %r: %s at version %d", thread_id, type(event).__name__, version)
