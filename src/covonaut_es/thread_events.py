"""The events of an agent thread: what can happen to it, and how each changes its state.

Each event is reached as an attribute of the aggregate, ``AgentThread.MessageAppended``,
and is named there (its qualified name says so); its ``apply`` method is the only code
that changes a thread's state. The classes are defined here rather than in the body of
:class:`~covonaut_es.domain.AgentThread` only to keep each module small: what is stored
is an event's explicit ``TOPIC``, never where its class lives.

Every type used in an event's field annotations is imported at run time: the msgspec
mapper builds each event's payload type from them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID, uuid5

from eventsourcing.domain import Aggregate

from covonaut_es.approvals import Decision, ReviewDecision, ReviewRequest
from covonaut_es.errors import ThreadStateError
from covonaut_es.integrity import CHAIN_KEY, UNCHAINED
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
    ThreadStatus,
    ToolCall,
    ToolOutcome,
    Usage,
)

if TYPE_CHECKING:
    from covonaut_es.domain import AgentThread

THREAD_NAMESPACE = UUID("6f1d2a8e-5b7c-4c39-9a51-2f0e8c4d7b13")
"""Namespace of the uuid5 that maps a thread id to its aggregate id. Never change it."""


def thread_aggregate_id(thread_id: str) -> UUID:
    """The aggregate id of a thread: a uuid5 of its thread id."""
    return uuid5(THREAD_NAMESPACE, thread_id)


class ThreadEvent(Aggregate.Event):
    """Base class of the thread's events, reached as ``AgentThread.Event``.

    Besides its fields, every event carries ``chain``, its tamper-evidence hash
    (see :mod:`covonaut_es.integrity`), set when the event is triggered.
    """

    # Redeclared: the generic annotation inherited from eventsourcing reads as Any
    # to msgspec, which then cannot decode the id.
    originator_id: UUID

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        # Named as they are reached, AgentThread.<Name>: the qualified name is also the
        # event's schema name, which `migrate --check` prints and golden fixtures record.
        cls.__qualname__ = f"AgentThread.{cls.__name__}"

    def mutate(self, aggregate: Any) -> Any:
        thread: Any = super().mutate(aggregate)
        thread.chain_head = self.__dict__.get(CHAIN_KEY, UNCHAINED)
        return thread


class Started(ThreadEvent, Aggregate.Created):
    """The thread was created."""

    TOPIC = "covonaut.thread.Started"

    thread_id: str


class StartedFromState(Started):
    """The thread was started from a named state (B1): it records the key, the
    document as migrated, and the schema version the document was stored at."""

    TOPIC = "covonaut.thread.StartedFromState"

    key: str
    document: StateDocument
    stored_version: int

    def apply(self, thread: AgentThread) -> None:
        document = self.document
        thread.status = document.status
        thread.messages = list(document.messages)
        thread.turn = document.turn
        thread.usage = document.usage
        thread.interrupts = list(document.interrupts)
        thread.compaction = document.compaction
        thread.error = document.error


class RunStarted(ThreadEvent):
    """``run``, ``continue_run`` or ``resume`` started a run."""

    TOPIC = "covonaut.thread.RunStarted"

    mode: RunMode

    def apply(self, thread: AgentThread) -> None:
        thread.status = ThreadStatus.RUNNING
        thread.error = None
        if self.mode is RunMode.RUN:  # new user input: past decisions stop standing
            thread.reviews = thread.reviews.lapsed()


class MessageAppended(ThreadEvent):
    """A system, user or assistant message was added; an assistant message carries
    the usage the provider reported for it."""

    TOPIC = "covonaut.thread.MessageAppended"
    class_version = 2

    message: Message

    def apply(self, thread: AgentThread) -> None:
        thread.messages.append(self.message)
        if self.message.usage is not None:
            thread.usage = thread.usage + self.message.usage


class ToolCalled(ThreadEvent):
    """Write-ahead record of a tool call, saved before the tool runs (B5)."""

    TOPIC = "covonaut.thread.ToolCalled"

    call: ToolCall
    idempotency_key: str

    def apply(self, thread: AgentThread) -> None:
        thread.open_calls[self.call.id] = PendingToolCall(self.call, self.idempotency_key)


class ToolResultRecorded(ThreadEvent):
    """A tool call's result is known; it becomes a tool message."""

    TOPIC = "covonaut.thread.ToolResultRecorded"

    tool_call_id: str
    tool_name: str
    content: str
    outcome: ToolOutcome

    def apply(self, thread: AgentThread) -> None:
        del thread.open_calls[self.tool_call_id]
        thread.messages.append(
            Message(Role.TOOL, self.content, tool_call_id=self.tool_call_id, name=self.tool_name)
        )


