"""The agent thread as an event-sourced aggregate.

``AgentThread`` holds everything an agent knows about one conversation and derives it
only from its events. Command methods validate and then trigger exactly one event
each (or one per item); the ``apply`` methods of its event classes (defined in
:mod:`covonaut_es.thread_events`, reached as ``AgentThread.<Name>``) are the only code
that changes state. The aggregate does no I/O and reads no clock: every command takes
the time from its caller.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeAlias

import msgspec
from eventsourcing.domain import Aggregate

from covonaut_es import thread_events
from covonaut_es.approvals import (
    Decision,
    ReviewDecision,
    ReviewLedger,
    ReviewRequest,
    canonical_json,
    decision_text,
    operation_digest,
    review_reason,
)
from covonaut_es.errors import (
    InterruptPendingError,
    NotInterruptedError,
    ReviewPendingError,
    ThreadStateError,
    ToolCallsInDoubtError,
)
from covonaut_es.integrity import UNCHAINED, seal
from covonaut_es.values import (
    Checkpoint,
    CheckpointReason,
    Compaction,
    Interrupt,
    Label,
    Message,
    PendingToolCall,
    Role,
    RunMode,
    StateDocument,
    ThreadParent,
    ThreadState,
    ThreadStatus,
    ToolCall,
    ToolOutcome,
    Usage,
)

# isort: split
# Re-exported (``as``): the thread's id, its snapshot and the fork functions live in
# modules of their own, and the rest of the library imports them from here.
from covonaut_es.forks import fork_event as fork_event
from covonaut_es.forks import fork_point as fork_point
from covonaut_es.thread_events import THREAD_NAMESPACE as THREAD_NAMESPACE
from covonaut_es.thread_events import thread_aggregate_id as thread_aggregate_id
from covonaut_es.thread_snapshot import ThreadSnapshot as ThreadSnapshot


class AgentThread(Aggregate, created_event_name="Started"):
    """One conversation's agent state, derived from its events."""

    # Explicit topics are stored with every event: short, and independent of where the
    # classes live, so modules can move without breaking stored data.
    TOPIC = "covonaut.thread"
    # The schema version of snapshots; see covonaut_es.migrations and ADR 0007.
    class_version = 2

    thread_id: str
    status: ThreadStatus
    messages: list[Message]
    turn: int
    usage: Usage
    interrupts: list[Interrupt]
    open_calls: dict[str, PendingToolCall]
    checkpoints: list[Checkpoint]
    next_checkpoint_sequence: int
    compaction: Compaction | None
    error: str | None
    parent: ThreadParent | None
    labels: list[Label]
    chain_head: str | None
    reviews: ReviewLedger

    # The thread's events, defined in covonaut_es.thread_events. mypy takes a class
    # attribute for a type only if it is declared an alias; at run time an annotation
    # would make it a field of the aggregate and of its snapshot, so the events are
    # assigned plainly there (and eventsourcing registers the topic of each).
    if TYPE_CHECKING:
        Event: TypeAlias = thread_events.ThreadEvent
        Started: TypeAlias = thread_events.Started
        Created: TypeAlias = Started
        StartedFromState: TypeAlias = thread_events.StartedFromState
        RunStarted: TypeAlias = thread_events.RunStarted
        MessageAppended: TypeAlias = thread_events.MessageAppended
        ToolCalled: TypeAlias = thread_events.ToolCalled
        ToolResultRecorded: TypeAlias = thread_events.ToolResultRecorded
        ToolCallSettled: TypeAlias = thread_events.ToolCallSettled
        ToolCallRetried: TypeAlias = thread_events.ToolCallRetried
        Interrupted: TypeAlias = thread_events.Interrupted
        Steered: TypeAlias = thread_events.Steered
        Resumed: TypeAlias = thread_events.Resumed
        TurnStarted: TypeAlias = thread_events.TurnStarted
        Compacted: TypeAlias = thread_events.Compacted
        RunFinished: TypeAlias = thread_events.RunFinished
        RunFailed: TypeAlias = thread_events.RunFailed
        CheckpointSaved: TypeAlias = thread_events.CheckpointSaved
        Forked: TypeAlias = thread_events.Forked
        Abandoned: TypeAlias = thread_events.Abandoned
        Labelled: TypeAlias = thread_events.Labelled
        ReviewRequested: TypeAlias = thread_events.ReviewRequested
        ReviewDecided: TypeAlias = thread_events.ReviewDecided
        ApprovalUsed: TypeAlias = thread_events.ApprovalUsed
    else:
        Event = thread_events.ThreadEvent
        Started = thread_events.Started
        # eventsourcing would otherwise define a `Created` class of its own.
        Created = Started
        StartedFromState = thread_events.StartedFromState
        RunStarted = thread_events.RunStarted
        MessageAppended = thread_events.MessageAppended
        ToolCalled = thread_events.ToolCalled
        ToolResultRecorded = thread_events.ToolResultRecorded
        ToolCallSettled = thread_events.ToolCallSettled
        ToolCallRetried = thread_events.ToolCallRetried
        Interrupted = thread_events.Interrupted
        Steered = thread_events.Steered
        Resumed = thread_events.Resumed
        TurnStarted = thread_events.TurnStarted
        Compacted = thread_events.Compacted
        RunFinished = thread_events.RunFinished
        RunFailed = thread_events.RunFailed
        CheckpointSaved = thread_events.CheckpointSaved
        Forked = thread_events.Forked
        Abandoned = thread_events.Abandoned
        Labelled = thread_events.Labelled
        ReviewRequested = thread_events.ReviewRequested
        ReviewDecided = thread_events.ReviewDecided
        ApprovalUsed = thread_events.ApprovalUsed

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        self.status = ThreadStatus.IDLE
        self.messages = []
        self.turn = 0
        self.usage = Usage()
        self.interrupts = []
        self.open_calls = {}
        self.checkpoints = []
        self.next_checkpoint_sequence = 1
        self.compaction = None
        self.error = None
        self.parent = None
        self.labels = []
        self.chain_head = UNCHAINED
        self.reviews = ReviewLedger()

    # Commands ---------------------------------------------------------------------

    @classmethod
    def start(cls, thread_id: str, *, now: datetime) -> AgentThread:
        """Create a new thread."""
        thread = cls._create(
            cls.Started, id=thread_aggregate_id(thread_id), thread_id=thread_id, timestamp=now
        )
        thread.chain_head = seal(thread.pending_events[0], cls.Started.TOPIC, UNCHAINED)
        return thread

    def trigger_event(self, event_class: type[Any], **kwargs: Any) -> None:
        """Trigger an event and seal it into the thread's hash chain."""
        previous = self.chain_head or UNCHAINED
        super().trigger_event(event_class, **kwargs)
        self.chain_head = seal(self.pending_events[-1], event_class.TOPIC, previous)

    @classmethod
    def start_from_state(
        cls,
        thread_id: str,
        *,
        key: str,
        document: StateDocument,
        stored_version: int,
        now: datetime,
    ) -> AgentThread:
        """Create a thread continuing from a named state ``document`` saved under ``key``,
        already migrated from schema version ``stored_version`` (B1)."""
        thread = cls._create(
            cls.StartedFromState,
            id=thread_aggregate_id(thread_id),
            thread_id=thread_id,
            key=key,
            document=document,
            stored_version=stored_version,
            timestamp=now,
        )
        thread.chain_head = seal(thread.pending_events[0], cls.StartedFromState.TOPIC, UNCHAINED)
        return thread

    def start_run(self, mode: RunMode, *, now: datetime) -> None:
        """Begin a run; ``resume`` needs a pending interrupt, the others refuse one."""
        if self.status is ThreadStatus.ABANDONED:
            msg = f"thread {self.thread_id!r} was abandoned: fork it to go on from any version"
            raise ThreadStateError(msg)
        self._refuse_calls_in_doubt()
        if mode is RunMode.RESUME:
            self._refuse_pending_reviews()
            if not self.interrupts:
                msg = (
                    f"thread {self.thread_id!r} has no pending interrupt to resume "
                    f"(status {self.status}); use run() or continue_run()"
                )
                raise NotInterruptedError(msg)
        elif self.interrupts:
            msg = (
                f"thread {self.thread_id!r} is paused on an interrupt "
                f"({self.interrupts[0].reason!r}); decide it, steer, then call resume()"
            )
            raise InterruptPendingError(msg)
        self.trigger_event(self.RunStarted, mode=mode, timestamp=now)
        if mode is RunMode.RESUME:
            self.trigger_event(self.Resumed, timestamp=now)

    def append_message(self, message: Message, *, now: datetime) -> None:
        """Add a system, user or assistant message."""
        if message.role is Role.TOOL:
            msg = "tool messages are recorded with record_tool_result(), not append_message()"
            raise ThreadStateError(msg)
        self.trigger_event(self.MessageAppended, message=message, timestamp=now)

    def call_tools(self, calls: Iterable[ToolCall], *, now: datetime) -> None:
        """Record the intent to call each tool before any of them runs."""
        for call in calls:
            key = self._next_event_key(call)
            self.trigger_event(self.ToolCalled, call=call, idempotency_key=key, timestamp=now)

    def record_tool_result(
        self, tool_call_id: str, content: str, outcome: ToolOutcome, *, now: datetime
    ) -> None:
        """Record the result of an open tool call."""
        pending = self._open_call(tool_call_id)
        self.trigger_event(
            self.ToolResultRecorded,
            tool_call_id=tool_call_id,
            tool_name=pending.call.name,
            content=content,
            outcome=outcome,
            timestamp=now,
        )

    def settle(self, tool_call_id: str, content: str, *, now: datetime) -> None:
        """Record the result of a call in doubt, as the application established it."""
        pending = self._call_in_doubt(tool_call_id)
        self.trigger_event(
            self.ToolCallSettled,
            tool_call_id=tool_call_id,
            tool_name=pending.call.name,
            content=content,
            outcome=ToolOutcome.SETTLED,
            timestamp=now,
        )

    def retry_tool_call(self, tool_call_id: str, *, now: datetime) -> PendingToolCall:
        """Record the decision to run a call in doubt again; returns the call."""
        pending = self._call_in_doubt(tool_call_id)
        self.trigger_event(self.ToolCallRetried, tool_call_id=tool_call_id, timestamp=now)
        return pending

    def interrupt(self, interrupt: Interrupt, *, now: datetime) -> None:
        """Record an interrupt raised by a tool."""
        self.trigger_event(self.Interrupted, interrupt=interrupt, timestamp=now)

    def steer(self, message: Message, *, now: datetime) -> None:
        """Apply a steering message."""
        self.trigger_event(self.Steered, message=message, timestamp=now)

    def start_turn(self, *, now: datetime) -> None:
        """Begin the next turn."""
        self.trigger_event(self.TurnStarted, turn=self.turn + 1, timestamp=now)

    def compact(self, compaction: Compaction, *, now: datetime, usage: Usage | None) -> None:
        """Record a context compaction."""
        if not 0 <= compaction.first_kept <= len(self.messages):
            msg = (
                f"compaction keeps messages from index {compaction.first_kept}, "
                f"but the thread has {len(self.messages)} messages"
            )
            raise ThreadStateError(msg)
        self.trigger_event(self.Compacted, compaction=compaction, usage=usage, timestamp=now)

    def finish(self, output: str, *, now: datetime) -> None:
        """Record the final answer."""
        self.trigger_event(self.RunFinished, output=output, timestamp=now)

    def fail(self, error_type: str, message: str, *, now: datetime) -> None:
        """Record that the run failed."""
        self.trigger_event(self.RunFailed, error_type=error_type, message=message, timestamp=now)

    def save_checkpoint(
        self, reason: CheckpointReason, *, retain: int, now: datetime
    ) -> Checkpoint:
        """Record a checkpoint; its version is the one this event gets."""
        self.trigger_event(self.CheckpointSaved, reason=reason, retain=retain, timestamp=now)
        return self.checkpoints[-1]

    def abandon(self, reason: str, *, now: datetime) -> None:
        """Give the thread up."""
        if self.status is ThreadStatus.ABANDONED:
            msg = f"thread {self.thread_id!r} is already abandoned"
            raise ThreadStateError(msg)
        self.trigger_event(self.Abandoned, reason=reason, timestamp=now)

    def label(self, name: str, *, version: int | None, now: datetime) -> None:
        """Give the thread (or one of its versions) a label; a name labels one thing."""
        if not name.strip():
            msg = "a label needs a non-empty name"
            raise ThreadStateError(msg)
        if version is not None and not 1 <= version <= self.version:
            msg = (
                f"thread {self.thread_id!r} has versions 1 to {self.version}, "
                f"so version {version} cannot be labelled"
            )
            raise ThreadStateError(msg)
        self.trigger_event(self.Labelled, label=Label(name, version), timestamp=now)

    def request_review(
        self, call: ToolCall, arguments: dict[str, Any], *, now: datetime
    ) -> ReviewRequest:
        """Hold back an open call for a person's review of its exact operation, and
        pause the run on it: the request is the interrupt's data."""
        self._open_call(call.id)
        request = ReviewRequest(
            review_id=self._next_event_key(call),
            thread_id=self.thread_id,
            tool_name=call.name,
            arguments=msgspec.json.decode(canonical_json(arguments)),
            digest=operation_digest(call.name, arguments),
            tool_call_id=call.id,
        )
        self.trigger_event(self.ReviewRequested, request=request, timestamp=now)
        interrupt = Interrupt(review_reason(request), request.to_data(), call.id, call.name)
        self.interrupt(interrupt, now=now)
        return request

    def decide_review(
        self, review_id: str, decision: Decision, *, reviewer: str, comment: str, now: datetime
    ) -> ReviewDecision:
        """Record a verified reviewer's decision, and as the held-back call's result
        what it means for the model. ``reviewer`` must come from a verifier."""
        review = self.reviews.undecided(review_id, thread_id=self.thread_id)
        self.trigger_event(
            self.ReviewDecided,
            review_id=review_id,
            digest=review.request.digest,
            reviewer=reviewer,
            decision=decision,
            comment=comment,
            timestamp=now,
        )
        decided = self.reviews.get(review_id)
        assert decided is not None and decided.decision is not None
        self.record_tool_result(
            review.request.tool_call_id, decision_text(decided), ToolOutcome.NOT_EXECUTED, now=now
        )
        return decided.decision

    def use_approval(self, review_id: str, tool_call_id: str, *, now: datetime) -> ReviewDecision:
        """Spend an unused approval on an open call of its operation, before it runs."""
        pending = self._open_call(tool_call_id)
        review = self.reviews.get(review_id)
        if review is None or review.decision is None or not review.usable:
            msg = f"review {review_id!r} of thread {self.thread_id!r} is not an unused approval"
            raise ThreadStateError(msg)
        self.trigger_event(
            self.ApprovalUsed,
            review_id=review_id,
            tool_call_id=tool_call_id,
            idempotency_key=pending.idempotency_key,
            timestamp=now,
        )
        return review.decision

    # Queries ----------------------------------------------------------------------

    @property
    def in_doubt(self) -> tuple[PendingToolCall, ...]:
        """Calls recorded as called whose result was never recorded.

        Outside a live run every open call is in doubt (the tool may or may not have
        run before the process stopped, B5), except those held back for a review.
        """
        return tuple(p for p in self.open_calls.values() if not self.reviews.awaiting(p.call.id))

    @property
    def state(self) -> ThreadState:
        """A read-only copy of the current state."""
        return ThreadState(
            thread_id=self.thread_id,
            version=self.version,
            status=self.status,
            messages=tuple(self.messages),
            turn=self.turn,
            usage=self.usage,
            interrupts=tuple(self.interrupts),
            open_calls=tuple(self.open_calls.values()),
            checkpoints=tuple(self.checkpoints),
            compaction=self.compaction,
            error=self.error,
            parent=self.parent,
            labels=tuple(self.labels),
            reviews=self.reviews.reviews,
        )

    def _open_call(self, tool_call_id: str) -> PendingToolCall:
        pending = self.open_calls.get(tool_call_id)
        if pending is None:
            msg = (
                f"tool call {tool_call_id!r} of thread {self.thread_id!r} is not open: "
                f"open calls are {list(self.open_calls)}"
            )
            raise ThreadStateError(msg)
        return pending

    def _call_in_doubt(self, tool_call_id: str) -> PendingToolCall:
        pending = self._open_call(tool_call_id)
        review = self.reviews.awaiting(tool_call_id)
        if review is not None:
            msg = (
                f"tool call {tool_call_id!r} of thread {self.thread_id!r} is not in doubt: "
                f"it never ran and awaits review {review.request.review_id!r}; approve or "
                "reject that review instead"
            )
            raise ThreadStateError(msg)
        return pending

    def _refuse_pending_reviews(self) -> None:
        if self.reviews.pending:
            ids = tuple(r.request.review_id for r in self.reviews.pending)
            msg = (
                f"thread {self.thread_id!r} has reviews awaiting a decision {list(ids)}: "
                "approve or reject each, then call resume()"
            )
            raise ReviewPendingError(msg, review_ids=ids)

    def _refuse_calls_in_doubt(self) -> None:
        if in_doubt := self.in_doubt:
            ids = tuple(p.call.id for p in in_doubt)
            msg = (
                f"thread {self.thread_id!r} has tool calls in doubt {list(ids)}: they were "
                "recorded as called but no result was recorded, so they may or may not have "
                "run; check the external state and settle each one first"
            )
            raise ToolCallsInDoubtError(msg, tool_call_ids=ids)

    def _next_event_key(self, call: ToolCall) -> str:
        # The version the next event will get makes the key unique even when a model
        # reuses call ids across turns; recording the key keeps it stable.
        material = f"{self.thread_id}\x00{self.version + 1}\x00{call.id}".encode()
        return hashlib.sha256(material).hexdigest()[:32]


# The snapshot class cannot import the aggregate (this module imports it): wire them here.
AgentThread.Snapshot = ThreadSnapshot
ThreadSnapshot.aggregate_class = AgentThread
