"""The agent thread as an event-sourced aggregate, with its events nested in it.

``AgentThread`` holds everything an agent knows about one conversation and derives it
only from its events. Command methods validate and then trigger exactly one event
each (or one per item); the ``apply`` methods of its nested event classes
(``AgentThread.MessageAppended``, ...) are the only code that changes state. The
aggregate does no I/O and reads no clock: every command takes the time from its caller.

Every type used in an event's field annotations is imported at run time: the msgspec
mapper builds each event's payload type from them. What is stored is an event's
explicit ``TOPIC``, never where its class lives.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, cast
from uuid import UUID

import msgspec
from eventsourcing.domain import Aggregate

from covonaut_es._arguments import check_text, check_whole
from covonaut_es.domain._calls import event_key, has_key_form, requested_call
from covonaut_es.domain._canonical import json_data
from covonaut_es.domain._eventsourcing import MODIFIED_ON, VERSION, become, created, move_to
from covonaut_es.domain._ids import check_thread_id, check_thread_stream, thread_aggregate_id
from covonaut_es.domain._pauses import (
    checked_kind,
    in_doubt_data,
    paused_by_its_tool,
    pauses_of,
)
from covonaut_es.domain._review_rules import check_decision
from covonaut_es.domain._reviews import (
    Decision,
    Review,
    ReviewDecision,
    ReviewLedger,
    ReviewRequest,
    ReviewRules,
    decision_text,
    operation_digest,
    review_reason,
)
from covonaut_es.domain._shown import check_recorded_pauses, check_request_digest
from covonaut_es.domain._snapshot import RESULT_CALL_IDS, ThreadSnapshot
from covonaut_es.domain._tool_pins import ToolPin, change_note
from covonaut_es.domain._values import (
    Checkpoint,
    CheckpointReason,
    Compaction,
    Interrupt,
    Label,
    Pause,
    PauseKind,
    PendingToolCall,
    RunMode,
    StateDocument,
    ThreadParent,
    ThreadState,
    ThreadStatus,
    ToolOutcome,
    TypedOutput,
    awaiting_a_person,
    calls_in_doubt,
    relabelled,
)
from covonaut_es.errors import (
    InterruptPendingError,
    InvalidRunInputError,
    MissingToolCallError,
    NotInterruptedError,
    ReviewExpiredError,
    ReviewPendingError,
    ThreadNotFoundError,
    ThreadStateError,
    ToolCallsInDoubtError,
)
from covonaut_es.messages import Message, Role, ToolCall, Usage

_NO_PINS: Mapping[str, ToolPin] = MappingProxyType({})


def _check_retain(retain: int) -> None:
    if retain < 0:
        msg = f"retain counts the newest checkpoints to keep (0: all), not {retain}"
        raise ValueError(msg)


class _SavesCheckpoint:
    """An event that saves a checkpoint: the thread as the event leaves it, at its
    version, keeping the newest ``retain`` (0: all)."""

    originator_version: int
    timestamp: datetime
    retain: int

    def __post_init__(self) -> None:
        # Triggered with a negative retain, the event is refused before anything
        # changes; one read from the store is refused when it is followed.
        super().__post_init__()  # type: ignore[misc]  # the event class it is mixed into
        _check_retain(self.retain)

    @property
    def checkpoint_reason(self) -> CheckpointReason:
        raise NotImplementedError

    def keep_checkpoint(self, thread: AgentThread) -> None:
        thread._add_checkpoint(
            self.checkpoint_reason, self.retain, self.originator_version, self.timestamp
        )


class _SavesTurnEndCheckpoint(_SavesCheckpoint):
    """An event that saves its turn's checkpoint with what it records (ADR 0073)."""

    @property
    def checkpoint_reason(self) -> CheckpointReason:
        return CheckpointReason.TURN_END


