"""The base of :class:`~covonaut_es.Agent`: what every command of an agent shares.

Internal. An agent is bound to one thread, loaded from the store on first use; it runs
one command at a time; it commits the thread's new events to the store as a command
asks, then publishes them to ``AgentConfig.on_event`` and the log. The commands are in
:mod:`covonaut_es.runtime._agent` (running), :mod:`covonaut_es.runtime._reviews` (review decisions)
and :mod:`covonaut_es.runtime._states` (checkpoints and named states).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import cast

from covonaut_es._closing import Closing
from covonaut_es.domain import AgentThread
from covonaut_es.errors import ThreadConflictError, ThreadStateError
from covonaut_es.runtime._config import AgentConfig
from covonaut_es.runtime._loop import Commit

logger = logging.getLogger("covonaut_es")

DEFAULT_THREAD_ID = "default"


class AgentBase(Closing):
    """An agent's hold on its thread: binding, one command at a time, and commits."""

    def __init__(self, config: AgentConfig) -> None:
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
        self._thread: AgentThread | None = None
        self._published_version = 0  # the last event handed to on_event and the log
        self._run_lock = threading.Lock()

    @property
    def _current(self) -> AgentThread:
        if self._thread is None:
            settings = self.config.checkpoint
            found = (
                settings.store.find(self._thread_id, snapshot_migrators=settings.migrators)
                if settings
                else None
            )
            thread = found or AgentThread.start(self._thread_id, now=self.config.clock())
            self._bind(thread)
            return thread
        return self._thread

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
        except ThreadConflictError:
            self._thread = None  # diverged from the store: reload on next use
            raise
        finally:
            self._run_lock.release()

    def _leased(self) -> contextlib.AbstractContextManager[None]:
        """Hold the thread's run lease while a command runs, so that no other runner
        runs it meanwhile; without a store the thread is this agent's alone."""
        settings = self.config.checkpoint
        return settings.store.lease(self._thread_id) if settings else contextlib.nullcontext()

    def _aleased(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Like :meth:`_leased`, for asyncio."""
        settings = self.config.checkpoint
        return settings.store.alease(self._thread_id) if settings else contextlib.nullcontext()

    def _commit(self, commit: Commit) -> None:
        self._persist(self._current, commit)

    async def _acommit(self, commit: Commit) -> None:
        self._publish(await asyncio.to_thread(self._store_step, self._current, commit))

    def _persist(self, thread: AgentThread, commit: Commit) -> None:
        self._publish(self._store_step(thread, commit))

    def _store_step(self, thread: AgentThread, commit: Commit) -> Sequence[AgentThread.Event]:
        """Save what the commit asks for; returns the events it makes news of."""
        news = [
            cast(AgentThread.Event, event)
            for event in thread.pending_events
            if event.originator_version > self._published_version
        ]
        settings = self.config.checkpoint
        if settings is None:
            return news
        if commit.checkpoint or commit.always or settings.durability == "step":
            settings.store.save(thread)
        if commit.checkpoint:
            settings.store._save_checkpoint_snapshot(thread)
        return news

    def _publish(self, events: Sequence[AgentThread.Event]) -> None:
        for event in events:
            self._published_version = event.originator_version
            _log_event(self._thread_id, event)
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
                "thread %r: paused at version %d by tool %r: %s",
                thread_id,
                version,
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
