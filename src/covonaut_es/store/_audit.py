"""Audits that replay: a readable account of a thread, and checks that it is intact.

Everything here reads the store's log and snapshots; nothing calls a model or a tool.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

import msgspec
from eventsourcing.persistence import StoredEvent

from covonaut_es.domain import (
    AgentThread,
    Checkpoint,
    canonical_json,
    requested_call,
    thread_aggregate_id,
)
from covonaut_es.domain._snapshot import differing_fields
from covonaut_es.errors import (
    MissingEventError,
    MissingToolCallError,
    SerializationError,
    StoredRowError,
    ThreadNotFoundError,
    ThreadStateError,
)
from covonaut_es.messages import Message
from covonaut_es.store._chain import CHAIN_FIELD, UNCHAINED, link_problem
from covonaut_es.store._chain_key import head_problem
from covonaut_es.store._heads import HeadAnchor
from covonaut_es.store._reader import ThreadReader
from covonaut_es.store._records import StoredRecords
from covonaut_es.store._snapshot_cache import CheckedSnapshot


class _AuditedStore(Protocol):
    """What an audit reads of a store (the store passes itself)."""

    url: str

    def history(self, thread_id: str) -> tuple[AgentThread.Event, ...]: ...
    def path_to_root(self, thread_id: str) -> tuple[str, ...]: ...
    def checkpoints(self, thread_id: str) -> tuple[Checkpoint, ...]: ...
    def load(self, thread_id: str, *, version: int | None = None) -> AgentThread: ...
    @property
    def _records(self) -> StoredRecords: ...
    @property
    def _reader(self) -> ThreadReader: ...


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
        notes: What could not be checked, and why, such as a thread without a head
            anchor in a store written before heads were anchored, or in an application
            whose recorder keeps none (not a finding).
    """

    thread_id: str
    events: int
    chained: int
    unchained: int
    checkpoints_checked: int
    snapshots_checked: int
    findings: tuple[AuditFinding, ...]
    notes: tuple[str, ...] = ()

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


def _answered(finished: AgentThread.RunFinished) -> str:
    if finished.typed is None:
        return f"answered: {_clip(finished.output)}"
    return f"answered with the typed value {_clip(canonical_json(finished.typed.value).decode())}"