class AgentThread(Aggregate, created_event_name="Started"):
    """One conversation's agent state, derived from its events."""

    # Explicit topics are stored with every event: short, and independent of where the
    # classes live, so modules can move without breaking stored data.
    TOPIC = "covonaut.thread"
    # The schema version of snapshots; see covonaut_es.migrations and ADR 0007.
    class_version = 4

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
    chain_head: str | None  # the newest stored event's chain hash, set by the store
    reviews: ReviewLedger
    answers: dict[str, str]
    retries_requested: list[str]
    retries_begun: list[str]
    retry_requested: bool
    output: TypedOutput | None

    # Events: the only code that changes a thread's state is their apply methods.

    class Event(Aggregate.Event):
        """Base class of the thread's events."""

        # Redeclared: the generic annotation inherited from eventsourcing reads as Any
        # to msgspec, which then cannot decode the id.
        originator_id: UUID

        def mutate(self, aggregate: Any) -> Any:
            return self.follow(aggregate, checked=False)

        def follow(self, thread: Any, *, checked: bool = True) -> Any:
            """``thread`` with this event applied. ``checked``: the caller knows what
            eventsourcing's ``mutate`` checks first, that this event is the next one of
            the thread's stream (the store's reader checks each event it folds), and it
            is not a first event, which makes a thread rather than changes one; else
            ``mutate`` checks, or makes the thread (``thread`` None)."""
            abandoned = thread is not None and thread.status is ThreadStatus.ABANDONED
            if checked:
                self.apply(thread)
                # What eventsourcing's version and modified_on setters write, without
                # two property calls on every event of a restore.
                state = thread.__dict__
                state[VERSION] = self.originator_version
                state[MODIFIED_ON] = self.timestamp
            else:
                thread = super().mutate(thread)
            if abandoned:  # the last results of a run it stopped change nothing
                thread.status = ThreadStatus.ABANDONED
            self.keep_checkpoint(thread)
            return thread

        def keep_checkpoint(self, thread: AgentThread) -> None:
            """Add the checkpoint this event saves (:attr:`checkpoint_reason`), if any,
            to ``thread``: the thread as this event leaves it, at its version."""

        def rebased_fields(self, thread: AgentThread) -> dict[str, Any]:
            """The fields to trigger this event with again on ``thread`` (see
            :meth:`AgentThread.rebase`): its own, unless they derive from where in the
            stream it stood."""
            return {k: v for k, v in vars(self).items() if k not in _POSITION_FIELDS}

        @property
        def intended_calls(self) -> tuple[str, ...]:
            """The ids of the calls whose intent this event records before they run, in
            order: a ``ToolCalled``'s call, each call of a ``TurnAnsweredWithCalls``'s
            answer, none for other events. Each call's idempotency key derives from
            this event's version."""
            return ()

        @property
        def checkpoint_reason(self) -> CheckpointReason | None:
            """Why this event saves a checkpoint, at its own version: a
            ``CheckpointSaved``'s reason, or that of an event that saves the turn's
            checkpoint with what it records (``ToolResultCheckpointed``,
            ``RunFinishedCheckpointed``); None for other events."""
            return None

    class Started(Event, Aggregate.Created):
        """The thread was created."""

        TOPIC = "covonaut.thread.Started"

        thread_id: str

        def mutate(self, aggregate: Any) -> Any:
            check_thread_stream(self.originator_id, self.thread_id)
            return super().mutate(aggregate)

    class StartedFromState(Started):
        """The thread was started from a named state: it records the key, the
        document as migrated, and the schema version the document was stored at."""

        TOPIC = "covonaut.thread.StartedFromState"

        key: str
        document: StateDocument
        stored_version: int

        @property
        def interrupts(self) -> tuple[Interrupt, ...]:
            """The thread's pending interrupts from the start, as it reads them (and so
            as projections list them): a document holds no reviews or open calls, so
            its pauses are tools' pauses."""
            return tuple(checked_kind(i, ReviewLedger(), {}) for i in self.document.interrupts)

        def apply(self, thread: AgentThread) -> None:
            document = self.document
            thread.status = document.status
            thread.messages = list(document.messages)
            thread.turn = document.turn
            thread.usage = document.usage
            thread.interrupts = list(self.interrupts)
            thread.compaction = document.compaction
            thread.error = document.error

    class RunStarted(Event):
        """``run``, ``continue_run`` or ``resume`` started a run."""

        TOPIC = "covonaut.thread.RunStarted"

        mode: RunMode

        def apply(self, thread: AgentThread) -> None:
            thread.status = ThreadStatus.RUNNING
            thread.error = None
            thread.retry_requested = False
            if self.mode is RunMode.RUN:  # new user input: past decisions stop standing
                thread.reviews = thread.reviews.lapsed()

    class MessageAppended(Event):
        """A system, user or assistant message was added; an assistant message carries
        the usage the provider reported for it."""

        TOPIC = "covonaut.thread.MessageAppended"
        class_version = 2

        message: Message

        def apply(self, thread: AgentThread) -> None:
            thread.messages.append(self.message)
            if self.message.usage is not None:
                thread.usage = thread.usage + self.message.usage

    class RunStartedWithInput(RunStarted, MessageAppended):
        """``run`` started a run and the user's message it was given was added: one
        record where a ``RunStarted`` and a ``MessageAppended`` would be needed (ADR
        0079). A run that records something between them (the results of calls that
        unspent approvals run, or the agent's system prompt before a thread's first
        message) starts with ``RunStarted`` instead."""

        TOPIC = "covonaut.thread.RunStartedWithInput"
        class_version = 1

        def apply(self, thread: AgentThread) -> None:
            problem = run_input_problem(self.mode, self.message)
            if problem is not None:
                raise ValueError(problem)
            AgentThread.RunStarted.apply(self, thread)
            AgentThread.MessageAppended.apply(self, thread)

    class StartedWithInput(Started, RunStartedWithInput):
        """The thread was created by ``run`` with the user's message it was given: one
        record where a ``Started`` and a ``RunStartedWithInput`` would be needed (ADR
        0081). A thread whose first run records something before its input (the
        agent's system prompt, a tool server's failure), or whose first command is not
        a ``run``, starts with ``Started`` instead."""

        TOPIC = "covonaut.thread.StartedWithInput"
        class_version = 1

        def apply(self, thread: AgentThread) -> None:
            AgentThread.RunStartedWithInput.apply(self, thread)

    class TurnAnswered(MessageAppended):
        """A turn began and the model's answer to it was added: one record where a
        turn start with nothing of its own to record before the answer would need two
        (ADR 0071). A turn that records steering, a compaction or a checkpoint before
        its answer, or whose model call fails, starts with ``TurnStarted`` instead."""

        TOPIC = "covonaut.thread.TurnAnswered"
        class_version = 1

        turn: int

        def apply(self, thread: AgentThread) -> None:
            if self.message.role is not Role.ASSISTANT:
                msg = f"a turn is answered by an assistant message, not a {self.message.role} one"
                raise ValueError(msg)
            thread.turn = self.turn
            super().apply(thread)

    class TurnAnsweredWithCalls(TurnAnswered):
        """A turn began, the model's answer to it was added, and the intent to call
        each tool the answer asks for was recorded, before any of them runs: one
        record where ``TurnAnswered`` and a ``ToolCalled`` per call would be needed
        (ADR 0072). Each call's idempotency key is derived from the thread, this
        event's version and the call id, as a ``ToolCalled``'s is from its own. A call
        of a tool from a server, whose intent is followed by the tool's pin, is
        recorded by ``ToolCalled`` instead."""

        TOPIC = "covonaut.thread.TurnAnsweredWithCalls"
        class_version = 1

        def apply(self, thread: AgentThread) -> None:
            calls = self.message.tool_calls
            if not calls:
                msg = "a turn answered with calls holds an answer that asks for tools"
                raise ValueError(msg)
            # What answer_turn_calling checks, but the ids only the thread's results have.
            thread._check_new_call_ids(calls, results=False, error=ValueError)
            super().apply(thread)
            for call in calls:
                thread._open_intended(call, self.originator_version)

        @property
        def intended_calls(self) -> tuple[str, ...]:
            return tuple(call.id for call in self.message.tool_calls)

    class ToolCalled(Event):
        """Write-ahead record of a tool call, saved before the tool runs.

        It names the call by id: the call is stored once, in the assistant message
        that asked for it (see :meth:`call_in`), and its idempotency key is derived
        from the thread, this event's version and the call id (see ADR 0023).
        """

        TOPIC = "covonaut.thread.ToolCalled"
        class_version = 2

        tool_call_id: str

        @property
        def intended_calls(self) -> tuple[str, ...]:
            return (self.tool_call_id,)

        def apply(self, thread: AgentThread) -> None:
            call = self.call_in(thread.messages, thread_id=thread.thread_id)
            thread._open_intended(call, self.originator_version)

        def call_in(self, messages: Sequence[Message], *, thread_id: str) -> ToolCall:
            """The call this event records, from the messages before it: the latest
            assistant message holding its id asked for it.

            Raises:
                MissingToolCallError: No assistant message holds the call.
            """
            call = requested_call(messages, self.tool_call_id)
            if call is None:
                msg = (
                    f"thread {thread_id!r} version {self.originator_version} records tool "
                    f"call {self.tool_call_id!r}, but no assistant message before it holds "
                    "that call: the stream was altered behind the library's back; run "
                    "verify on the thread to find where"
                )
                raise MissingToolCallError(
                    msg,
                    thread_id=thread_id,
                    tool_call_id=self.tool_call_id,
                    version=self.originator_version,
                )
            return call

    class ToolPinned(Event):
        """The tool a call names came from a server (MCP): this is the tool, exactly,
        as the model was offered it when it made the call; the open call keeps it, so
        that a retry runs that tool or none. It is the record an audit and a review
        read."""

        TOPIC = "covonaut.thread.ToolPinned"

        tool_call_id: str
        tool: ToolPin

        def apply(self, thread: AgentThread) -> None:
            calls = thread.open_calls
            calls[self.tool_call_id] = msgspec.structs.replace(
                calls[self.tool_call_id], pin=self.tool
            )

    class ToolResultRecorded(Event):
        """A tool call's result is known; it becomes a tool message."""

        TOPIC = "covonaut.thread.ToolResultRecorded"

        tool_call_id: str
        tool_name: str
        content: str
        outcome: ToolOutcome

        def apply(self, thread: AgentThread) -> None:
            del thread.open_calls[self.tool_call_id]
            _discard(thread.retries_begun, self.tool_call_id)
            if self.outcome is ToolOutcome.INTERRUPTED:
                paused_by_its_tool(thread.interrupts, self.tool_call_id)
            thread.messages.append(
                Message(
                    Role.TOOL, self.content, tool_call_id=self.tool_call_id, name=self.tool_name
                )
            )

    class ToolCallSettled(ToolResultRecorded):
        """A call in doubt was settled with what checking the external state found:
        it ran, with this result (outcome ``settled``), or it did not run (outcome
        ``not_executed``). ``settled_by`` names the verified person who settled it,
        empty when the application did."""

        TOPIC = "covonaut.thread.ToolCallSettled"

        settled_by: str = ""

        def apply(self, thread: AgentThread) -> None:
            super().apply(thread)
            _discard(thread.retries_requested, self.tool_call_id)

    class ToolResultCheckpointed(_SavesTurnEndCheckpoint, ToolResultRecorded):
        """A tool call's result is known, and it ends its turn, whose checkpoint is
        saved with it: one record where ``ToolResultRecorded`` and ``CheckpointSaved``
        would be needed (ADR 0073). The checkpoint, of reason ``turn_end``, is the
        thread with the result, at this event's version; ``retain`` is as
        ``CheckpointSaved``'s."""

        TOPIC = "covonaut.thread.ToolResultCheckpointed"
        class_version = 1

        retain: int = 0

    class ToolCallRetried(Event):
        """The application (or the tool's ``idempotent`` flag) chose to run a call in
        doubt again, with the same idempotency key, and its retry began.

        Version 2: the retry deals with the call's pause in doubt, as a person's request
        for it did; should the call be left in doubt again (its runner dies), a new pause
        says so. ``revives_pause`` marks a record of version 1, whose retry revived the
        old pause instead, so that the thread waited on it again (ADR 0066).
        """

        TOPIC = "covonaut.thread.ToolCallRetried"
        class_version = 2

        tool_call_id: str
        revives_pause: bool = False

        def apply(self, thread: AgentThread) -> None:
            # The call stays open until its result is recorded.
            _discard(thread.retries_requested, self.tool_call_id)
            if not self.revives_pause and self.tool_call_id not in thread.retries_begun:
                thread.retries_begun.append(self.tool_call_id)

    class RetryRequested(Event):
        """A verified person asked for a call in doubt to run again (with the same
        idempotency key), or with no call named, for the thread's failed run to be tried
        again; the next runner does it."""

        TOPIC = "covonaut.thread.RetryRequested"

        tool_call_id: str
        requested_by: str

        def apply(self, thread: AgentThread) -> None:
            if self.tool_call_id:
                thread.retries_requested.append(self.tool_call_id)
            else:
                thread.retry_requested = True

    class Interrupted(Event):
        """The run paused: a tool raised ``InterruptError``, a call needs a review, or a
        call is in doubt (the interrupt's ``kind`` says which).

        Version 2 records the kind. Applying checks it against the thread, so a kind the
        thread does not bear out (from a record of version 1, whose kind the migration
        guessed from the data) reads as a tool's pause.
        """

        TOPIC = "covonaut.thread.Interrupted"
        class_version = 2

        interrupt: Interrupt

        def apply(self, thread: AgentThread) -> None:
            interrupt = checked_kind(self.interrupt, thread.reviews, thread.open_calls)
            thread.interrupts.append(interrupt)
            if interrupt.kind is PauseKind.IN_DOUBT:  # a new pause, no retry deals with
                _discard(thread.retries_begun, interrupt.tool_call_id)
            thread.status = ThreadStatus.INTERRUPTED

    class InterruptAnswered(Event):
        """A verified person answered a tool's pause; the answer reaches the model as a
        user message when the run resumes."""

        TOPIC = "covonaut.thread.InterruptAnswered"

        tool_call_id: str
        answer: str
        answered_by: str

        def apply(self, thread: AgentThread) -> None:
            thread.answers[self.tool_call_id] = self.answer

    class Steered(Event):
        """A queued steering message was applied before a model call; ``answer_to``
        names the call whose pause it answers, when it is a person's answer."""

        TOPIC = "covonaut.thread.Steered"

        message: Message
        answer_to: str = ""

        def apply(self, thread: AgentThread) -> None:
            thread.messages.append(self.message)
            thread.answers.pop(self.answer_to, None)

    class Resumed(Event):
        """The pending interrupts were cleared by ``resume()``."""

        TOPIC = "covonaut.thread.Resumed"

        def apply(self, thread: AgentThread) -> None:
            thread.interrupts.clear()
            thread.status = ThreadStatus.RUNNING

    class TurnStarted(Event):
        """A turn (one model call and its tool calls) began."""

        TOPIC = "covonaut.thread.TurnStarted"

        turn: int

        def apply(self, thread: AgentThread) -> None:
            thread.turn = self.turn

    class Compacted(Event):
        """The context the model sees was compacted; no message was deleted."""

        TOPIC = "covonaut.thread.Compacted"

        compaction: Compaction
        usage: Usage | None = None

        def apply(self, thread: AgentThread) -> None:
            thread.compaction = self.compaction
            if self.usage is not None:
                thread.usage = thread.usage + self.usage

    class RunFinished(Event):
        """The model gave a final answer; ``typed``: the value a typed answer was
        validated into, as JSON data (None when the run's answer is not typed)."""

        TOPIC = "covonaut.thread.RunFinished"

        output: str
        typed: TypedOutput | None = None

        def apply(self, thread: AgentThread) -> None:
            thread.status = ThreadStatus.FINISHED
            thread.output = self.typed

    class RunFinishedCheckpointed(_SavesTurnEndCheckpoint, RunFinished):
        """The model gave a final answer, and the checkpoint of the turn it ends was
        saved with it: one record where ``RunFinished`` and ``CheckpointSaved`` would
        be needed (ADR 0073). The checkpoint, of reason ``turn_end``, is the finished
        thread, at this event's version; ``retain`` is as ``CheckpointSaved``'s."""

        TOPIC = "covonaut.thread.RunFinishedCheckpointed"
        class_version = 1

        retain: int = 0

    class RunFailed(Event):
        """The run ended in an error (provider failure, turn limit)."""

        TOPIC = "covonaut.thread.RunFailed"

        error_type: str
        message: str

        def apply(self, thread: AgentThread) -> None:
            thread.status = ThreadStatus.ERROR
            thread.error = f"{self.error_type}: {self.message}"

    class CheckpointSaved(_SavesCheckpoint, Event):
        """A checkpoint was saved; only the newest ``retain`` are kept (0 keeps all).

        The checkpoint's other fields are the thread's at this event, so they are
        derived rather than stored. Evicting a checkpoint forgets its record, never an
        event.
        """

        TOPIC = "covonaut.thread.CheckpointSaved"

        reason: CheckpointReason
        retain: int

        def apply(self, thread: AgentThread) -> None:
            pass  # its checkpoint is kept once the event is followed

        @property
        def checkpoint_reason(self) -> CheckpointReason:
            return self.reason

    class Forked(Event):
        """The thread was created as a branch of another thread at ``parent_version``.

        Its stream continues the parent's numbering (this event is version
        ``parent_version + 1``) and holds no copy of the parent's events: loading a
        fork loads the parent as of that version and grafts this event onto it.
        ``interrupts`` repeats the inherited pending interrupts so that projections
        need not walk the parent chain; version 2 records their kinds (the thread's own
        state, grafted from the parent, is what runs and decisions go by).
        """

        TOPIC = "covonaut.thread.Forked"
        class_version = 2

        thread_id: str
        parent_thread_id: str
        parent_version: int
        interrupts: tuple[Interrupt, ...]

        def check_place(self) -> None:
            """Raise unless this event is one past the version the fork branches from,
            where a fork's first event always is.

            Raises:
                ThreadStateError: It is at another version.
            """
            if self.originator_version != self.parent_version + 1:
                msg = (
                    f"fork {self.thread_id!r} branches from {self.parent_thread_id!r} at "
                    f"version {self.parent_version}, so its first event is at version "
                    f"{self.parent_version + 1}, not {self.originator_version}"
                )
                raise ThreadStateError(msg)

        def graft(self, base: AgentThread) -> AgentThread:
            """Turn ``base``, the parent as of ``parent_version``, into this fork.

            Raises:
                ThreadStateError: ``base`` is not the parent at that version, or this
                    event is not one past it.
                ValueError: The interrupts recorded are not what the fork waits on
                    (:func:`check_recorded_pauses`): the row was altered.
            """
            if (base.thread_id, base.version) != (self.parent_thread_id, self.parent_version):
                msg = (
                    f"fork {self.thread_id!r} branches from {self.parent_thread_id!r} at "
                    f"version {self.parent_version}, not {base.thread_id!r} at {base.version}"
                )
                raise ThreadStateError(msg)
            self.check_place()
            check_thread_stream(self.originator_id, self.thread_id)
            move_to(
                base,
                aggregate_id=self.originator_id,
                version=self.originator_version,
                modified_on=self.timestamp,
            )
            base.thread_id = self.thread_id
            base.parent = ThreadParent(self.parent_thread_id, self.parent_version)
            check_recorded_pauses(self.interrupts, base.pauses)
            return base

        def apply(self, thread: AgentThread) -> None:
            msg = "a Forked event starts a stream: it is grafted onto its parent, not applied"
            raise ThreadStateError(msg)

    class Abandoned(Event):
        """The thread was given up: its pending interrupts will never be decided, and no
        run starts on it again. ``abandoned_by`` names the verified person who gave it
        up, empty when the application did."""

        TOPIC = "covonaut.thread.Abandoned"

        reason: str
        abandoned_by: str = ""

        def apply(self, thread: AgentThread) -> None:
            thread.status = ThreadStatus.ABANDONED

    class Labelled(Event):
        """A label was given to the thread, or to one of its versions."""

        TOPIC = "covonaut.thread.Labelled"

        label: Label

        def apply(self, thread: AgentThread) -> None:
            thread.labels = relabelled(thread.labels, self.label)

    class ReviewRequested(Event):
        """A call needs an approval that is not on record: a person must review its
        exact operation. An ``Interrupted`` event with the request follows."""

        TOPIC = "covonaut.thread.ReviewRequested"

        request: ReviewRequest

        def apply(self, thread: AgentThread) -> None:
            check_request_digest(self.request)
            thread.reviews = thread.reviews.requested(self.request)

    class ReviewDecided(Event):
        """A verified reviewer approved or rejected the operation of a review."""

        TOPIC = "covonaut.thread.ReviewDecided"

        review_id: str
        digest: str
        reviewer: str
        decision: Decision
        comment: str

        def apply(self, thread: AgentThread) -> None:
            thread.reviews = thread.reviews.decided(self.recorded(thread))

        def recorded(self, thread: AgentThread) -> ReviewDecision:
            """The decision as the thread's review ledger keeps it."""
            return ReviewDecision(
                self.review_id,
                self.digest,
                self.decision,
                self.reviewer,
                self.comment,
                decided_at=self.timestamp,
                thread_id=thread.thread_id,
            )

    class ReviewApprovedWithEdits(ReviewDecided):
        """A verified reviewer approved the operation with arguments of their own: the
        approval covers ``arguments`` (``digest`` is theirs), and the request keeps the
        arguments the model asked with."""

        TOPIC = "covonaut.thread.ReviewApprovedWithEdits"

        arguments: dict[str, Any]

        def recorded(self, thread: AgentThread) -> ReviewDecision:
            return msgspec.structs.replace(super().recorded(thread), arguments=self.arguments)

    class ReviewResponded(ReviewDecided):
        """A verified reviewer answered in the tool's place: ``comment`` is the call's
        result, and the operation never runs."""

        TOPIC = "covonaut.thread.ReviewResponded"

    class ReviewExpired(ReviewDecided):
        """No reviewer decided before the review's ``deadline``: the review failed
        closed. ``decision`` is ``EXPIRED`` and ``reviewer`` empty; the held-back call's
        result says the operation did not run."""

        TOPIC = "covonaut.thread.ReviewExpired"

        deadline: datetime

    class ReviewDeadlineNear(Event):
        """A pending review's deadline is near: recorded once per review, so that a
        notice goes out once (the notices follow the log, and this event says all a
        notice tells: the thread, which may be a fork that inherited the review, the
        review, its tool and its deadline)."""

        TOPIC = "covonaut.thread.ReviewDeadlineNear"

        thread_id: str
        review_id: str
        tool_name: str
        deadline: datetime

        def apply(self, thread: AgentThread) -> None:
            thread.reviews = thread.reviews.warned(self.review_id)

    class ReviewApprovedInPart(Event):
        """Under four eyes, a first verified reviewer approved the operation (with
        ``arguments`` as their edit, if not None): the review waits for a second,
        different reviewer, and nothing is authorized yet."""

        TOPIC = "covonaut.thread.ReviewApprovedInPart"

        review_id: str
        digest: str
        reviewer: str
        comment: str
        arguments: dict[str, Any] | None = None

        def apply(self, thread: AgentThread) -> None:
            approval = ReviewDecision(
                self.review_id,
                self.digest,
                Decision.APPROVED,
                self.reviewer,
                self.comment,
                decided_at=self.timestamp,
                thread_id=thread.thread_id,
                arguments=self.arguments,
                partial=True,
            )
            thread.reviews = thread.reviews.approved_in_part(approval)

    class ApprovalUsed(Event):
        """An approval authorized one call, recorded before the call runs; it
        authorizes no other."""

        TOPIC = "covonaut.thread.ApprovalUsed"

        review_id: str
        tool_call_id: str
        idempotency_key: str

        def apply(self, thread: AgentThread) -> None:
            thread.reviews = thread.reviews.used(
                self.review_id, self.tool_call_id, self.idempotency_key
            )

        def rebased_fields(self, thread: AgentThread) -> dict[str, Any]:
            # The call's key derives from its ToolCalled's version, which a rebase moves.
            fields = super().rebased_fields(thread)
            fields["idempotency_key"] = thread.open_calls[self.tool_call_id].idempotency_key
            return fields

    # eventsourcing would otherwise define a `Created` class of its own.
    Created = Started

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
        self.chain_head = None  # the store sets it when it loads or saves the thread
        self.reviews = ReviewLedger()
        self.answers = {}
        self.retries_requested = []
        self.retries_begun = []
        self.retry_requested = False
        self.output = None

    # Commands ---------------------------------------------------------------------

    @classmethod
    def start(cls, thread_id: str, *, now: datetime) -> AgentThread:
        """Create a new thread.

        Raises:
            InvalidThreadIdError: ``thread_id`` breaks the rule of :func:`check_thread_id`.
        """
        thread = created(
            cls,
            cls.Started,
            id=thread_aggregate_id(check_thread_id(thread_id)),
            thread_id=thread_id,
            timestamp=now,
        )
        return thread

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
        already migrated from schema version ``stored_version``.

        Raises:
            InvalidThreadIdError: ``thread_id`` breaks the rule of :func:`check_thread_id`.
        """
        thread = created(
            cls,
            cls.StartedFromState,
            id=thread_aggregate_id(check_thread_id(thread_id)),
            thread_id=thread_id,
            key=key,
            document=document,
            stored_version=stored_version,
            timestamp=now,
        )
        return thread

    def start_run(
        self,
        mode: RunMode,
        *,
        now: datetime,
        given: Message | None = None,
        apart: bool = False,
    ) -> None:
        """Begin a run; ``resume`` needs a pending interrupt, the others refuse one.

        Args:
            mode: How the run starts.
            now: When.
            given: The user's message a ``run`` starts with, which only a ``run`` takes
                and a ``run`` always takes: new input is what lapses the decisions
                people made before it. It is recorded with the run's start in one
                ``RunStartedWithInput`` (with the thread's creation too, in one
                ``StartedWithInput``, when that is all the thread has recorded and none
                of it is saved).
            apart: The caller records ``given`` itself, after what goes between the
                run's start and its input (the system prompt, the results of calls that
                unspent approvals run); the run's start is a ``RunStarted`` then.

        Raises:
            InvalidRunInputError: A ``run`` was given no user's message of text, or
                another mode was given one, or a message whose id the thread holds;
                nothing was recorded.
            ThreadNotFoundError: A ``continue`` of a thread no store holds (only its
                unsaved creation); nothing was recorded.
            ThreadStateError: The thread was abandoned, the mode does not fit its
                interrupts, or a ``continue`` found no message to go on from.
        """
        if (problem := run_input_problem(mode, given)) is not None:
            raise InvalidRunInputError(problem)
        self.refuse_given_before(given)
        if self.status is ThreadStatus.ABANDONED:
            msg = f"thread {self.thread_id!r} was abandoned: fork it to go on from any version"
            raise ThreadStateError(msg)
        if mode is RunMode.CONTINUE:
            self._refuse_nothing_to_continue("continue_run()")
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
        self._record_decided_results(now=now)
        if given is not None and not apart and self._only_created():
            self._create_again(self.StartedWithInput, mode=mode, message=given, timestamp=now)
            return
        if given is not None and not apart:
            self.trigger_event(self.RunStartedWithInput, mode=mode, message=given, timestamp=now)
            return
        self.trigger_event(self.RunStarted, mode=mode, timestamp=now)
        if mode is RunMode.RESUME:
            self.trigger_event(self.Resumed, timestamp=now)

    def append_message(self, message: Message, *, now: datetime) -> None:
        """Add a system, user or assistant message."""
        if message.role is Role.TOOL:
            msg = "tool messages are recorded with record_tool_result(), not append_message()"
            raise ThreadStateError(msg)
        self.trigger_event(self.MessageAppended, message=message, timestamp=now)

    def holds_message(self, message_id: str) -> bool:
        """Whether one of the thread's messages has the id ``message_id`` its sender
        gave it (``Message.id``)."""
        return any(message.id == message_id for message in self.messages)

    def refuse_given_before(self, given: Message | None) -> None:
        """Refuse a run's input whose id one of the thread's messages has: asked when
        the run starts, and by the run loop before it does anything else.

        Raises:
            InvalidRunInputError: Naming the id; nothing was recorded.
        """
        if given is not None and given.id is not None and self.holds_message(given.id):
            msg = (
                f"thread {self.thread_id!r} holds a message of id {given.id!r} already: "
                "it was given before (a retried request sends it again); nothing was "
                "recorded"
            )
            raise InvalidRunInputError(msg)

    def unique_calls(self, calls: Sequence[ToolCall]) -> tuple[ToolCall, ...]:
        """``calls`` with ids unique in this thread, for :meth:`call_tools`.

        A model may repeat a call id within a response or reuse one from an earlier
        turn; results, approvals and calls in doubt are keyed by call id, so each such
        call gets the first free id ``<sent id>-2``, ``<sent id>-3``... in order (an
        empty id counts as ``call``), which keeps the id the model sent readable in the
        record. So does an id of the form of a review id (32 lowercase hex digits): no
        call id is ever a review id, read or predicted. The same thread and calls
        always give the same ids.
        """
        used = self._call_id_used
        sent = {call.id for call in calls}
        given: set[str] = set()
        unique: list[ToolCall] = []
        for call in calls:
            call_id = call.id
            if not call_id or call_id in given or used(call_id):
                base, n = call_id or "call", 2
                while (call_id := f"{base}-{n}") in sent or call_id in given or used(call_id):
                    n += 1
                call = msgspec.structs.replace(call, id=call_id)
            given.add(call_id)
            unique.append(call)
        return tuple(unique)

    def call_tools(
        self,
        calls: Sequence[ToolCall],
        *,
        now: datetime,
        pins: Mapping[str, ToolPin] = _NO_PINS,
    ) -> None:
        """Record the intent to call each tool before any of them runs; ``pins``, by
        call name, the tools from servers as the model was offered them: each such
        call's intent is followed by the pin of its tool.

        Each call must be the one the latest assistant message holding its id asks for:
        the record names the call by id, and the message holds it.

        Raises:
            ThreadStateError: A call id is empty or already used in this thread: make
                the ids unique with :meth:`unique_calls` first. Or no assistant message
                asks for the call: append the model's message first.
        """
        self._check_new_call_ids(calls)
        for call in calls:
            if requested_call(self.messages, call.id) != call:
                msg = (
                    f"tool call {call.id!r} ({call.name}) is not asked for by the latest "
                    f"assistant message of thread {self.thread_id!r} holding that id; append "
                    "the assistant message with the calls first, then call_tools() with them"
                )
                raise ThreadStateError(msg)
        for call in calls:
            self.trigger_event(self.ToolCalled, tool_call_id=call.id, timestamp=now)
            pin = pins.get(call.name)
            if pin is not None:
                self.trigger_event(self.ToolPinned, tool_call_id=call.id, tool=pin, timestamp=now)

    def record_tool_result(
        self, tool_call_id: str, content: str, outcome: ToolOutcome, *, now: datetime
    ) -> None:
        """Record the result of an open tool call."""
        self._record_result(self.ToolResultRecorded, tool_call_id, content, outcome, now=now)

    def record_tool_result_checkpointed(
        self,
        tool_call_id: str,
        content: str,
        outcome: ToolOutcome,
        *,
        retain: int,
        now: datetime,
    ) -> Checkpoint:
        """Record the result of an open tool call that ends its turn, and save the
        turn's checkpoint with it, in one event: as :meth:`record_tool_result` then
        :meth:`save_checkpoint` with reason ``turn_end``. Returns the checkpoint, at
        the event's version."""
        self._record_result(
            self.ToolResultCheckpointed, tool_call_id, content, outcome, now=now, retain=retain
        )
        return self.checkpoints[-1]

    def _record_result(
        self,
        event: type[ToolResultRecorded],
        tool_call_id: str,
        content: str,
        outcome: ToolOutcome,
        *,
        now: datetime,
        **fields: Any,
    ) -> None:
        pending = self._open_call(tool_call_id)
        self.trigger_event(
            event,
            tool_call_id=tool_call_id,
            tool_name=pending.call.name,
            content=content,
            outcome=outcome,
            timestamp=now,
            **fields,
        )

    def settle(
        self, tool_call_id: str, content: str, *, ran: bool = True, by: str = "", now: datetime
    ) -> None:
        """Record what checking the external state found for a call in doubt: it ran,
        with ``content`` as its result, or (``ran=False``) it did not run, ``content``
        saying so to the model. ``by`` names a verified person who settled it."""
        self._refuse_if_abandoned("a settlement")
        pending = self._call_in_doubt(tool_call_id)
        self.trigger_event(
            self.ToolCallSettled,
            tool_call_id=tool_call_id,
            tool_name=pending.call.name,
            content=content,
            outcome=ToolOutcome.SETTLED if ran else ToolOutcome.NOT_EXECUTED,
            settled_by=by,
            timestamp=now,
        )

    def retry_tool_call(self, tool_call_id: str, *, now: datetime) -> PendingToolCall:
        """Record the decision to run a call in doubt again; returns the call.

        Raises:
            ThreadStateError: The thread was given up (nothing runs on it any more), or
                the call is not in doubt.
        """
        self._refuse_if_abandoned("a call run again by a runner")
        pending = self._call_in_doubt(tool_call_id)
        self.trigger_event(self.ToolCallRetried, tool_call_id=tool_call_id, timestamp=now)
        return pending

    def request_retry(self, tool_call_id: str, *, by: str, now: datetime) -> None:
        """Record a verified person's request that a call in doubt run again, with the
        same idempotency key, when the thread next runs; with ``tool_call_id`` empty, that
        the thread's failed run be tried again.

        Raises:
            ThreadStateError: The call is not in doubt, or its retry is already asked
                for; with no call, the thread's last run did not fail, or the thread
                holds no message a retry could go on from.
        """
        self._refuse_if_abandoned("a retry")
        if not tool_call_id:
            if self.status is not ThreadStatus.ERROR:
                msg = (
                    f"thread {self.thread_id!r} is {self.status}, not a failed run waiting "
                    "to be tried again; only a thread whose run failed is retried"
                )
                raise ThreadStateError(msg)
            if self.retry_requested:
                msg = f"a retry of thread {self.thread_id!r}'s failed run is already asked for"
                raise ThreadStateError(msg)
            self._refuse_nothing_to_continue("a retry of its failed run")
        else:
            self._call_in_doubt(tool_call_id)
            if tool_call_id in self.retries_requested:
                msg = f"call {tool_call_id!r} of thread {self.thread_id!r} is already to be retried"
                raise ThreadStateError(msg)
        self.trigger_event(
            self.RetryRequested, tool_call_id=tool_call_id, requested_by=by, timestamp=now
        )

    def interrupt(self, interrupt: Interrupt, *, now: datetime) -> None:
        """Record a tool's pause (``InterruptError``); reviews and calls in doubt pause
        through :meth:`request_review` and :meth:`pause_in_doubt`.

        Raises:
            ThreadStateError: ``interrupt`` claims another kind of pause.
        """
        if interrupt.kind is not PauseKind.INTERRUPT:
            msg = (
                f"interrupt() records a tool's pause, not one of kind {interrupt.kind}: "
                "use request_review() or pause_in_doubt()"
            )
            raise ThreadStateError(msg)
        self.trigger_event(self.Interrupted, interrupt=interrupt, timestamp=now)

    def pause_in_doubt(
        self, tool_call_id: str, reason: str, *, now: datetime, trace_parent: str = ""
    ) -> Interrupt:
        """Pause the thread on a call in doubt, for a person to check the external system
        and settle it; the interrupt's data names the call and its idempotency key. A
        thread paused on the call in doubt already stays so (nothing is recorded), unless
        a retry of the call began since: the retry dealt with that pause, and the new one
        says the call is in doubt again.
        ``trace_parent``: the traced run's context (see ``Interrupt.trace_parent``).

        Raises:
            ThreadStateError: The call is not in doubt, or a person asked for it to run
                again: it waits for a runner, and a pause would wait for nobody (its
                retry deals with it), which a fork could not tell once past the request.
        """
        pending = self._call_in_doubt(tool_call_id)
        if tool_call_id in self.retries_requested:
            msg = (
                f"call {tool_call_id!r} of thread {self.thread_id!r} is to be run again, as "
                "a person asked: it waits for a runner, not for a person to check it"
            )
            raise ThreadStateError(msg)
        if tool_call_id not in self.retries_begun:
            for interrupt in self.interrupts:
                if interrupt.tool_call_id == tool_call_id and interrupt.kind is PauseKind.IN_DOUBT:
                    return interrupt
        call = pending.call
        interrupt = Interrupt(
            reason,
            in_doubt_data(pending, self.reviews, paused_at=self.version + 1),
            call.id,
            call.name,
            PauseKind.IN_DOUBT,
            trace_parent,
        )
        self.trigger_event(self.Interrupted, interrupt=interrupt, timestamp=now)
        return interrupt

    def answer(self, tool_call_id: str, answer: str, *, by: str, now: datetime) -> None:
        """Record a verified person's answer to a tool's pause; the model reads it as a
        user message once the run resumes.

        Raises:
            ThreadStateError: No tool's pause on that call awaits an answer.
        """
        self._refuse_if_abandoned("an answer")
        paused = [p for p in self.pauses if p.interrupt.tool_call_id == tool_call_id]
        if not any(p.kind is PauseKind.INTERRUPT and not p.resolved for p in paused):
            kinds = ", ".join(f"{p.kind} ({p.waits_for})" for p in paused) or "none"
            msg = (
                f"thread {self.thread_id!r} has no tool's pause on call {tool_call_id!r} "
                f"awaiting an answer (pauses on it: {kinds}); reviews are decided and "
                "calls in doubt settled instead"
            )
            raise ThreadStateError(msg)
        self.trigger_event(
            self.InterruptAnswered,
            tool_call_id=tool_call_id,
            answer=answer,
            answered_by=by,
            timestamp=now,
        )

    def steer_answers(self, *, now: datetime) -> None:
        """Give the model the answers people recorded to the thread's pauses, as user
        messages, in the order they were given."""
        for call_id, answer in list(self.answers.items()):
            self.trigger_event(
                self.Steered,
                message=Message(Role.USER, answer),
                answer_to=call_id,
                timestamp=now,
            )

    def steer(self, message: Message, *, now: datetime) -> None:
        """Apply a steering message.

        Raises:
            InvalidRunInputError: ``message`` may not steer a run
                (:func:`steering_message`); nothing was recorded.
        """
        self.trigger_event(self.Steered, message=steering_message(message), timestamp=now)

    def start_turn(self, *, now: datetime) -> None:
        """Begin the next turn."""
        self.trigger_event(self.TurnStarted, turn=self.turn + 1, timestamp=now)

    def answer_turn(self, message: Message, *, now: datetime) -> None:
        """Begin the next turn with the model's answer to it, in one event.

        Raises:
            ValueError: ``message`` is not an assistant's; nothing changed.
        """
        self.trigger_event(self.TurnAnswered, message=message, turn=self.turn + 1, timestamp=now)

    def answer_turn_calling(self, message: Message, *, now: datetime) -> None:
        """Begin the next turn with the model's answer to it, and record the intent to
        call each tool the answer asks for before any of them runs, in one event: as
        :meth:`answer_turn` then :meth:`call_tools` without pins.

        Raises:
            ValueError: ``message`` is not an assistant's, or asks for no tool, or a
                call id is empty, repeated or already used in this thread (make the
                ids unique with :meth:`unique_calls` first); nothing changed.
        """
        # The fold checks the ids again, all but those the thread's results have.
        self._check_new_call_ids(message.tool_calls, error=ValueError)
        self.trigger_event(
            self.TurnAnsweredWithCalls, message=message, turn=self.turn + 1, timestamp=now
        )

    def compact(self, compaction: Compaction, *, now: datetime, usage: Usage | None) -> None:
        """Record a context compaction."""
        if not 0 <= compaction.first_kept <= len(self.messages):
            msg = (
                f"compaction keeps messages from index {compaction.first_kept}, "
                f"but the thread has {len(self.messages)} messages"
            )
            raise ThreadStateError(msg)
        self.trigger_event(self.Compacted, compaction=compaction, usage=usage, timestamp=now)

    def finish(self, output: str, *, now: datetime, typed: TypedOutput | None = None) -> None:
        """Record the final answer, and the value a typed answer was validated into
        (validated by the caller: the aggregate records it as given)."""
        self.trigger_event(self.RunFinished, output=output, typed=typed, timestamp=now)

    def finish_checkpointed(
        self,
        output: str,
        *,
        retain: int,
        now: datetime,
        typed: TypedOutput | None = None,
    ) -> Checkpoint:
        """Record the final answer and save the checkpoint of the turn it ends, in one
        event: as :meth:`finish` then :meth:`save_checkpoint` with reason
        ``turn_end``. Returns the checkpoint, at the event's version."""
        self.trigger_event(
            self.RunFinishedCheckpointed,
            output=output,
            typed=typed,
            retain=retain,
            timestamp=now,
        )
        return self.checkpoints[-1]

    def fail(self, error_type: str, message: str, *, now: datetime) -> None:
        """Record that the run failed. An error's text that UTF-8 cannot hold (a lone
        surrogate a provider's message quoted) is recorded escaped: a failure that could
        not be recorded would stand in for the one that happened."""
        text = message.encode("utf-8", "backslashreplace").decode("utf-8")
        self.trigger_event(self.RunFailed, error_type=error_type, message=text, timestamp=now)

    def save_checkpoint(
        self, reason: CheckpointReason, *, retain: int, now: datetime
    ) -> Checkpoint:
        """Record a checkpoint; its version is the one this event gets."""
        self.trigger_event(self.CheckpointSaved, reason=reason, retain=retain, timestamp=now)
        return self.checkpoints[-1]

    def abandon(self, reason: str, *, by: str = "", now: datetime) -> None:
        """Give the thread up; ``by`` names a verified person who gave it up."""
        if self.status is ThreadStatus.ABANDONED:
            msg = f"thread {self.thread_id!r} is already abandoned"
            raise ThreadStateError(msg)
        self.trigger_event(self.Abandoned, reason=reason, abandoned_by=by, timestamp=now)

    def label(self, name: str, *, version: int | None, now: datetime) -> None:
        """Give the thread (or one of its versions) a label; a name labels one thing.

        Raises:
            ConfigurationError: ``label`` is no str, or ``version`` no whole number.
            ThreadStateError: The label is blank, or the thread has no such version.
        """
        check_text("label", name)
        if version is not None:
            check_whole("version", version)
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
        self,
        call: ToolCall,
        arguments: dict[str, Any],
        *,
        now: datetime,
        tool: ToolPin | None = None,
        trace_parent: str = "",
        run_on_approval: bool = False,
        deadline: datetime | None = None,
        rules: ReviewRules | None = None,
    ) -> ReviewRequest:
        """Hold back an open call for a person's review of its exact operation, and
        pause the run on it: the request is the interrupt's data.

        ``run_on_approval``: an approval runs this very call, with the approved
        arguments, when the thread next runs (see :attr:`approved_calls`); otherwise it
        authorizes the model's next call of the operation.
        ``deadline``: when the review expires unless decided (:meth:`expire_reviews`).

        A call in doubt that runs again (its retry began) may have run already: its
        review says so (``ReviewRequest.may_have_run``), and an approval runs it again.

        ``tool``: for a tool from a server, the tool as the model was offered it; the
        request then says so when an earlier review of the same name covered another.
        ``trace_parent``: the traced run's context (see ``Interrupt.trace_parent``).
        ``rules``: what the tool's review policy allows on this review (None: anything).
        """
        self._open_call(call.id)
        earlier = next(
            (
                r.request.tool
                for r in reversed(self.reviews.reviews)
                if r.request.tool_name == call.name
            ),
            None,
        )
        recorded = json_data(arguments, where=f"the arguments of {call.name!r}")
        may_have_run = call.id in self.retries_begun
        request = ReviewRequest(
            review_id=self._next_event_key(call),
            thread_id=self.thread_id,
            tool_name=call.name,
            arguments=recorded,
            digest=operation_digest(call.name, recorded, tool),
            tool_call_id=call.id,
            tool=tool,
            tool_changed=change_note(earlier, tool),
            run_on_approval=run_on_approval or may_have_run,
            deadline=deadline,
            rules=rules,
            may_have_run=may_have_run,
        )
        self.trigger_event(self.ReviewRequested, request=request, timestamp=now)
        interrupt = Interrupt(
            review_reason(request),
            request.to_data(),
            call.id,
            call.name,
            PauseKind.REVIEW,
            trace_parent,
        )
        self.trigger_event(self.Interrupted, interrupt=interrupt, timestamp=now)
        return request

    def decide_review(
        self,
        review_id: str,
        decision: Decision,
        *,
        reviewer: str,
        comment: str,
        now: datetime,
        arguments: dict[str, Any] | None = None,
        scopes: tuple[str, ...] = (),
    ) -> ReviewDecision:
        """Record a verified reviewer's decision, and as the held-back call's result
        what it means for the model. ``reviewer`` and ``scopes`` must come from a
        verifier; the decision must pass the review's rules (``check_decision``). An
        approval of a review that runs its call records no result: the call stays open,
        held back until the thread's next run spends the approval and runs it.

        ``arguments``, only with an approval, are the reviewer's edit of the requested
        arguments: the approval then covers them instead (an edit equal to the request
        is a plain approval). A ``RESPONDED`` decision makes ``comment`` the call's
        result: the reviewer answers in the tool's place. Under four eyes, a first
        approval is recorded in part (the returned decision's ``partial`` is true) and
        the review stays pending for a second, different reviewer.

        Raises:
            ReviewExpiredError: ``now`` is at or past the review's deadline.
            ReviewerNotPermittedError: The review's rules do not let this reviewer
                decide it so; nothing is recorded.
            DecisionNotAllowedError: The tool's policy allows no such decision or edit.
        """
        self._refuse_if_abandoned("a decision")
        review = self.reviews.undecided(review_id, thread_id=self.thread_id)
        if review.request.expired(now):
            assert review.request.deadline is not None
            msg = (
                f"review {review_id!r} of thread {self.thread_id!r} expired at "
                f"{review.request.deadline.isoformat()}, before this decision at "
                f"{now.isoformat()}: it failed closed and this decision was not recorded "
                "(the expiry is, by the first command or worker sweep that finds it "
                "due); the operation does not run unless the model asks again and a new "
                "review approves it"
            )
            raise ReviewExpiredError(msg)
        request = review.request
        edited, digest = None, request.digest
        if arguments is not None:
            edited = json_data(arguments, where=f"the arguments of {request.tool_name!r}")
            digest = operation_digest(request.tool_name, edited, request.tool, like=request.digest)
            if digest == request.digest:  # an edit equal to the request: a plain approval
                edited = None
        if edited is not None and decision is not Decision.APPROVED:
            msg = f"only an approval takes edited arguments, not a decision {decision!r}"
            raise ThreadStateError(msg)
        check_decision(
            review, decision, reviewer=reviewer, scopes=scopes, arguments=edited, digest=digest
        )
        fields: dict[str, Any] = {
            "review_id": review_id,
            "reviewer": reviewer,
            "comment": comment,
            "digest": digest,
            "timestamp": now,
        }
        rules = request.rules
        if (
            decision is Decision.APPROVED
            and rules is not None
            and rules.four_eyes
            and not review.approvals
        ):
            self.trigger_event(self.ReviewApprovedInPart, arguments=edited, **fields)
            in_part = self.reviews.get(review_id)
            assert in_part is not None
            return in_part.approvals[-1]
        if edited is not None:
            self.trigger_event(
                self.ReviewApprovedWithEdits, decision=decision, arguments=edited, **fields
            )
        else:
            event = self.ReviewResponded if decision is Decision.RESPONDED else self.ReviewDecided
            self.trigger_event(event, decision=decision, **fields)
        self._record_decided_results(now=now)
        decided = self.reviews.get(review_id)
        assert decided is not None and decided.decision is not None
        return decided.decision

    def expire_reviews(self, *, now: datetime, clock: str = "") -> tuple[ReviewDecision, ...]:
        """Expire every pending review whose deadline has passed at ``now``: each fails
        closed, its held-back call's result saying the operation did not run, as after
        a rejection. A thread given up expires nothing (it decides no review).

        Args:
            now: The time by the sweeping clock.
            clock: Whose clock that is, kept as each expiry's comment.
        """
        if self.status is ThreadStatus.ABANDONED:
            return ()
        expired = []
        for review in self.reviews.due(now):
            request = review.request
            self.trigger_event(
                self.ReviewExpired,
                review_id=request.review_id,
                digest=request.digest,
                reviewer="",
                decision=Decision.EXPIRED,
                comment=clock,
                deadline=request.deadline,
                timestamp=now,
            )
            self._record_decided_results(now=now)
            decided = self.reviews.get(request.review_id)
            assert decided is not None and decided.decision is not None
            expired.append(decided.decision)
        return tuple(expired)

    def note_deadlines_near(self, *, lead: timedelta, now: datetime) -> tuple[ReviewRequest, ...]:
        """Record, once per review, that a pending review's deadline is less than
        ``lead`` away at ``now``; the requests noted. Nothing for a thread given up."""
        if self.status is ThreadStatus.ABANDONED:
            return ()
        nearing = self.reviews.nearing(now, lead)
        for review in nearing:
            self.trigger_event(
                self.ReviewDeadlineNear,
                thread_id=self.thread_id,
                review_id=review.request.review_id,
                tool_name=review.request.tool_name,
                deadline=review.request.deadline,
                timestamp=now,
            )
        return tuple(r.request for r in nearing)

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
        """The open calls in doubt (see :func:`calls_in_doubt`)."""
        return calls_in_doubt(self.open_calls.values(), self.reviews)

    @property
    def approved_calls(self) -> tuple[PendingToolCall, ...]:
        """Open calls an unspent approval runs (``ReviewRequest.run_on_approval``), in
        the order they were called: the next run spends each approval and runs its call
        before anything else."""
        return tuple(
            pending
            for pending in self.open_calls.values()
            if (review := self.reviews.of_call(pending.call.id)) is not None
            and review.runs_call
            and review.used_by is None
        )

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
            pauses=self.pauses,
            retry_requested=self.retry_requested,
            output=self.output,
        )

    @property
    def awaiting_person(self) -> tuple[Pause, ...]:
        """The pauses a person can still act on (see :func:`awaiting_a_person`)."""
        return awaiting_a_person(self.status, (p for p in self.pauses if not p.resolved))

    @property
    def reviews_awaiting(self) -> tuple[Review, ...]:
        """The reviews a person can still decide (see :func:`awaiting_a_person`)."""
        return awaiting_a_person(self.status, self.reviews.pending)

    @property
    def pauses(self) -> tuple[Pause, ...]:
        """Each pending interrupt, and whether a person has dealt with it."""
        return pauses_of(
            self.interrupts,
            self.reviews.decided_ids(),
            self.open_calls,
            self.answers,
            (*self.retries_requested, *self.retries_begun),
        )

    def _only_created(self) -> bool:
        """Whether the thread's one event is its plain creation, not yet saved: nothing
        read it from a store, so its first record may still say more."""
        pending = self.pending_events
        return self.version == 1 and len(pending) == 1 and type(pending[0]) is self.Started

    def _create_again(self, event: type[AgentThread.Started], **fields: Any) -> None:
        """Become this thread created by ``event`` instead of its unsaved ``Started``
        (see :meth:`_only_created`), with the same id and name."""
        become(self, created(type(self), event, id=self.id, thread_id=self.thread_id, **fields))

    # Rebasing ---------------------------------------------------------------------

    def rebase(
        self,
        head: AgentThread,
        tail: Sequence[AgentThread.Event],
        unsaved: Sequence[AgentThread.Event],
        *,
        movable: Collection[str] = (),
    ) -> bool:
        """Put this thread's ``unsaved`` events (a save that failed took them from its
        pending events) after ``head``, the stored thread, which moved on by the events
        ``tail`` since this one was loaded; whether it could.

        It can when every event of ``tail`` commutes with a run (a label, a review's
        decision with its call's result, an answer to a pause, the thread given up), no
        unsaved call has its result already or is in doubt (its idempotency key, which
        derives from its version, would change after its tool started), but for the
        calls ``movable`` (read-only calls that ran unsaved, whose keys nothing keeps),
        and each unsaved event applies after ``head``. Then this thread becomes ``head``
        with the events triggered again, sealed and numbered after it, pending;
        otherwise it is left as it was.
        """
        # A call whose tool started (its result, or its pause in doubt after a timeout,
        # is among the unsaved events) keeps the key it was given: it is not renumbered.
        ran = {e.tool_call_id for e in unsaved if isinstance(e, AgentThread.ToolResultRecorded)}
        ran |= {
            e.interrupt.tool_call_id
            for e in unsaved
            if isinstance(e, AgentThread.Interrupted) and e.interrupt.kind is PauseKind.IN_DOUBT
        }
        ran -= set(movable)
        if not _commute(tail, head) or any(not ran.isdisjoint(e.intended_calls) for e in unsaved):
            return False
        try:
            for event in unsaved:
                fields = event.rebased_fields(head)
                head.trigger_event(type(event), timestamp=event.timestamp, **fields)
        except Exception:  # an unsaved event that does not apply after the head
            return False
        become(self, head)
        return True

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
        """The open call, which must be in doubt, or claimed so by a pause recorded when
        it was held to be (code before ADR 0060 held a fork's call in doubt between a
        decision and its result, and a person may still settle that pause)."""
        pending = self._open_call(tool_call_id)
        review = self.reviews.accounting_for(tool_call_id)
        if review is None or self._claimed_in_doubt(tool_call_id):
            return pending
        review_id = review.request.review_id
        if review.pending:
            why = f"it awaits review {review_id!r}; decide that review instead"
        elif review.runs_call:
            why = (
                f"review {review_id!r} approved running it, and the thread's next run "
                "spends the approval and runs it"
            )
        else:
            why = (
                f"review {review_id!r} decided it, and the decision is its result, recorded "
                "when the thread next runs"
            )
        msg = f"tool call {tool_call_id!r} of thread {self.thread_id!r} is not in doubt: {why}"
        raise ThreadStateError(msg)

    def _claimed_in_doubt(self, tool_call_id: str) -> bool:
        return any(
            i.kind is PauseKind.IN_DOUBT and i.tool_call_id == tool_call_id for i in self.interrupts
        )

    def _record_decided_results(self, *, now: datetime) -> None:
        """Record as its call's result each decision that stands for one: the command
        that decides records it at once, but a state taken between the two (a fork at
        the decision's version) records it before it next runs."""
        for call_id in tuple(self.open_calls):
            if (review := self.reviews.answering(call_id)) is not None:
                self.record_tool_result(
                    call_id, decision_text(review), ToolOutcome.NOT_EXECUTED, now=now
                )

    def _refuse_if_abandoned(self, what: str) -> None:
        if self.status is ThreadStatus.ABANDONED:
            msg = (
                f"thread {self.thread_id!r} was abandoned: it takes {what} no more (its "
                "pauses are never decided); fork it to go on from any version"
            )
            raise ThreadStateError(msg)

    def _refuse_nothing_to_continue(self, what: str) -> None:
        """Refuse ``what``, a run on from the history, on a thread whose history holds
        no message but system prompts: it would call the model on nothing anyone said
        (ADR 0142). The one rule of a ``continue`` and of a retry of a failed run."""
        if any(message.role != Role.SYSTEM for message in self.messages):  # or its text
            return
        if self._only_created():
            msg = (
                f"thread {self.thread_id!r} not found: no store holds it, so {what} has "
                "nothing to go on from; start it with run(input)"
            )
            raise ThreadNotFoundError(msg)
        msg = (
            f"thread {self.thread_id!r} holds no message to go on from (status "
            f"{self.status}), so {what} would ask the model about nothing; give it the "
            "user's message with run(input)"
        )
        raise ThreadStateError(msg)

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

    def _add_checkpoint(
        self, reason: CheckpointReason, retain: int, version: int, saved_at: datetime
    ) -> None:
        """Keep a checkpoint of the thread as it is, at ``version``: the newest
        ``retain`` are kept (0 keeps all).

        Raises:
            ValueError: ``retain`` is negative (a stored event altered so would forget
                every checkpoint).
        """
        _check_retain(retain)
        self.checkpoints.append(
            Checkpoint(
                sequence=self.next_checkpoint_sequence,
                version=version,
                turn=self.turn,
                status=self.status,
                reason=reason,
                saved_at=saved_at,
            )
        )
        self.next_checkpoint_sequence += 1
        if retain and len(self.checkpoints) > retain:
            del self.checkpoints[:-retain]

    def _open_intended(self, call: ToolCall, version: int) -> None:
        # The call's idempotency key derives from the version of the event recording its
        # intent (ADR 0023): part of the stored format.
        key = event_key(self.thread_id, version, call.id)
        self.open_calls[call.id] = PendingToolCall(call, key)

    def _check_new_call_ids(
        self,
        calls: Sequence[ToolCall],
        *,
        results: bool = True,
        error: type[Exception] = ThreadStateError,
    ) -> None:
        """Raise ``error`` for an empty or repeated id, or one already used in the
        thread. Without ``results``, an id that only a recorded result has passes:
        finding those reads every tool message of a thread just loaded, which a fold
        does not pay for."""
        given: set[str] = set()
        for call in calls:
            if not call.id or call.id in given or self._call_id_used(call.id, results=results):
                msg = (
                    f"tool call id {call.id!r} is empty or already used in thread "
                    f"{self.thread_id!r} (an id of a review id's form counts as used); "
                    "make the ids unique with unique_calls() first"
                )
                raise error(msg)
            given.add(call.id)

    def _call_id_used(self, call_id: str, *, results: bool = True) -> bool:
        # Every recorded call is open or has its result among the tool messages; an id
        # of a review's form is taken by the reviews, past and future.
        return (
            has_key_form(call_id)
            or call_id in self.open_calls
            or (results and call_id in self._result_call_ids())
        )

    def _result_call_ids(self) -> set[str]:
        # A memo, not state: snapshots leave it out, and a thread without it (just
        # loaded) or whose message list was replaced builds it again from the list.
        memo: _ResultCallIds | None = self.__dict__.get(RESULT_CALL_IDS)
        if memo is None or memo.messages is not self.messages:
            memo = _ResultCallIds(self.messages)
            setattr(self, RESULT_CALL_IDS, memo)
        return memo.current()

    def _next_event_key(self, call: ToolCall) -> str:
        return event_key(self.thread_id, self.version + 1, call.id)


