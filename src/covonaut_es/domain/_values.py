"""The values of an agent thread's state: its status, calls, checkpoints and copies.

Frozen ``msgspec.Struct`` types stored inside events and snapshots, like the messages
of :mod:`covonaut_es.messages`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from datetime import datetime
from typing import ClassVar, TypeVar

import msgspec

from covonaut_es.domain._reviews import Review, ReviewLedger
from covonaut_es.domain._tool_pins import ToolPin
from covonaut_es.messages import JsonValue, Message, ToolCall, Usage

T = TypeVar("T")


class ThreadStatus(enum.StrEnum):
    """Where a thread stands between and during runs."""

    IDLE = "idle"
    """Started, nothing has run yet."""
    RUNNING = "running"
    """A run is in progress (or a process died during one)."""
    FINISHED = "finished"
    """The model gave a final answer."""
    ERROR = "error"
    """The last run failed; the thread can be continued."""
    INTERRUPTED = "interrupted"
    """A tool paused the run; ``resume()`` continues it."""
    ABANDONED = "abandoned"
    """The application gave the thread up; nothing runs on it any more."""


class PauseKind(enum.StrEnum):
    """What a pause waits for. It is set by the command that pauses the run, never
    read from a pause's data, which is the tool's (often the model's arguments)."""

    INTERRUPT = "interrupt"
    """A tool raised ``InterruptError``: a person answers it, then the run resumes."""
    REVIEW = "review"
    """A call needs an approval that is not on record: a reviewer decides it."""
    IN_DOUBT = "in_doubt"
    """A call may or may not have run (its runner stopped, or it outran its timeout):
    a person checks the external system and settles it."""


class Interrupt(msgspec.Struct, frozen=True, omit_defaults=True):
    """A pause of the run.

    Attributes:
        reason: Why the run paused, for a person to read.
        data: Structured data for the application: what the tool passed with
            ``InterruptError``, or the request of a review. It never decides what kind
            of pause this is.
        tool_call_id: The call the run paused on.
        tool_name: That call's tool.
        kind: What the pause waits for; set by the thread's own commands.
        trace_parent: The W3C ``traceparent`` of the traced run that paused (empty when
            it was not traced): the run that resumes links its trace to that one. An
            opaque value to the thread; one that does not read is no link.
    """

    reason: str
    data: JsonValue = None
    tool_call_id: str = ""
    tool_name: str = ""
    kind: PauseKind = PauseKind.INTERRUPT
    trace_parent: str = ""


class Pause(msgspec.Struct, frozen=True):
    """A pending interrupt, and whether a person has dealt with it.

    Attributes:
        interrupt: The interrupt.
        resolved: A person has dealt with it (decided the review, answered the tool,
            settled the call or asked for it to run again): it waits for a runner now,
            not for a person.
    """

    interrupt: Interrupt
    resolved: bool

    @property
    def kind(self) -> PauseKind:
        """What the pause waits for."""
        return self.interrupt.kind

    @property
    def waits_for(self) -> str:
        """``"person"`` until it is resolved, then ``"runner"``."""
        return "runner" if self.resolved else "person"


class PendingToolCall(msgspec.Struct, frozen=True):
    """A tool call recorded as called (write-ahead) that has no result yet.

    Attributes:
        call: The call as the model requested it.
        idempotency_key: A key that stays the same for this call across restores; hand it
            to external systems so that a repeated call can be recognised.
        pin: The tool the call was made of, when it came from a server (its
            ``ToolPinned``); a retry runs only that tool. None for the application's
            own tools.
    """

    call: ToolCall
    idempotency_key: str
    pin: ToolPin | None = None


class CheckpointReason(enum.StrEnum):
    """Why a checkpoint was saved."""

    TURN_START = "turn_start"
    TURN_END = "turn_end"
    INTERRUPT = "interrupt"
    MANUAL = "manual"


class Checkpoint(msgspec.Struct, frozen=True, gc=False):
    """A named point in a thread's stream.

    A checkpoint is a small record; the state it names is rebuilt from the nearest
    stored snapshot at or below ``version`` plus the events after it (see ADR 0003).

    Attributes:
        sequence: Per-thread number, increasing from 1.
        version: The thread's version when the checkpoint was saved.
        turn: The thread's turn counter at that point.
        status: The thread's status at that point.
        reason: Why it was saved.
        saved_at: When it was saved.
    """

    sequence: int
    version: int
    turn: int
    status: ThreadStatus
    reason: CheckpointReason
    saved_at: datetime


class RunMode(enum.StrEnum):
    """How a run was started."""

    RUN = "run"
    CONTINUE = "continue"
    RESUME = "resume"


class ToolOutcome(enum.StrEnum):
    """How a tool call ended, as recorded with its result."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    NOT_EXECUTED = "not_executed"
    SETTLED = "settled"


class Compaction(msgspec.Struct, frozen=True):
    """The latest context compaction: the model sees ``summary`` then
    ``messages[first_kept:]``; the full history stays in the stream."""

    summary: str
    first_kept: int


class ThreadParent(msgspec.Struct, frozen=True):
    """Where a forked thread branched off: its parent thread and the parent's version."""

    thread_id: str
    version: int


class Label(msgspec.Struct, frozen=True, omit_defaults=True):
    """A name given to a thread, or to one version of it when ``version`` is set."""

    name: str
    version: int | None = None


def relabelled(labels: Iterable[Label], label: Label) -> list[Label]:
    """``labels`` with ``label`` given: a name labels one thing, so a label of the same
    name is taken off, and the new one comes last."""
    return [*(given for given in labels if given.name != label.name), label]


class TypedOutput(msgspec.Struct, frozen=True):
    """The validated value of a run's typed final answer, as JSON data: what was
    checked against ``AgentConfig.output_type`` and recorded with the answer.

    Attributes:
        value: The value, in the JSON form it was validated and stored in (objects,
            arrays, strings, finite numbers, booleans, null).
    """

    value: JsonValue


class ThreadState(msgspec.Struct, frozen=True):
    """A read-only copy of a thread's state at one version.

    Attributes:
        thread_id: The thread's id.
        version: The version of the last event applied.
        status: Where the thread stands.
        messages: Every message, including system, steering and tool messages.
        turn: Turns started so far, over all runs.
        usage: Token usage accumulated over all runs.
        interrupts: Pending interrupts, empty unless the thread is interrupted.
        open_calls: Calls recorded as called that have no result yet.
        checkpoints: Retained checkpoints, oldest first.
        compaction: The latest context compaction, if any.
        error: The last failure's message while the status is ``error``.
        parent: For a fork, the thread and version it branched from.
        labels: Names given to the thread or to its versions.
        reviews: Every review of the thread, in request order, with its decision and
            the call that used it.
        pauses: Each pending interrupt and whether a person has dealt with it.
        retry_requested: A person asked for the failed run to be tried again.
        output: The typed final answer of the last run that finished, when that run's
            answer was typed (see ``AgentConfig.output_type``); None otherwise.
    """

    thread_id: str
    version: int
    status: ThreadStatus
    messages: tuple[Message, ...]
    turn: int
    usage: Usage
    interrupts: tuple[Interrupt, ...]
    open_calls: tuple[PendingToolCall, ...]
    checkpoints: tuple[Checkpoint, ...]
    compaction: Compaction | None
    error: str | None
    parent: ThreadParent | None = None
    labels: tuple[Label, ...] = ()
    reviews: tuple[Review, ...] = ()
    pauses: tuple[Pause, ...] = ()
    retry_requested: bool = False
    output: TypedOutput | None = None

    @property
    def in_doubt(self) -> tuple[PendingToolCall, ...]:
        """The open calls in doubt (see :func:`calls_in_doubt`)."""
        return calls_in_doubt(self.open_calls, ReviewLedger(self.reviews))

    def reviews_naming(self, tool_call_id: str) -> tuple[Review, ...]:
        """Every review that held back the call, or whose approval it spent, oldest
        first: those whose scopes and limits a person needs to act on the call
        (:func:`~covonaut_es.domain.may_act_on_call`)."""
        return ReviewLedger(self.reviews).naming(tool_call_id)

    @property
    def awaiting_person(self) -> tuple[Pause, ...]:
        """The pauses a person can still act on (see :func:`awaiting_a_person`)."""
        return awaiting_a_person(self.status, (p for p in self.pauses if not p.resolved))

    @property
    def waiting_for(self) -> str:
        """Who the thread waits for: ``"person"`` while a pause is unresolved,
        ``"runner"`` when it is paused and every pause is resolved, or a person asked
        for its failed run to be tried again, else ``""`` (also once it is abandoned)."""
        if self.status is ThreadStatus.ABANDONED:
            return ""  # nothing runs on it again, and nobody decides its pauses
        if self.awaiting_person:
            return "person"
        if self.pauses or (self.retry_requested and self.status is ThreadStatus.ERROR):
            return "runner"
        return ""


def awaiting_a_person(status: ThreadStatus, items: Iterable[T]) -> tuple[T, ...]:
    """The ``items`` (pauses nobody has dealt with, reviews not decided) that a person
    can still act on, of a thread at ``status``: every one, and none once the thread is
    abandoned, whose pauses nobody decides and on which nothing runs again. Every
    reader of what waits for a person asks here, so that none shows a decision that
    every command would refuse."""
    return () if status is ThreadStatus.ABANDONED else tuple(items)


def calls_in_doubt(
    open_calls: Iterable[PendingToolCall], reviews: ReviewLedger
) -> tuple[PendingToolCall, ...]:
    """Calls recorded as called whose result was never recorded, and which no review
    accounts for (:attr:`Review.accounts_for_call`): outside a live run such a tool may
    or may not have run before the process stopped. A call held back for a review, or
    by an approval that runs it and is not spent yet, waits on it; one whose review was
    decided without running it has the decision for its result."""
    return tuple(p for p in open_calls if reviews.accounting_for(p.call.id) is None)


class StateDocument(msgspec.Struct, frozen=True, kw_only=True):
    """A named state: a self-contained copy of a thread's state under a key.

    It holds what continuing the conversation needs, not the history of how it got
    there. It is stored as a JSON object with its schema version under ``"_v"``, and
    migrated on read like events and snapshots.

    Attributes:
        thread_id: The thread it was saved from.
        version: That thread's version when it was saved.
        saved_at: When it was saved.
        status: The thread's status.
        messages: Every message, including system, steering and tool messages.
        turn: Turns started so far.
        usage: Token usage accumulated so far.
        interrupts: Pending interrupts.
        compaction: The latest context compaction, if any.
        error: The last failure's message while the status is ``error``.
    """

    class_version: ClassVar[int] = 2

    thread_id: str
    version: int
    saved_at: datetime
    status: ThreadStatus
    messages: tuple[Message, ...]
    turn: int
    usage: Usage
    interrupts: tuple[Interrupt, ...] = ()
    compaction: Compaction | None = None
    error: str | None = None