class ToolCallSettled(ToolResultRecorded):
    """The application settled a call in doubt with the result it found by checking
    the external state (B5)."""

    TOPIC = "covonaut.thread.ToolCallSettled"


class ToolCallRetried(ThreadEvent):
    """The application (or the tool's ``idempotent`` flag) chose to run a call in
    doubt again, with the same idempotency key (B5)."""

    TOPIC = "covonaut.thread.ToolCallRetried"

    tool_call_id: str

    def apply(self, thread: AgentThread) -> None:
        pass  # the call stays open until its result is recorded


class Interrupted(ThreadEvent):
    """A tool paused the run (B13)."""

    TOPIC = "covonaut.thread.Interrupted"

    interrupt: Interrupt

    def apply(self, thread: AgentThread) -> None:
        thread.interrupts.append(self.interrupt)
        thread.status = ThreadStatus.INTERRUPTED


class Steered(ThreadEvent):
    """A queued steering message was applied before a model call (B14)."""

    TOPIC = "covonaut.thread.Steered"

    message: Message

    def apply(self, thread: AgentThread) -> None:
        thread.messages.append(self.message)


class Resumed(ThreadEvent):
    """The pending interrupts were cleared by ``resume()`` (B16)."""

    TOPIC = "covonaut.thread.Resumed"

    def apply(self, thread: AgentThread) -> None:
        thread.interrupts.clear()
        thread.status = ThreadStatus.RUNNING


class TurnStarted(ThreadEvent):
    """A turn (one model call and its tool calls) began."""

    TOPIC = "covonaut.thread.TurnStarted"

    turn: int

    def apply(self, thread: AgentThread) -> None:
        thread.turn = self.turn


class Compacted(ThreadEvent):
    """The context the model sees was compacted; no message was deleted."""

    TOPIC = "covonaut.thread.Compacted"

    compaction: Compaction
    usage: Usage | None = None

    def apply(self, thread: AgentThread) -> None:
        thread.compaction = self.compaction
        if self.usage is not None:
            thread.usage = thread.usage + self.usage


class RunFinished(ThreadEvent):
    """The model gave a final answer."""

    TOPIC = "covonaut.thread.RunFinished"

    output: str

    def apply(self, thread: AgentThread) -> None:
        thread.status = ThreadStatus.FINISHED


class RunFailed(ThreadEvent):
    """The run ended in an error (provider failure, turn limit)."""

    TOPIC = "covonaut.thread.RunFailed"

    error_type: str
    message: str

    def apply(self, thread: AgentThread) -> None:
        thread.status = ThreadStatus.ERROR
        thread.error = f"{self.error_type}: {self.message}"


class CheckpointSaved(ThreadEvent):
    """A checkpoint was saved; only the newest ``retain`` are kept (0 keeps all).

    The checkpoint's other fields are the thread's at this event, so they are
    derived rather than stored. Evicting a checkpoint forgets its record, never an
    event (B11).
    """

    TOPIC = "covonaut.thread.CheckpointSaved"

    reason: CheckpointReason
    retain: int

    def apply(self, thread: AgentThread) -> None:
        thread.checkpoints.append(
            Checkpoint(
                sequence=thread.next_checkpoint_sequence,
                version=self.originator_version,
                turn=thread.turn,
                status=thread.status,
                reason=self.reason,
                saved_at=self.timestamp,
            )
        )
        thread.next_checkpoint_sequence += 1
        if self.retain and len(thread.checkpoints) > self.retain:
            del thread.checkpoints[: -self.retain]