_POSITION_FIELDS = frozenset({"originator_id", "originator_version", "timestamp"})
"""An event's fields that say where in its stream it stands, set anew when it is
triggered again by a rebase."""

_COMMUTING = (
    AgentThread.Labelled,
    AgentThread.ReviewDecided,  # and its subclasses: edited approval, response, expiry
    AgentThread.ReviewDeadlineNear,
    AgentThread.InterruptAnswered,
    AgentThread.Abandoned,
)


def _commute(tail: Sequence[AgentThread.Event], head: AgentThread) -> bool:
    """Whether every event of ``tail`` commutes with a run: one of :data:`_COMMUTING`,
    or the result a decision recorded for the call its review held back."""
    decided: set[str] = set()
    for event in tail:
        if isinstance(event, AgentThread.ReviewDecided):
            review = head.reviews.get(event.review_id)
            if review is not None:
                decided.add(review.request.tool_call_id)
        elif type(event) is AgentThread.ToolResultRecorded:
            if event.outcome is not ToolOutcome.NOT_EXECUTED or event.tool_call_id not in decided:
                return False
        elif not isinstance(event, _COMMUTING):
            return False
    return True


def _discard(items: list[str], item: str) -> None:
    if item in items:
        items.remove(item)


class _ResultCallIds:
    """The call ids of a message list's tool messages, brought up to date by reading
    only the messages appended since the last look: events only append to the list,
    so finding whether a call id is used costs the same in any turn."""

    __slots__ = ("ids", "messages", "seen")

    def __init__(self, messages: list[Message]) -> None:
        self.messages = messages
        self.seen = 0
        self.ids: set[str] = set()

    def current(self) -> set[str]:
        messages = self.messages
        for index in range(self.seen, len(messages)):
            message = messages[index]
            if message.role is Role.TOOL and message.tool_call_id:
                self.ids.add(message.tool_call_id)
        self.seen = len(messages)
        return self.ids


