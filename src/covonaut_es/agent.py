"""The runtime facade: an agent bound to one thread, driving the run loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, cast

from covonaut_es.aio import in_worker_thread
from covonaut_es.approvals import Decision, ReviewDecision, ReviewerVerifier, ReviewRequest
from covonaut_es.config import AgentConfig, CheckpointSettings
from covonaut_es.domain import AgentThread
from covonaut_es.drivers import AsyncDriver, SyncDriver
from covonaut_es.errors import (
    ConfigurationError,
    ReviewerNotVerifiedError,
    StateNotFoundError,
    ThreadConflictError,
    ThreadStateError,
)
from covonaut_es.named_state import check_state_key
from covonaut_es.runloop import (
    Commit,
    Program,
    RunSettings,
    retry_program,
    run_program,
    settle_program,
)
from covonaut_es.states import (
    StateStore,
    decode_state_document,
    encode_state_document,
    state_document,
)
from covonaut_es.tools import result_text
from covonaut_es.values import (
    Checkpoint,
    CheckpointReason,
    Interrupt,
    Message,
    PendingToolCall,
    Role,
    RunMode,
    StateDocument,
    ThreadState,
    ThreadStatus,
    Usage,
)

logger = logging.getLogger("covonaut_es")

DEFAULT_THREAD_ID = "default"
_NO_RESULT: Any = object()


class Agent:
    """An LLM agent whose state is the event-sourced thread it is bound to.

    The thread id comes from ``config.checkpoint.thread_id``. If the store already has
    that thread, the agent continues it; otherwise the first run starts it.

    A run returns the final answer, or ``""`` when a tool interrupted it: check
    :attr:`interrupted` after every run (B13).

    ``arun``, ``acontinue_run``, ``aresume`` and ``asettle`` are the same commands for
    asyncio: they drive the same run loop, await ``async def`` providers and tools, run
    blocking ones and every store call in worker threads, and run a parallel batch of
    tool calls as concurrent tasks. One agent runs one command at a time, either way.
    """

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
        self._steering: deque[Message] = deque()
        self._run_lock = threading.Lock()

    # State ------------------------------------------------------------------------

    @property
    def thread_id(self) -> str:
        """The id of the thread this agent runs."""
        return self._thread_id

    @property
    def state(self) -> ThreadState:
        """A read-only copy of the thread's current state."""
        return self._current.state

    @property
    def status(self) -> ThreadStatus:
        """The thread's status."""
        return self._current.status

    @property
    def messages(self) -> tuple[Message, ...]:
        """Every message of the thread, oldest first."""
        return tuple(self._current.messages)

    @property
    def usage(self) -> Usage:
        """Token usage accumulated over the thread's runs."""
        return self._current.usage

    @property
    def interrupted(self) -> Interrupt | None:
        """The pending interrupt (the first, if a batch raised several), or None."""
        interrupts = self._current.interrupts
        return interrupts[0] if interrupts else None

    @property
    def interrupts(self) -> tuple[Interrupt, ...]:
        """Every pending interrupt."""
        return tuple(self._current.interrupts)

    @property
    def in_doubt(self) -> tuple[PendingToolCall, ...]:
        """Tool calls recorded as called whose result was never recorded (B5)."""
        return self._current.in_doubt

    @property
    def pending_reviews(self) -> tuple[ReviewRequest, ...]:
        """Review requests awaiting a decision; ``resume()`` needs every one decided."""
        return tuple(review.request for review in self._current.reviews.pending)

    # Commands ---------------------------------------------------------------------

    def run(self, input: str) -> str:
        """Append a user message and run until an answer or an interrupt (B16)."""
        return self._drive(RunMode.RUN, input)

    def continue_run(self) -> str:
        """Run on from the history without new input (B16)."""
        return self._drive(RunMode.CONTINUE, None)

    def resume(self) -> str:
        """Clear the pending interrupt and run on from the recorded tool results; the
        interrupted call is never run again (B15, B16).

        Raises:
            NotInterruptedError: No interrupt is pending.
        """
        return self._drive(RunMode.RESUME, None)

    async def arun(self, input: str) -> str:
        """Like :meth:`run`, awaited."""
        return await self._adrive(RunMode.RUN, input)

    async def acontinue_run(self) -> str:
        """Like :meth:`continue_run`, awaited."""
        return await self._adrive(RunMode.CONTINUE, None)

    async def aresume(self) -> str:
        """Like :meth:`resume`, awaited.

        Raises:
            NotInterruptedError: No interrupt is pending.
        """
        return await self._adrive(RunMode.RESUME, None)

    def steer(self, message: str | Message) -> None:
        """Queue a message for the model; it is recorded when the next model call is
        prepared (B14). A string is a user message."""
        if isinstance(message, str):
            message = Message(Role.USER, message)
        self._steering.append(message)

    def settle(self, tool_call_id: str, *, result: Any = _NO_RESULT, retry: bool = False) -> None:
        """Settle a tool call in doubt (B5): after checking the external state, either
        record its ``result`` or run it again with ``retry=True`` (same idempotency key).

        Settling is recorded as an event. Nothing ever re-runs a call in doubt unless
        settled with ``retry=True`` or its tool is declared ``idempotent``.

        Raises:
            ThreadStateError: The call is not open, or neither or both of ``result``
                and ``retry`` were given.
        """
        self._perform(self._settling(tool_call_id, result, retry))

    async def asettle(
        self, tool_call_id: str, *, result: Any = _NO_RESULT, retry: bool = False
    ) -> None:
        """Like :meth:`settle`, awaited."""
        await self._aperform(self._settling(tool_call_id, result, retry))

    def approve(self, review_id: str, *, reviewer: Any, comment: str = "") -> ReviewDecision:
        """Approve the exact operation of a pending review (B19).

        The approval authorizes one later call of the same tool with the same arguments
        (B20): after ``resume()`` the model calls the tool again and the call runs.

        Args:
            review_id: From the review request (the interrupt's data).
            reviewer: The reviewer's credential, checked by
                ``AgentConfig.reviewer_verifier``; the decision names the verified id.
            comment: Recorded with the decision; the model reads it.

        Returns:
            The recorded decision.

        Raises:
            ReviewerNotVerifiedError: The credential does not verify; nothing is recorded.
            ReviewNotFoundError: This thread has no such review.
            StaleReviewError: The review was decided already.
            ConfigurationError: No reviewer verifier is configured.
            ThreadStateError: The agent is running.
        """
        return self._decide(review_id, Decision.APPROVED, reviewer, comment)

    def reject(self, review_id: str, *, reviewer: Any, reason: str = "") -> ReviewDecision:
        """Reject the operation of a pending review; the model reads the reason as the
        call's result after ``resume()``. Arguments and errors as :meth:`approve`."""
        return self._decide(review_id, Decision.REJECTED, reviewer, reason)

    def save_checkpoint(self) -> int:
        """Save a checkpoint now and return its sequence number."""
        settings = self._require_checkpointing("save_checkpoint()")
        with self._run_lock:
            thread = self._current
            checkpoint = thread.save_checkpoint(
                CheckpointReason.MANUAL,
                retain=settings.store.max_checkpoints_per_thread,
                now=self.config.clock(),
            )
            self._persist(thread, Commit(checkpoint=True))
            return checkpoint.sequence

    def restore_latest_checkpoint(self, thread_id: str | None = None) -> Checkpoint | None:
        """Bind this agent to a stored thread and load its latest committed state.

        Restores state and interrupt information only: the model is not called (B16).
        Then call ``run``, ``continue_run`` or ``resume``.

        Args:
            thread_id: The thread to restore; defaults to the configured one.

        Returns:
            The thread's newest checkpoint, or None if none was saved yet.

        Raises:
            ThreadNotFoundError: The store has no such thread.
        """
        settings = self._require_checkpointing("restore_latest_checkpoint()")
        with self._run_lock:
            thread = settings.store.load(
                thread_id or self._thread_id, snapshot_migrators=settings.migrators
            )
            self._thread_id = thread.thread_id
            self._bind(thread)
            return thread.checkpoints[-1] if thread.checkpoints else None

    asave_checkpoint = in_worker_thread(save_checkpoint)
    aapprove = in_worker_thread(approve)
    areject = in_worker_thread(reject)
    arestore_latest_checkpoint = in_worker_thread(restore_latest_checkpoint)

    # Named states (B1) ----------------------------------------------------------------

    def save_state(self, key: str) -> StateDocument:
        """Save a self-contained copy of the thread's current state under ``key`` in
        ``AgentConfig.state_store``, replacing what was saved there. The thread itself
        is not changed.

        Returns:
            The document saved; it is stored with its schema version.

        Raises:
            ConfigurationError: No state store is configured.
            InvalidStateKeyError: The key is not allowed.
            ToolCallsInDoubtError: Some tool calls have no recorded result; settle them
                first (B5).
        """
        store = self._require_state_store("save_state()")
        check_state_key(key)
        with self._run_lock:
            document = state_document(self._current.state, saved_at=self.config.clock())
        store.write_state(key, encode_state_document(document))
        return document

    def load_state(self, key: str, *, thread_id: str | None = None) -> ThreadState:
        """Continue from the state saved under ``key``, as a new thread (B1).

        The document is first migrated to the current schema, with
        ``AgentConfig.state_migrators`` replacing the library's steps they name (B25);
        if that fails, nothing has changed. The agent is then bound to a new thread
        whose first event, ``StartedFromState``, records the key, the document and the
        schema version it was stored at. Like a restore, this never calls the model:
        then call ``run``, ``continue_run`` or ``resume`` (B16).

        Args:
            key: The key the state was saved under.
            thread_id: The new thread's id; by default the key and a random suffix.

        Returns:
            The new thread's state.

        Raises:
            ConfigurationError: No state store is configured.
            InvalidStateKeyError: The key is not allowed.
            StateNotFoundError: Nothing is saved under the key.
            SerializationError: The document cannot be migrated or read; the subclass
                says why (``SchemaVersionError`` for a document newer than this code).
            ThreadConflictError: The checkpoint store already has a thread with that id.
        """
        store = self._require_state_store("load_state()")
        data = store.read_state(key)
        if data is None:
            msg = f"no state is saved under key {key!r} in {store!r}; save_state({key!r}) saves one"
            raise StateNotFoundError(msg)
        document, stored_version = decode_state_document(
            data, where=f"state {key!r} in {store!r}", migrators=self.config.state_migrators
        )
        new_thread_id = thread_id or f"{key}-{uuid.uuid4().hex[:12]}"
        settings = self.config.checkpoint
        if settings is not None and settings.store.exists(new_thread_id):
            msg = (
                f"thread {new_thread_id!r} already exists in store {settings.store.url}; "
                "load_state() starts a new thread: pass another thread_id"
            )
            raise ThreadConflictError(msg, thread_id=new_thread_id, expected_version=0)
        thread = AgentThread.start_from_state(
            new_thread_id,
            key=key,
            document=document,
            stored_version=stored_version,
            now=self.config.clock(),
        )
        with self._exclusive():
            previous_thread_id, self._thread_id = self._thread_id, new_thread_id
            self._bind(thread)
            try:
                self._persist(thread, Commit())
            except ThreadConflictError:
                self._thread_id = previous_thread_id  # created meanwhile by another writer
                raise
        return thread.state

    asave_state = in_worker_thread(save_state)
    aload_state = in_worker_thread(load_state)

    def close(self) -> None:
        """Forget the in-memory thread; nothing unsaved is written."""
        self._thread = None

    def __enter__(self) -> Agent:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # Driving ----------------------------------------------------------------------

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

    def _decide(
        self, review_id: str, decision: Decision, credential: Any, comment: str
    ) -> ReviewDecision:
        reviewer = self._require_verifier().verify(credential)  # before anything is read
        if not isinstance(reviewer, str) or not reviewer:
            msg = (
                f"the reviewer verifier returned {reviewer!r} instead of a reviewer id; "
                "a ReviewerVerifier must return a non-empty string or raise"
            )
            raise ReviewerNotVerifiedError(msg)
        with self._exclusive():
            try:
                return self._record_decision(review_id, decision, reviewer, comment)
            except ThreadConflictError:
                # Decided on a stale copy: check the decision again on the stored head.
                return self._record_decision(review_id, decision, reviewer, comment)

    def _record_decision(
        self, review_id: str, decision: Decision, reviewer: str, comment: str
    ) -> ReviewDecision:
        thread = self._current
        decided = thread.decide_review(
            review_id, decision, reviewer=reviewer, comment=comment, now=self.config.clock()
        )
        try:
            self._persist(thread, Commit(always=True))
        except Exception:
            self._thread = None  # the decision is not stored: reload on next use
            raise
        return decided

    def _require_verifier(self) -> ReviewerVerifier:
        if self.config.reviewer_verifier is None:
            msg = (
                "approve() and reject() need AgentConfig(reviewer_verifier=...) to verify "
                "who decides, e.g. HmacReviewerVerifier(secret)"
            )
            raise ConfigurationError(msg)
        return self.config.reviewer_verifier

    def _drive(self, mode: RunMode, user_input: str | None) -> str:
        return self._perform(self._running(mode, user_input))

    async def _adrive(self, mode: RunMode, user_input: str | None) -> str:
        return await self._aperform(self._running(mode, user_input))

    def _running(self, mode: RunMode, user_input: str | None) -> Callable[[AgentThread], Program]:
        return lambda thread: run_program(
            thread,
            self.config,
            self._run_settings(),
            mode,
            user_input=user_input,
            steering=self._drain_steering,
        )

    def _settling(
        self, tool_call_id: str, result: Any, retry: bool
    ) -> Callable[[AgentThread], Program]:
        if (result is _NO_RESULT) == (not retry):
            msg = "settle() takes exactly one of result=... or retry=True"
            raise ThreadStateError(msg)
        if retry:
            return lambda thread: retry_program(thread, self.config, tool_call_id)
        content = result_text(result)
        return lambda thread: settle_program(thread, self.config, tool_call_id, content)

    def _perform(self, make_program: Callable[[AgentThread], Program]) -> str:
        with self._exclusive():
            driver = SyncDriver(self.config.provider, self._commit)
            return driver.drive(make_program(self._current))

    async def _aperform(self, make_program: Callable[[AgentThread], Program]) -> str:
        with self._exclusive():
            # Reading _current may load the thread from the store: keep it off the loop.
            thread = await asyncio.to_thread(lambda: self._current)
            driver = AsyncDriver(self.config.provider, self._acommit)
            return await driver.drive(make_program(thread))

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

    def _run_settings(self) -> RunSettings:
        settings = self.config.checkpoint
        if settings is None:
            return RunSettings(checkpointing=False)
        return RunSettings(
            checkpointing=True,
            retain=settings.store.max_checkpoints_per_thread,
            save_on_turn_start=settings.save_on_turn_start,
            skip_save_on_turn_end=settings.skip_save_on_turn_end,
        )

    def _drain_steering(self) -> tuple[Message, ...]:
        drained = []
        while self._steering:
            drained.append(self._steering.popleft())
        return tuple(drained)

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
            settings.store.save_checkpoint_snapshot(thread)
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

    def _require_state_store(self, operation: str) -> StateStore:
        if self.config.state_store is None:
            msg = (
                f"{operation} needs AgentConfig(state_store=...): a MemoryStateStore, a "
                "FileStateStore(path) or a Store"
            )
            raise ConfigurationError(msg)
        return self.config.state_store

    def _require_checkpointing(self, operation: str) -> CheckpointSettings:
        if self.config.checkpoint is None:
            msg = f"{operation} needs AgentConfig(checkpoint=CheckpointSettings(store=...))"
            raise ConfigurationError(msg)
        return self.config.checkpoint


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
