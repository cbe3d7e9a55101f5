"""Which threads are ready to run, folded from the store's log.

:class:`ReadyThreads` keeps a small summary per thread from the few event types that
change whether it can run (:data:`TRACKED`), and the set of threads that look ready.
It only chooses which threads to look at: the worker decides what to do from the
thread itself, loaded under its lease.
"""

from __future__ import annotations

from typing import Any

import attrs

from covonaut_es.domain import AgentThread
from covonaut_es.domain._submissions import InputSubmitted, InputTaken

TRACKED: tuple[type, ...] = (
    AgentThread.Started,
    AgentThread.StartedFromState,
    AgentThread.Forked,
    AgentThread.RunStarted,
    AgentThread.Resumed,
    AgentThread.Interrupted,
    AgentThread.ReviewRequested,
    AgentThread.ReviewDecided,
    AgentThread.ReviewApprovedWithEdits,
    AgentThread.ReviewResponded,
    AgentThread.ReviewExpired,
    AgentThread.RunFinished,
    AgentThread.RunFailed,
    AgentThread.Abandoned,
    AgentThread.ToolCallSettled,
    AgentThread.ToolCallRetried,
    AgentThread.InterruptAnswered,
    AgentThread.RetryRequested,
    InputSubmitted,
    InputTaken,
)
"""The event types a worker follows in the log. The log is filtered by topic, and a
subclass has a topic of its own: each decision event is listed."""

# What the log says of a thread's last run.
IDLE, RUNNING, PAUSED, ENDED, ABANDONED, UNKNOWN, PARKED = (
    "idle",
    "running",
    "paused",
    "ended",
    "abandoned",
    "unknown",
    "parked",
)


@attrs.define
class _Summary:
    status: str = IDLE
    paused_on: set[str] = attrs.Factory(set)  # calls of pauses no person dealt with yet
    reviewed_calls: dict[str, str] = attrs.Factory(dict)  # review id -> the call it holds
    retry_asked: bool = False  # a person asked for the failed run to be tried again
    submitted: int = 0
    taken: int = 0
    seen: int = 0  # events applied: a step may park the thread only if none came since

    def ready(self) -> bool:
        if self.status in (ABANDONED, PARKED):
            return False
        if self.status in (RUNNING, UNKNOWN):
            return True  # its runner may have died, or the log alone cannot tell
        if self.status == PAUSED:
            return not self.paused_on
        return self.retry_asked or self.submitted > self.taken


class ReadyThreads:
    """Per-thread summaries of the log and the threads that look ready."""

    def __init__(self) -> None:
        self._names: dict[Any, str] = {}  # aggregate id -> thread id
        self._threads: dict[str, _Summary] = {}
        self.ready: set[str] = set()

    def apply(self, event: Any) -> None:
        """Fold one event of a :data:`TRACKED` type."""
        if isinstance(event, InputSubmitted | InputTaken):
            thread_id = event.thread_id
        elif isinstance(event, AgentThread.Started | AgentThread.Forked):
            thread_id = self._names[event.originator_id] = event.thread_id
        else:
            found = self._names.get(event.originator_id)
            if found is None:
                return  # a thread whose first event this worker did not see
            thread_id = found
        summary = self._threads.setdefault(thread_id, _Summary())
        _fold(summary, event)
        summary.seen += 1
        self._update(thread_id, summary)

    def seen(self, thread_id: str) -> int:
        """How many of the thread's events were applied."""
        summary = self._threads.get(thread_id)
        return summary.seen if summary else 0

    def park(self, thread_id: str, seen: int) -> None:
        """Stop looking at a thread with nothing to run until its next event, unless
        an event came after ``seen``."""
        summary = self._threads.get(thread_id)
        if summary is not None and summary.seen == seen:
            summary.status = PARKED
            self._update(thread_id, summary)

    def _update(self, thread_id: str, summary: _Summary) -> None:
        if summary.ready():
            self.ready.add(thread_id)
        else:
            self.ready.discard(thread_id)


def _fold(summary: _Summary, event: Any) -> None:
    match event:
        case InputSubmitted():
            summary.submitted += 1
            if summary.status == PARKED:
                summary.status = UNKNOWN
        case InputTaken():
            summary.taken += 1
            summary.status = RUNNING  # its run starts next, or its runner died first
        case AgentThread.StartedFromState() | AgentThread.Forked():
            summary.status = UNKNOWN
        case AgentThread.Started():
            summary.status = IDLE
        case AgentThread.RunStarted():
            summary.status, summary.retry_asked = RUNNING, False
        case AgentThread.Resumed():
            summary.status = RUNNING
            summary.paused_on.clear()
            summary.reviewed_calls.clear()
        case AgentThread.Interrupted(interrupt=interrupt):
            summary.status = PAUSED
            summary.paused_on.add(interrupt.tool_call_id)
        case AgentThread.ReviewRequested(request=request):
            summary.reviewed_calls[request.review_id] = request.tool_call_id
        case AgentThread.ReviewDecided(review_id=review_id):
            _dealt_with(summary, summary.reviewed_calls.get(review_id, ""))
        case AgentThread.InterruptAnswered(tool_call_id=call_id):
            _dealt_with(summary, call_id)
        case AgentThread.RetryRequested(tool_call_id=""):
            summary.retry_asked = True
            if summary.status == PARKED:
                summary.status = ENDED
        case (
            AgentThread.RetryRequested(tool_call_id=call_id)
            | AgentThread.ToolCallSettled(tool_call_id=call_id)
        ):
            _dealt_with(summary, call_id)
        case AgentThread.RunFinished() | AgentThread.RunFailed():
            summary.status = ENDED
        case AgentThread.Abandoned():
            summary.status = ABANDONED
        case _:  # a call in doubt was retried: look again
            summary.status = UNKNOWN


def _dealt_with(summary: _Summary, call_id: str) -> None:
    """A person dealt with the pause on ``call_id``."""
    summary.paused_on.discard(call_id)
    if summary.status == PARKED:
        summary.status = PAUSED