def run_input_problem(mode: RunMode, message: Message | None) -> str | None:
    """Why a run of ``mode`` cannot start given ``message``, or None: a ``run`` takes
    input, a user's message of text, and only a ``run`` does. The one rule of
    :func:`run_input`, of :meth:`AgentThread.start_run` and of a stored
    ``RunStartedWithInput``'s fold."""
    if mode is not RunMode.RUN:
        if message is None:
            return None
        return (
            "a run started with input is a run given a user's message, not a "
            f"{mode} given a {message.role} one"
        )
    if message is None:
        return "run(input) needs the user's input as a str, got None"
    if type(message.content) is not str:  # a subclass of str no event can hold either
        return f"run(input) takes the user's input as a str, got {type(message.content).__name__}"
    if message.role is not Role.USER:
        return (
            "a run started with input is a run given a user's message, not a "
            f"{mode} given a {message.role} one"
        )
    return message_id_problem(message.id)


def steering_message(message: object) -> Message:
    """``message`` as a thread records it when it steers a run: a user's or a system's
    message of valid text, read back from its JSON (a role given as its text is the
    ``Role``, as a replay reads it). It calls no tool and answers no call: a run records
    its calls and their results itself, each call answered once, as every model's API
    requires of a conversation. And it has no id: an id lets a run refuse its input
    given again, and steering is no run's input. The one rule of ``Agent.steer`` and
    :meth:`AgentThread.steer` (ADR 0155).

    Raises:
        InvalidRunInputError: ``message`` may not steer a run, saying why.
    """
    if not isinstance(message, Message) or type(message.content) is not str:
        found = type(message.content if isinstance(message, Message) else message).__name__
        raise InvalidRunInputError(f"steer(message) takes a str or a Message of text, got {found}")
    if message.role not in (Role.USER, Role.SYSTEM):
        msg = f"a steering message is a user's or a system's, not one of role {message.role!r}"
        raise InvalidRunInputError(msg)
    if message.tool_calls or message.tool_call_id is not None or message.usage is not None:
        msg = (
            "a steering message calls no tool, answers no call and reports no usage: the "
            "run records those itself"
        )
        raise InvalidRunInputError(msg)
    if message.id is not None:
        msg = "a steering message has no id: ids are for a run's input (run(message_id=))"
        raise InvalidRunInputError(msg)
    try:  # what the thread records of it, read back: a field of another type, a lone
        # surrogate (which no store keeps) would fail the save, the message dropped
        kept = msgspec.json.decode(msgspec.json.encode(message), type=Message)
    except (msgspec.MsgspecError, TypeError, ValueError):
        kept = None
    if kept != message:
        msg = (
            "a steering message must read back as given: each field of the type Message "
            "declares, its text valid Unicode (a lone surrogate is none)"
        )
        raise InvalidRunInputError(msg)
    return kept


