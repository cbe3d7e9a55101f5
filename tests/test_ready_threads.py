"""A worker's candidates are exactly those of the naive fold, which keeps every thread
the log named: a generated state machine over the events that change whether a thread
can run, steps that park threads or find them busy, and the clock.

The worker forgets a thread that ended or waits for a person, and recalls what the
thread itself says when an event comes that needs it, or a thread starts from another's
state (ADR 0077): here, the naive fold's summary of the thread before the event, as the
thread's own state (no input counted)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import attrs
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from covonaut_es.domain import AgentThread, PauseKind, RunMode, thread_aggregate_id
from covonaut_es.domain._reviews import Decision, ReviewRequest
from covonaut_es.domain._submissions import InputSubmitted, InputTaken
from covonaut_es.domain._values import Interrupt, ToolOutcome
from covonaut_es.store._codec import aggregate_event_classes
from covonaut_es.workers._candidates import BUSY_RETRY, FAILED_RETRY, Candidates
from covonaut_es.workers._ready import (
    PARKED,
    STARTED_AS_STORED,
    TRACKED,
    ReadyThreads,
    Summary,
    _fold,
)
from covonaut_es.workers._step import Action

THREADS = ("t0", "t1", "t2", "t3")
STREAMS = {thread_aggregate_id(t): t for t in THREADS}
CALLS = ("c0", "c1")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _event(kind: str, thread_id: str, call: str) -> Any:
    """An event of the thread of ``kind``, naming ``call`` (and review ``r-<call>``)."""
    base: dict[str, Any] = {
        "originator_id": thread_aggregate_id(thread_id),
        "originator_version": 1,
        "timestamp": NOW,
    }
    review = f"r-{call}"
    match kind:
        case "started":
            topic = "covonaut_es.domain._thread:AgentThread"
            return AgentThread.Started(**base, originator_topic=topic, thread_id=thread_id)
        case "forked":
            return AgentThread.Forked(
                **base, thread_id=thread_id, parent_thread_id="p", parent_version=1, interrupts=()
            )
        case "submitted" | "taken":
            submissions = {**base, "originator_id": UUID(int=hash(thread_id) & (2**128 - 1))}
            if kind == "submitted":
                return InputSubmitted(**submissions, thread_id=thread_id, text="hi")
            return InputTaken(
                **submissions, thread_id=thread_id, submitted_version=1, thread_version=1
            )
        case "run_started":
            return AgentThread.RunStarted(**base, mode=RunMode.RUN)
        case "resumed":
            return AgentThread.Resumed(**base)
        case "interrupted":
            pause = Interrupt("r", tool_call_id=call, kind=PauseKind.REVIEW)
            return AgentThread.Interrupted(**base, interrupt=pause)
        case "review_requested":
            request = ReviewRequest(
                review_id=review,
                thread_id=thread_id,
                tool_name="pay",
                arguments={},
                digest="d",
                tool_call_id=call,
            )
            return AgentThread.ReviewRequested(**base, request=request)
        case "review_decided":
            fields = {"review_id": review, "digest": "d", "reviewer": "rita", "comment": ""}
            return AgentThread.ReviewDecided(**base, **fields, decision=Decision.APPROVED)
        case "answered":
            return AgentThread.InterruptAnswered(
                **base, tool_call_id=call, answer="a", answered_by="rita"
            )
        case "settled":
            return AgentThread.ToolCallSettled(
                **base, tool_call_id=call, tool_name="pay", content="", outcome=ToolOutcome.SETTLED
            )
        case "retry_run" | "retry_call":
            called = call if kind == "retry_call" else ""
            return AgentThread.RetryRequested(**base, tool_call_id=called, requested_by="rita")
        case "retried":
            return AgentThread.ToolCallRetried(**base, tool_call_id=call)
        case "finished":
            return AgentThread.RunFinished(**base, output="done")
        case "finished_checkpointed":
            return AgentThread.RunFinishedCheckpointed(**base, output="done", retain=0)
        case "failed":
            return AgentThread.RunFailed(**base, error_type="E", message="m")
        case "abandoned":
            return AgentThread.Abandoned(**base, reason="r")
    raise AssertionError(kind)


KINDS = (
    "started",
    "forked",
    "submitted",
    "taken",
    "run_started",
    "resumed",
    "interrupted",
    "review_requested",
    "review_decided",
    "answered",
    "settled",
    "retry_run",
    "retry_call",
    "retried",
    "finished",
    "finished_checkpointed",
    "failed",
    "abandoned",
)


@attrs.define
class Naive:
    """The definition: a summary of every thread the log named, never forgotten, and the
    worker's own knowledge (the steps it runs, the threads it found busy) beside it."""

    threads: dict[str, Summary] = attrs.Factory(dict)
    applied: dict[str, int] = attrs.Factory(dict)  # events applied, per thread
    running: dict[str, int] = attrs.Factory(dict)
    busy: dict[str, tuple[float, int]] = attrs.Factory(dict)

    def apply(self, thread_id: str, event: Any) -> None:
        # A thread started from another's state is what its own state says: here, its
        # summary as it stands; one never seen is one to look at.
        if not (isinstance(event, STARTED_AS_STORED) and thread_id in self.threads):
            _fold(self.threads.setdefault(thread_id, Summary()), event)
        self.applied[thread_id] = self.applied.get(thread_id, 0) + 1

    def candidates(self, now: float, *, once: bool) -> set[str]:
        found = set()
        for thread_id, summary in self.threads.items():
            if not summary.ready() or thread_id in self.running:
                continue
            busy = self.busy.get(thread_id)
            if busy is not None and busy[1] == self.applied[thread_id] and (once or now < busy[0]):
                continue
            found.add(thread_id)
        return found