class Forked(ThreadEvent):
    """The thread was created as a branch of another thread at ``parent_version``.

    Its stream continues the parent's numbering (this event is version
    ``parent_version + 1``) and holds no copy of the parent's events: loading a
    fork loads the parent as of that version and grafts this event onto it.
    ``interrupts`` repeats the inherited pending interrupts so that projections
    need not walk the parent chain.
    """

    TOPIC = "covonaut.thread.Forked"

    thread_id: str
    parent_thread_id: str
    parent_version: int
    interrupts: tuple[Interrupt, ...]

    def graft(self, base: AgentThread) -> AgentThread:
        """Turn ``base``, the parent as of ``parent_version``, into this fork."""
        if (base.thread_id, base.version) != (self.parent_thread_id, self.parent_version):
            msg = (
                f"fork {self.thread_id!r} branches from {self.parent_thread_id!r} at "
                f"version {self.parent_version}, not {base.thread_id!r} at {base.version}"
            )
            raise ThreadStateError(msg)
        base.__dict__.update(
            _id=self.originator_id,
            _version=self.originator_version,
            _modified_on=self.timestamp,
            thread_id=self.thread_id,
            parent=ThreadParent(self.parent_thread_id, self.parent_version),
            chain_head=self.__dict__.get(CHAIN_KEY, UNCHAINED),
        )
        return base

    def apply(self, thread: AgentThread) -> None:
        msg = "a Forked event starts a stream: it is grafted onto its parent, not applied"
        raise ThreadStateError(msg)


class Abandoned(ThreadEvent):
    """The application gave the thread up: its pending interrupts will never be
    decided, and no run starts on it again."""

    TOPIC = "covonaut.thread.Abandoned"

    reason: str

    def apply(self, thread: AgentThread) -> None:
        thread.status = ThreadStatus.ABANDONED


class Labelled(ThreadEvent):
    """A label was given to the thread, or to one of its versions."""

    TOPIC = "covonaut.thread.Labelled"

    label: Label

    def apply(self, thread: AgentThread) -> None:
        thread.labels = [label for label in thread.labels if label.name != self.label.name]
        thread.labels.append(self.label)


class ReviewRequested(ThreadEvent):
    """A call needs an approval that is not on record: a person must review its
    exact operation (B19). An ``Interrupted`` event with the request follows."""

    TOPIC = "covonaut.thread.ReviewRequested"

    request: ReviewRequest

    def apply(self, thread: AgentThread) -> None:
        thread.reviews = thread.reviews.requested(self.request)


class ReviewDecided(ThreadEvent):
    """A verified reviewer approved or rejected the operation of a review (B19)."""

    TOPIC = "covonaut.thread.ReviewDecided"

    review_id: str
    digest: str
    reviewer: str
    decision: Decision
    comment: str

    def apply(self, thread: AgentThread) -> None:
        thread.reviews = thread.reviews.decided(
            ReviewDecision(
                self.review_id,
                self.digest,
                self.decision,
                self.reviewer,
                self.comment,
                decided_at=self.timestamp,
                thread_id=thread.thread_id,
            )
        )


class ApprovalUsed(ThreadEvent):
    """An approval authorized one call, recorded before the call runs; it
    authorizes no other (B20)."""

    TOPIC = "covonaut.thread.ApprovalUsed"

    review_id: str
    tool_call_id: str
    idempotency_key: str

    def apply(self, thread: AgentThread) -> None:
        thread.reviews = thread.reviews.used(
            self.review_id, self.tool_call_id, self.idempotency_key
        )


if not TYPE_CHECKING:  # to mypy, a module __getattr__ would make any name importable

    def __getattr__(name: str) -> Any:
        # pickle finds a class by its module and qualified name, here
        # AgentThread.<Name>; the aggregate is defined after this module, so it is
        # looked up only when asked for.
        if name == "AgentThread":
            from covonaut_es.domain import AgentThread

            return AgentThread
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