MAX_MESSAGE_ID = 256
"""The longest id a sender may give a message, in characters."""


def message_id_problem(message_id: object) -> str | None:
    """Why ``message_id`` cannot be a message's id, or None: it is None, or text of 1
    to :data:`MAX_MESSAGE_ID` printable characters."""
    if message_id is None:
        return None
    if type(message_id) is not str:
        return f"a message id is a str, got {type(message_id).__name__}"
    if not 0 < len(message_id) <= MAX_MESSAGE_ID or not message_id.isprintable():
        return (
            f"a message id is 1 to {MAX_MESSAGE_ID} printable characters, got one of "
            f"{len(message_id)} characters"
        )
    return None


def run_input(text: object, message_id: str | None = None) -> Message:
    """The user's message a ``run`` starts with, made of the ``text`` it was given and
    the id its sender gave it, if any.

    Raises:
        InvalidRunInputError: ``text`` is not a str, or ``message_id`` no id a message
            may have; nothing was recorded.
    """
    # The rule checks that they are what they claim.
    message = Message(Role.USER, cast(str, text), id=message_id)
    if (problem := run_input_problem(RunMode.RUN, message)) is not None:
        raise InvalidRunInputError(problem)
    return message


# The snapshot module cannot import the aggregate (this module imports it): wire them here.
AgentThread.Snapshot = ThreadSnapshot
ThreadSnapshot.aggregate_class = AgentThread