class WorkerCandidates(RuleBasedStateMachine):
    """The worker's fold and its choice of candidates against :class:`Naive`."""

    def __init__(self) -> None:
        super().__init__()
        self.ready = ReadyThreads(STREAMS.get, self.recall)
        self.candidates = Candidates(self.ready)
        self.naive = Naive()
        self.now = 0.0

    def recall(self, stream: UUID) -> Summary | None:
        """What the thread says of itself: the naive summary, before the event being
        folded, without input (another stream counts it)."""
        kept = self.naive.threads.get(STREAMS[stream])
        if kept is None:
            return None
        return attrs.evolve(
            kept, paused_on=set(kept.paused_on), reviewed_calls=dict(kept.reviewed_calls), inputs=0
        )

    @rule(
        kind=st.sampled_from(KINDS), thread_id=st.sampled_from(THREADS), call=st.sampled_from(CALLS)
    )
    def event(self, kind: str, thread_id: str, call: str) -> None:
        event = _event(kind, thread_id, call)
        self.ready.apply(event)
        self.naive.apply(thread_id, event)

    @rule(data=st.data(), once=st.booleans())
    def start_step(self, data: st.DataObject, once: bool) -> None:
        chosen = self.candidates.next(1, self.now, once=once)
        if chosen:
            stream = chosen[0]
            thread_id = self.ready.thread_id(stream)
            assert thread_id is not None
            self.candidates.started(stream)
            self.naive.running[thread_id] = self.naive.applied[thread_id]

    @precondition(lambda self: self.candidates.running)
    @rule(
        data=st.data(),
        action=st.sampled_from([None, Action.NOTHING, Action.FAILED, Action.RESUMED]),
    )
    def finish_step(self, data: st.DataObject, action: Action | None) -> None:
        stream = data.draw(st.sampled_from(sorted(self.candidates.running)))
        thread_id = STREAMS[stream]
        self.candidates.finished(stream, action, self.now)
        seen = self.naive.running.pop(thread_id)
        self.naive.busy.pop(thread_id, None)
        if action is None:
            self.naive.busy[thread_id] = (self.now + BUSY_RETRY, seen)
        elif action is Action.FAILED:  # nothing may have recorded it: tried again later
            self.naive.busy[thread_id] = (self.now + FAILED_RETRY, seen)
        elif action is Action.NOTHING and self.naive.applied[thread_id] == seen:
            self.naive.threads[thread_id].status = PARKED

    @rule(seconds=st.sampled_from([0.1, BUSY_RETRY, FAILED_RETRY]))
    def tick(self, seconds: float) -> None:
        self.now += seconds

    @invariant()
    def ready_as_defined(self) -> None:
        found = {STREAMS[stream] for stream in self.ready.ready}
        assert found == {t for t, s in self.naive.threads.items() if s.ready()}

    @invariant()
    def candidates_as_defined(self) -> None:
        for once in (False, True):
            chosen = self.candidates.next(len(THREADS), self.now, once=once)
            assert len(chosen) == len(set(chosen))
            assert {STREAMS[s] for s in chosen} == self.naive.candidates(self.now, once=once)

    @invariant()
    def keeps_only_threads_with_work_outstanding(self) -> None:
        outstanding = [s for s in self.naive.threads.values() if not s.at_rest()]
        assert len(self.ready) <= len(outstanding)


