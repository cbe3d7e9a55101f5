"""Audits that replay: a readable account of a thread, and checks that it is intact.

Everything here reads the store's log and snapshots; nothing calls a model or a tool.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, Protocol

import msgspec
from eventsourcing.persistence import StoredEvent

from covonaut_es.domain import (
    AgentThread,
    Checkpoint,
    ThreadParent,
    ThreadState,
    canonical_json,
    thread_aggregate_id,
)
from covonaut_es.domain._integrity import CHAIN_KEY, UNCHAINED, chain_hash
from covonaut_es.errors import SerializationError
from covonaut_es.messages import Message


class _AuditedStore(Protocol):
    """What an audit reads of a store (the store passes itself)."""

    def history(self, thread_id: str) -> tuple[AgentThread.Event, ...]: ...
    def parent(self, thread_id: str) -> ThreadParent | None: ...
    def checkpoints(self, thread_id: str) -> tuple[Checkpoint, ...]: ...
    def state_at(self, thread_id: str, version: int | None = None) -> ThreadState: ...
    def _stored_records(self, thread_id: str) -> tuple[StoredEvent, ...]: ...
    def _plain_payload(self, record: StoredEvent) -> bytes: ...
    def _snapshot_states(self, thread_id: str) -> tuple[ThreadState, ...]: ...


class AuditEntry(msgspec.Struct, frozen=True):
    """One event of a thread, for a person to read.

    Attributes:
        thread_id: The thread whose stream holds the event (a fork's inherited events
            belong to its ancestors).
        version: The event's version.
        recorded_at: When the event happened.
        kind: The event type, e.g. ``ToolCalled``.
        summary: What happened, in one line.
    """

    thread_id: str
    version: int
    recorded_at: datetime
    kind: str
    summary: str


class AuditFinding(msgspec.Struct, frozen=True):
    """Something wrong with a thread, at a version."""

    version: int
    problem: str


class AuditReport(msgspec.Struct, frozen=True):
    """The outcome of :func:`verify`.

    Attributes:
        thread_id: The thread checked.
        events: Events read (inherited ones included).
        chained: Events whose hash chain was verified.
        unchained: Events written before tamper evidence existed.
        checkpoints_checked: Checkpoints whose state was compared with the replay.
        snapshots_checked: Stored snapshots compared with the replay.
        findings: Every problem found; empty when the thread is intact.
    """

    thread_id: str
    events: int
    chained: int
    unchained: int
    checkpoints_checked: int
    snapshots_checked: int
    findings: tuple[AuditFinding, ...]

    @property
    def ok(self) -> bool:
        """Whether nothing was found."""
        return not self.findings


def _clip(text: str, width: int = 80) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def _message_summary(message: Message) -> str:
    parts = [f"{message.role}:"]
    if message.content:
        parts.append(_clip(message.content))
    parts += [f"[calls {call.name}]" for call in message.tool_calls]
    return " ".join(parts)


_SUMMARIES: dict[type[Any], Callable[[Any], str]] = {
    AgentThread.Started: lambda e: f"thread {e.thread_id!r} started",
    AgentThread.Forked: lambda e: (
        f"forked from {e.parent_thread_id!r} at version {e.parent_version}"
        + (f" with {len(e.interrupts)} pending interrupt(s)" if e.interrupts else "")
    ),
    AgentThread.RunStarted: lambda e: f"{e.mode} started",
    AgentThread.MessageAppended: lambda e: _message_summary(e.message),
    AgentThread.ToolCalled: lambda e: (
        f"intent to call {e.call.name}({_clip(e.call.arguments, 60)})"
    ),
    AgentThread.ToolCallSettled: lambda e: (
        f"{e.tool_name} settled by the application: {_clip(e.content)}"
    ),
    AgentThread.ToolResultRecorded: lambda e: f"{e.tool_name} {e.outcome}: {_clip(e.content)}",
    AgentThread.ToolCallRetried: lambda e: (
        f"call {e.tool_call_id} retried with its idempotency key"
    ),
    AgentThread.Interrupted: lambda e: (
        f"interrupted by {e.interrupt.tool_name}: {e.interrupt.reason}"
    ),
    AgentThread.Steered: lambda e: f"steered by {_message_summary(e.message)}",
    AgentThread.Resumed: lambda e: "resumed",
    AgentThread.TurnStarted: lambda e: f"turn {e.turn} started",
    AgentThread.Compacted: lambda e: f"context compacted from message {e.compaction.first_kept}",
    AgentThread.RunFinished: lambda e: f"answered: {_clip(e.output)}",
    AgentThread.RunFailed: lambda e: f"failed: {e.error_type}: {_clip(e.message)}",
    AgentThread.CheckpointSaved: lambda e: f"checkpoint saved ({e.reason})",
    AgentThread.Abandoned: lambda e: f"abandoned: {e.reason}" if e.reason else "abandoned",
    AgentThread.Labelled: lambda e: (
        f"labelled {e.label.name!r}"
        + ("" if e.label.version is None else f" at version {e.label.version}")
    ),
    AgentThread.ReviewRequested: lambda e: (
        f"review {e.request.review_id} of {e.request.tool_name}"
        f"({_clip(canonical_json(e.request.arguments).decode(), 60)}) requested, "
        f"digest {e.request.digest}"
    ),
    AgentThread.ReviewDecided: lambda e: (
        f"review {e.review_id} {e.decision} by {e.reviewer}, digest {e.digest}"
        + (f": {_clip(e.comment, 60)}" if e.comment else "")
    ),
    AgentThread.ApprovalUsed: lambda e: (
        f"approval of review {e.review_id} used by call {e.tool_call_id}"
    ),
}


def summarize(event: Any) -> str:
    """A one-line account of an event."""
    for cls in type(event).__mro__:
        if cls in _SUMMARIES:
            return _SUMMARIES[cls](event)
    return type(event).__name__


def replay(store: _AuditedStore, thread_id: str) -> Iterator[AuditEntry]:
    """Each event of the thread with its version, time and a readable summary."""
    owners = {thread_aggregate_id(t): t for t in _ancestry(store, thread_id)}
    for event in store.history(thread_id):
        yield AuditEntry(
            thread_id=owners[event.originator_id],
            version=event.originator_version,
            recorded_at=event.timestamp,
            kind=type(event).__name__,
            summary=summarize(event),
        )


def _ancestry(store: _AuditedStore, thread_id: str) -> list[str]:
    threads = [thread_id]
    while (parent := store.parent(threads[-1])) is not None:
        threads.append(parent.thread_id)
    return threads


def verify(store: _AuditedStore, thread_id: str) -> AuditReport:
    """Check a thread: its hash chain, and its checkpoints and snapshots against the
    state rebuilt from its events alone."""
    findings: list[AuditFinding] = []
    chained, unchained, events = _verify_chain(store, thread_id, findings)
    checkpoints = snapshots = 0
    if not findings:
        checkpoints, snapshots = _verify_states(store, thread_id, findings)
    return AuditReport(
        thread_id=thread_id,
        events=events,
        chained=chained,
        unchained=unchained,
        checkpoints_checked=checkpoints,
        snapshots_checked=snapshots,
        findings=tuple(findings),
    )


def _verify_chain(
    store: _AuditedStore, thread_id: str, findings: list[AuditFinding]
) -> tuple[int, int, int]:
    """Recompute the hash chain from the stored payloads; report the first break."""
    previous, chained, unchained = UNCHAINED, 0, 0
    records = store._stored_records(thread_id)
    for record in records:
        version = record.originator_version
        try:
            payload = msgspec.json.decode(store._plain_payload(record))
        except (SerializationError, msgspec.DecodeError) as exc:
            findings.append(AuditFinding(version, f"stored record is unreadable: {exc}"))
            break
        stored = payload.get(CHAIN_KEY, UNCHAINED) if isinstance(payload, dict) else UNCHAINED
        if stored == UNCHAINED:
            unchained += 1
            continue
        if stored != chain_hash(previous, record.topic, version, payload):
            findings.append(
                AuditFinding(
                    version, "hash chain broken: the stored record was altered after it was written"
                )
            )
            break
        previous, chained = stored, chained + 1
    return chained, unchained, len(records)


def _verify_states(
    store: _AuditedStore, thread_id: str, findings: list[AuditFinding]
) -> tuple[int, int]:
    """Fold the events one by one and compare with checkpoints and stored snapshots."""
    checkpoints = store.checkpoints(thread_id)
    snapshots = store._snapshot_states(thread_id)
    expected_at: defaultdict[int, list[tuple[str, ThreadState]]] = defaultdict(list)
    for snapshot in snapshots:
        expected_at[snapshot.version].append(("snapshot", snapshot))
    for checkpoint in checkpoints:
        state = store.state_at(thread_id, checkpoint.version)
        expected_at[checkpoint.version].append(("checkpoint", state))
    thread: Any = None
    for event in store.history(thread_id):
        if isinstance(event, AgentThread.Forked):
            thread = event.graft(thread)
        else:
            thread = event.mutate(thread)
        for kind, state in expected_at.get(thread.version, ()):
            if state != thread.state:
                problem = f"{kind} state differs from the state replayed from events"
                findings.append(AuditFinding(thread.version, problem))
    return len(checkpoints), len(snapshots)