_SUMMARIES: dict[type[Any], Callable[[Any], str]] = {
    AgentThread.StartedWithInput: lambda e: (
        f"thread {e.thread_id!r} started; {e.mode} started with {_message_summary(e.message)}"
    ),
    AgentThread.Started: lambda e: f"thread {e.thread_id!r} started",
    AgentThread.Forked: lambda e: (
        f"forked from {e.parent_thread_id!r} at version {e.parent_version}"
        + (f" with {len(e.interrupts)} pending interrupt(s)" if e.interrupts else "")
    ),
    AgentThread.RunStartedWithInput: lambda e: (
        f"{e.mode} started with {_message_summary(e.message)}"
    ),
    AgentThread.RunStarted: lambda e: f"{e.mode} started",
    AgentThread.TurnAnsweredWithCalls: lambda e: (
        f"turn {e.turn}: {_message_summary(e.message)}, each call's intent recorded"
    ),
    AgentThread.TurnAnswered: lambda e: f"turn {e.turn}: {_message_summary(e.message)}",
    AgentThread.MessageAppended: lambda e: _message_summary(e.message),
    AgentThread.ToolCallSettled: lambda e: (
        f"{e.tool_name} settled by the application: {_clip(e.content)}"
    ),
    AgentThread.ToolResultCheckpointed: lambda e: (
        f"{e.tool_name} {e.outcome}: {_clip(e.content)}, checkpoint saved ({e.checkpoint_reason})"
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
    AgentThread.RunFinishedCheckpointed: lambda e: (
        f"{_answered(e)}, checkpoint saved ({e.checkpoint_reason})"
    ),
    AgentThread.RunFinished: _answered,
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
    AgentThread.ReviewApprovedWithEdits: lambda e: (
        f"review {e.review_id} approved by {e.reviewer} with edited arguments "
        f"{_clip(canonical_json(e.arguments).decode(), 60)}, digest {e.digest}"
        + (f": {_clip(e.comment, 60)}" if e.comment else "")
    ),
    AgentThread.ReviewApprovedInPart: lambda e: (
        f"review {e.review_id} approved in part by {e.reviewer}, digest {e.digest}: it waits "
        "for a second, different reviewer" + (f": {_clip(e.comment, 60)}" if e.comment else "")
    ),
    AgentThread.ReviewResponded: lambda e: (
        f"review {e.review_id} answered by {e.reviewer} in the tool's place: {_clip(e.comment)}"
    ),
    AgentThread.ReviewExpired: lambda e: (
        f"review {e.review_id} expired undecided at its deadline {e.deadline.isoformat()}, "
        f"digest {e.digest}: the operation did not run"
    ),
    AgentThread.ReviewDeadlineNear: lambda e: (
        f"review {e.review_id} nears its deadline {e.deadline.isoformat()}"
    ),
    AgentThread.ReviewDecided: lambda e: (
        f"review {e.review_id} {e.decision} by {e.reviewer}, digest {e.digest}"
        + (f": {_clip(e.comment, 60)}" if e.comment else "")
    ),
    AgentThread.ToolPinned: lambda e: (
        f"call {e.tool_call_id} is of {e.tool.label} at {e.tool.origin}, "
        f"tool digest {e.tool.digest}"
    ),
    AgentThread.ApprovalUsed: lambda e: (
        f"approval of review {e.review_id} used by call {e.tool_call_id}"
    ),
}


def _call_summary(event: AgentThread.ToolCalled, messages: list[Message]) -> str:
    call = requested_call(messages, event.tool_call_id)
    if call is None:
        return f"intent to call {event.tool_call_id}, which no assistant message asked for"
    return f"intent to call {call.name}({_clip(call.arguments, 60)})"


def summarize(event: Any, messages: list[Message] | None = None) -> str:
    """A one-line account of an event; ``messages``, those of its thread before it,
    give a ``ToolCalled`` its call."""
    if isinstance(event, AgentThread.ToolCalled):
        return _call_summary(event, messages or [])
    for cls in type(event).__mro__:
        if cls in _SUMMARIES:
            return _SUMMARIES[cls](event)
    return type(event).__name__


def replay(store: _AuditedStore, thread_id: str) -> Iterator[AuditEntry]:
    """Each event of the thread with its version, time and a readable summary."""
    owners = {thread_aggregate_id(t): t for t in store.path_to_root(thread_id)}
    messages: list[Message] = []  # those that can ask for calls
    for event in store.history(thread_id):
        if isinstance(event, AgentThread.MessageAppended | AgentThread.Steered):
            messages.append(event.message)
        elif isinstance(event, AgentThread.StartedFromState):
            messages.extend(event.document.messages)
        yield AuditEntry(
            thread_id=owners[event.originator_id],
            version=event.originator_version,
            recorded_at=event.timestamp,
            kind=type(event).__name__,
            summary=summarize(event, messages),
        )


def verify(store: _AuditedStore, thread_id: str) -> AuditReport:
    """Check a thread: its hash chain, its checkpoints and snapshots against the state
    rebuilt from its events alone, and the state a load gives against that replay.

    One pass over the stored records, a page at a time: each record's chain is checked,
    its event folded, and the fold compared with a snapshot or checkpoint at that
    version as it is passed, so time is linear in the thread's length and memory holds
    one state, not one per checkpoint.
    """
    with store._reader.reading(thread_id):  # a database's refusal of a read, typed
        audit = _Fold(store, thread_id)
        audit.run()
    return AuditReport(
        thread_id=thread_id,
        events=audit.events,
        chained=audit.chained,
        unchained=audit.unchained,
        checkpoints_checked=audit.checkpoints_checked,
        snapshots_checked=audit.snapshots_checked,
        findings=tuple(audit.findings),
        notes=tuple(audit.notes),
    )


_DAMAGE = (
    SerializationError,
    MissingToolCallError,
    MissingEventError,
    ThreadStateError,
    ThreadNotFoundError,  # a fork's parent gone, or forks altered into a loop
)
"""What reading a damaged thread raises: :func:`verify` reports it, never raises it."""


class _Fold:
    """The state of one :func:`verify` pass."""

    def __init__(self, store: _AuditedStore, thread_id: str) -> None:
        self.store, self.thread_id = store, thread_id
        self.findings: list[AuditFinding] = []
        self.notes: list[str] = []
        self.last_version = 0
        self.events = self.chained = self.unchained = 0
        self.checkpoints_checked = self.snapshots_checked = 0
        self.previous = UNCHAINED
        self.thread: Any = None
        self.owners: dict[UUID, str] = {}  # the thread's and its ancestors', by stream
        self.stream: UUID | None = None  # of the record folded last
        self.owner = thread_id  # the thread whose stream that is
        self.adoption = store._records.chain_adoption()
        if self.adoption.adopted and store._records.chain_key is None:
            self.notes.append(
                "this store seals its chain with a key: without it, keyed seals cannot be "
                "checked; open the store with its chain key (--chain-key-env)"
            )

    def run(self) -> None:
        """One pass up to the head anchored when it starts: what a save commits meanwhile
        (its events and its anchor, in one transaction) is left to the next audit, so a
        thread written during the pass reads as it stood, not as damaged."""
        store = self.store
        anchor = self._anchor()
        bound = None if anchor is None else anchor.version
        try:
            checkpoints = {c.version: c for c in store.checkpoints(self.thread_id)}
        except _DAMAGE:
            checkpoints = {}  # the pass reports the record that a load cannot read
        snapshots = self._snapshots(bound)
        snapshot = next(snapshots, None)
        try:
            self.owners = {thread_aggregate_id(t): t for t in store.path_to_root(self.thread_id)}
            for record in store._records.iter_stored_records(self.thread_id, lte=bound):
                self.events += 1
                if not self._holds(record):
                    return
                version = record.originator_version
                while snapshot is not None and snapshot.version <= version:
                    self._compare_snapshot(snapshot)
                    snapshot = next(snapshots, None)
                if version in checkpoints:
                    self._compare_checkpoint(checkpoints[version])
        except _DAMAGE as exc:  # the stream, or a fork's parent, cannot be followed
            problem = f"the records cannot be read after version {self.last_version}: {exc}"
            self.findings.append(AuditFinding(self.last_version + 1, problem))
            return
        for beyond in itertools.chain((snapshot,) if snapshot else (), snapshots):
            self._compare_snapshot(beyond)
        self._compare_load()
        if anchor is not None:
            self._check_head(anchor)
        self._check_key()

    def _anchor(self) -> HeadAnchor | None:
        """What the head table says of the thread, None when that is a finding or a
        note: then the pass goes to the stream's end."""
        try:
            anchor = self.store._records.head_anchor(self.thread_id)
        except StoredRowError as exc:
            self.findings.append(AuditFinding(0, f"the head anchor does not read: {exc}"))
            return None
        if anchor.unkept:
            self.notes.append(
                f"no head anchor for thread {self.thread_id!r}, so the deletion of its "
                f"newest events cannot be detected: {anchor.unkept}"
            )
            return None
        if anchor.version is None and not anchor.store_anchors:
            self.notes.append(
                "no head anchor: the store was written before heads were anchored, so the "
                "deletion of the newest events cannot be detected"
            )
            return None
        return anchor

    def _snapshots(self, bound: int | None) -> Iterator[CheckedSnapshot]:
        """The thread's snapshots up to version ``bound`` as a load checks them, and one
        past it of a version the stream, read again, does not reach (written around the
        library); one written by newer code, or a snapshot row that is damaged, is a
        finding, and ends the snapshots (it says nothing of those after it)."""
        try:
            for checked in self.store._records.checked_snapshots(self.thread_id):
                if bound is not None and checked.version > bound:
                    newest = self.store._reader.head_version(self.thread_id)
                    if newest is not None and newest >= checked.version:
                        return  # taken after the pass began, of events it does not read
                yield checked
        except SerializationError as exc:  # SchemaVersionError, StoredRowError among them
            self.findings.append(
                AuditFinding(self.last_version, f"a snapshot does not load: {exc}")
            )

    def _compare_load(self) -> None:
        """Compare the state a load gives at the version the replay reached (the head,
        as the pass began) with the replay; a load that fails is a finding too."""
        if self.thread is None:
            return
        try:
            loaded = self.store.load(self.thread_id, version=self.thread.version)
        except _DAMAGE as exc:
            self.findings.append(
                AuditFinding(self.thread.version, f"the thread does not load: {exc}")
            )
            return
        if fields := differing_fields(loaded, self.thread):
            problem = (
                "the state a load gives differs from the state replayed from events in: "
                + ", ".join(fields)
            )
            self.findings.append(AuditFinding(self.thread.version, problem))

    def _check_key(self) -> None:
        """With a chain key, the newest event must be sealed with it."""
        if self.store._records.chain_key is None:
            return
        problem = head_problem(self.previous)
        if problem is not None:
            problem += (
                "; the thread was rewritten without the key, or not written since the "
                "store's key was adopted"
            )
            self.findings.append(AuditFinding(self.last_version, problem))

    def _check_head(self, anchor: HeadAnchor) -> None:
        """Compare where the stream ends with where its head was anchored when the pass
        began; events past that version are the library's if the anchor read now
        reaches them (a save writes both in one transaction)."""
        last = self.last_version
        if anchor.version is None:
            problem = (
                "head anchor missing: this store anchors every thread's head but has no "
                "anchor for this thread; its anchor row was deleted, or its events were "
                "written by a recorder that keeps no anchors"
            )
        elif last < anchor.version:
            problem = (
                f"stream ends at version {last} but its head was anchored at version "
                f"{anchor.version}: the newest events were deleted"
            )
        elif anchor.chain not in (UNCHAINED, self.previous):
            problem = (
                f"the anchored head's chain hash {anchor.chain} differs from the stream's "
                f"{self.previous or '(none)'}: the stream was rewritten"
            )
        else:
            self._check_beyond(anchor.version)
            return
        self.findings.append(AuditFinding(last, problem))

    def _check_beyond(self, anchored: int) -> None:
        """Report events past the anchored head that no anchor covers: written around
        the library. The stream's end is read first, then the anchor again."""
        newest = self.store._reader.head_version(self.thread_id)
        if newest is None or newest <= anchored:
            return
        try:
            now = self.store._records.head_anchor(self.thread_id).version
        except StoredRowError as exc:
            self.findings.append(AuditFinding(anchored, f"the head anchor does not read: {exc}"))
            return
        if now is None or newest > now:
            problem = (
                f"stream goes on to version {newest} beyond its anchored head at version "
                f"{anchored if now is None else now}: events were written around the library"
            )
            self.findings.append(AuditFinding(newest, problem))

    def _holds(self, record: StoredEvent) -> bool:
        """Fold one record's event as a load folds it, then check its link in the chain;
        False, with a finding, where either fails (neither can be followed past it)."""
        version = record.originator_version
        mapper = self.store._records.mapper
        try:
            payload = mapper.payload_fields(record)
        except SerializationError as exc:
            self.findings.append(AuditFinding(version, f"stored record is unreadable: {exc}"))
            return False
        # The link covers the payload as stored: checked before upcasters may change it.
        stored = payload.get(CHAIN_FIELD, UNCHAINED)
        key = self.store._records.chain_key
        problem = link_problem(stored, self.previous, record.topic, version, payload, key)
        stream = UUID(str(record.originator_id))
        if problem is None and key is not None:
            problem = self.adoption.problem(stream, version, stored)
        try:
            event = mapper.decode_fields(record, payload)  # decrypted and decoded once
        except SerializationError as exc:
            self.findings.append(AuditFinding(version, f"stored record is unreadable: {exc}"))
            return False
        thread, base = self.thread, None
        if stream != self.stream:  # a stream starts: the thread's own after its ancestors'
            self.stream, self.owner = stream, self.owners.get(stream, self.thread_id)
            thread, base = None, self.thread  # a fork's first event is grafted onto base
        # Folded first, as a load folds it: the same damage is the same error.
        try:
            folded = self.store._reader.fold(thread, (event,), self.owner, lambda _: base)
        except MissingEventError as exc:  # reported where the gap starts
            problem = f"events were deleted: {exc}"
            self.findings.append(AuditFinding(self.last_version + 1, problem))
            return False
        except _DAMAGE as exc:
            self.findings.append(AuditFinding(version, f"event does not apply: {exc}"))
            return False
        if problem is not None:
            self.findings.append(AuditFinding(version, problem))
            return False
        if stored == UNCHAINED:
            self.unchained += 1
        else:
            self.previous, self.chained = stored, self.chained + 1
        self.thread, self.last_version = folded, version
        self.thread.chain_head = self.previous
        return True

    def _compare_snapshot(self, checked: CheckedSnapshot) -> None:
        """Report a snapshot a load would not trust, and every field in which it differs
        from the replay at its version."""
        self.snapshots_checked += 1
        version, snapshot = checked.version, checked.snapshot
        if checked.other_key or checked.stale:
            self.notes.append(
                f"the snapshot at version {version} is passed over on load: {checked.problem}"
            )
        elif checked.problem is not None:
            self.findings.append(AuditFinding(version, f"snapshot not trusted: {checked.problem}"))
        if snapshot is None:
            return
        if self.thread is None or self.thread.version != version:
            problem = (
                f"snapshot at version {version} matches no event of the thread's own stream, "
                f"which the replay has read up to version {self.last_version}"
            )
            self.findings.append(AuditFinding(version, problem))
        elif fields := differing_fields(snapshot.mutate(None), self.thread):
            names = ", ".join(fields)
            problem = f"snapshot state differs from the state replayed from events in: {names}"
            self.findings.append(AuditFinding(version, problem))

    def _compare_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Compare a checkpoint the thread lists with the one the replay made at its
        version, field by field."""
        self.checkpoints_checked += 1
        replayed = next(
            (c for c in reversed(self.thread.checkpoints) if c.version == checkpoint.version), None
        )
        if replayed is None:
            problem = (
                f"checkpoint {checkpoint.sequence} at version {checkpoint.version} is not one "
                "the replay saved there"
            )
        elif fields := [
            name
            for name, value in msgspec.structs.asdict(checkpoint).items()
            if getattr(replayed, name) != value
        ]:
            differences = ", ".join(
                f"{name} ({getattr(checkpoint, name)}, replayed {getattr(replayed, name)})"
                for name in fields
            )
            problem = f"checkpoint {checkpoint.sequence} differs from its replay in: {differences}"
        else:
            return
        self.findings.append(AuditFinding(checkpoint.version, problem))