WorkerCandidates.TestCase.settings = settings(
    max_examples=200, stateful_step_count=40, deadline=None
)
TestWorkerCandidates = WorkerCandidates.TestCase


def test_a_worker_follows_every_subclass_of_an_event_it_follows() -> None:
    """The log is filtered by topic, and a subclass has a topic of its own: one left out
    (a finish that saves its checkpoint, say) would never reach the fold."""
    for cls in aggregate_event_classes(AgentThread):
        if issubclass(cls, TRACKED):
            assert cls in TRACKED, cls


def test_a_thread_forgotten_at_rest_is_named_again_when_it_becomes_ready() -> None:
    """A finished thread is forgotten, and a run started by another runner makes it a
    candidate again under its own id, looked up from its stream."""
    looked_up: list[UUID] = []

    def name_of(stream: UUID) -> str | None:
        looked_up.append(stream)
        return STREAMS.get(stream)

    ready = ReadyThreads(name_of)
    for kind in ("started", "submitted", "taken", "run_started", "finished"):
        ready.apply(_event(kind, "t0", "c0"))
    assert len(ready) == 0 and not list(ready.ready)
    ready.apply(_event("run_started", "t0", "c0"))
    (stream,) = ready.ready
    assert ready.thread_id(stream) == "t0"
    assert ready.thread_id(stream) == "t0"
    assert looked_up == [stream]


RECALLING = ("review_decided", "answered", "settled", "retry_call", "retried", "submitted")


@pytest.mark.parametrize("kind", RECALLING)
def test_an_event_for_a_thread_forgotten_while_it_waited_is_folded_onto_what_it_says(
    kind: str,
) -> None:
    """A thread paused on two calls is forgotten; each event that deals with a pause, or
    brings input, is folded onto the thread's own state, as the fold that keeps every
    thread folds it."""
    machine = WorkerCandidates()
    for step in ("run_started", "review_requested", "interrupted"):
        for call in CALLS:
            machine.event(kind=step, thread_id="t0", call=call)
    assert len(machine.ready) == 0
    for call in CALLS:
        machine.event(kind=kind, thread_id="t0", call=call)
        machine.ready_as_defined()
        machine.candidates_as_defined()


def test_a_take_recorded_out_of_date_leaves_the_input_waiting_counted() -> None:
    """A take of an input a later take passed (a fenced-out runner's, written before
    takes were checked) is no take to the fold: input submitted after the run ended
    makes the thread ready, as the step that reads the submissions runs it."""
    ready = ReadyThreads(STREAMS.get)
    stream = UUID(int=1)

    def at(version: int, event: type, **fields: Any) -> Any:
        base = {"originator_id": stream, "originator_version": version, "timestamp": NOW}
        return event(**base, thread_id="t0", **fields)

    for event in (
        at(1, InputSubmitted, text="one"),
        at(2, InputSubmitted, text="two"),
        at(3, InputTaken, submitted_version=1, thread_version=0),
        at(4, InputTaken, submitted_version=2, thread_version=5),
        _event("finished", "t0", "c0"),
        at(5, InputTaken, submitted_version=1, thread_version=0),  # out of date
        at(6, InputSubmitted, text="three"),
    ):
        ready.apply(event)
    summary = ready.kept(thread_aggregate_id("t0"))
    assert summary is not None
    assert summary.inputs == 1
    assert list(ready.ready) == [thread_aggregate_id("t0")]
