"""Which threads are ready to run, folded from the store's log.

:class:`ReadyThreads` keeps a small summary per thread from the few event types that
change whether it can run (:data:`TRACKED`), and the set of threads that look ready.
It only chooses which threads to look at: the worker decides what to do from the
thread itself, loaded under its lease. Threads are kept by stream id; a summary is
dropped once the thread has nothing for a worker to do until its next event (it ended
or waits for a person), so memory follows the threads ready, running, holding input or
given up, not every thread the log names (ADR 0077).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any
from uuid import UUID

import attrs

from covonaut_es.domain import AgentThread, ThreadStatus, thread_aggregate_id
from covonaut_es.domain._submissions import InputSubmitted, InputTaken, takes_further

TRACKED: tuple[type, ...] = (
    AgentThread.Started,
    AgentThread.StartedWithInput,
    AgentThread.StartedFromState,
    AgentThread.Forked,
    AgentThread.RunStarted,
    AgentThread.RunStartedWithInput,
    AgentThread.Resumed,
    AgentThread.Interrupted,
    AgentThread.ReviewRequested,
    AgentThread.ReviewDecided,
    AgentThread.ReviewApprovedWithEdits,
    AgentThread.ReviewResponded,
    AgentThread.ReviewExpired,
    AgentThread.RunFinished,
    AgentThread.RunFinishedCheckpointed,
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
subclass has a topic of its own: each is listed (the decisions, a finish that saves its
turn's checkpoint)."""


RECALLED = (
    AgentThread.ReviewDecided,
    AgentThread.InterruptAnswered,
    AgentThread.ToolCallSettled,
    AgentThread.RetryRequested,
    AgentThread.ToolCallRetried,
    InputSubmitted,
)
"""The events whose fold keeps what the summary knew of the thread's pauses (a person's
answer to a pause, a request to try again, a call in doubt run again, input): for a
thread the fold forgot, they are folded onto what the thread itself says (ADR 0077).
(A decision's subclasses are ReviewDecided's.)"""

STARTED_AS_STORED = (AgentThread.Forked, AgentThread.StartedFromState)
"""The first events of a thread that starts from another's state (a fork's parent, a
saved state): what the thread holds then, pauses included, is its own state, recalled,
rather than one to look at."""

_NAMING = (InputSubmitted, InputTaken, AgentThread.Started, AgentThread.Forked)
"""The events that name their thread."""


def stream_of(event: Any) -> UUID:
    """The domain stream id of the thread a :data:`TRACKED` event is about."""
    if isinstance(event, InputSubmitted | InputTaken):  # the submissions' stream
        return thread_aggregate_id(event.thread_id)
    stream: UUID = event.originator_id
    return stream


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
class Summary:
    thread_id: str | None = None  # None until an event or a lookup names the thread
    status: str = IDLE
    paused_on: set[str] = attrs.Factory(set)  # calls of pauses no person dealt with yet
    reviewed_calls: dict[str, str] = attrs.Factory(dict)  # review id -> the call it holds
    retry_asked: bool = False  # a person asked for the failed run to be tried again
    inputs: int = 0  # submitted and not yet taken
    taken: int = 0  # the submissions' stream version of the latest input taken
    seen: int = 0  # the last event applied: a step may park the thread only if none came since

    def ready(self) -> bool:
        if self.status in (ABANDONED, PARKED):
            return False
        if self.status in (RUNNING, UNKNOWN):
            return True  # its runner may have died, or the log alone cannot tell
        if self.status == PAUSED:
            return not self.paused_on
        return self.retry_asked or self.inputs > 0

    def at_rest(self) -> bool:
        """Whether the summary can be forgotten, and made again at the thread's next
        event: the thread is not ready, and what the summary knows is what the thread
        itself says (:func:`summary_of`), which :class:`ReadyThreads` reads back when
        an event comes that needs it. So a thread waiting for a person is forgotten
        too, instead of kept for as long as the person takes; not one holding input,
        which another stream counts. A thread given up is kept, so that input sent
        to it makes no worker look."""
        return (
            self.status in (IDLE, ENDED, PAUSED)
            and not self.ready()
            and not (self.retry_asked or self.inputs)
        )


class ReadyThreads:
    """Per-thread summaries of the log and the threads that look ready.

    Only the threads a worker has to look at, or must not, are kept (ready, running,
    parked by the worker, holding input or a request to try again, given up): a thread
    whose runs all ended or that waits for a person is forgotten
    (:meth:`Summary.at_rest`). Memory follows those threads, not every thread the log
    names.

    Args:
        name_of: The thread id of a stream id; asked only for a thread that became
            ready at an event that does not name it (once its summary was forgotten).
            None when no thread has that stream.
        recall: What a thread itself says (:func:`summary_of` of it, as stored now),
            asked when an event of :data:`RECALLED` comes for a thread it forgot, and at
            a thread's start of :data:`STARTED_AS_STORED`; None when no thread has that
            stream. By default nothing is recalled: a fold that
            keeps every thread it may need, as the test's reference does.
    """

    def __init__(
        self,
        name_of: Callable[[UUID], str | None],
        recall: Callable[[UUID], Summary | None] = lambda _: None,
    ) -> None:
        self._name_of = name_of
        self._recall = recall
        self._threads: dict[UUID, Summary] = {}
        # The threads ready, each with the number of its entry in the queue of the order
        # they became ready; an entry is stale once its thread left (or came again).
        # Not a dict alone: one emptied from its front keeps its holes, so each walk
        # from the front would pass over every thread already stepped.
        self._ready: dict[UUID, int] = {}
        self._order: deque[tuple[UUID, int]] = deque()
        self._entries = 0
        self._applied = 0

    @property
    def ready(self) -> Iterator[UUID]:
        """The stream ids of the threads that look ready, in the order they became
        ready. Costs the threads walked past, and the stale entries among them."""
        order, ready = self._order, self._ready
        while order and ready.get(order[0][0]) != order[0][1]:
            order.popleft()  # a thread stepped, or changed, since
        return (stream for stream, entry in order if ready.get(stream) == entry)

    def __len__(self) -> int:
        """How many threads are kept."""
        return len(self._threads)

    def apply(self, event: Any) -> None:
        """Fold one event of a :data:`TRACKED` type."""
        stream = stream_of(event)
        summary = self._threads.get(stream)
        if isinstance(event, STARTED_AS_STORED):
            recalled = self._recall(stream)
            if recalled is not None:  # the thread's own state stands for the event's
                recalled.inputs = summary.inputs if summary else 0
                recalled.taken = summary.taken if summary else 0
                self.restore(stream, recalled)
                return
        if summary is None:
            recalled = self._recall(stream) if isinstance(event, RECALLED) else None
            summary = self._threads[stream] = recalled or Summary()
        if isinstance(
            event, InputSubmitted | InputTaken | AgentThread.Started | AgentThread.Forked
        ):
            summary.thread_id = event.thread_id  # the domain checked it names the stream
        _fold(summary, event)
        self._applied += 1
        summary.seen = self._applied
        self._update(stream, summary)

    def kept(self, stream: UUID) -> Summary | None:
        """The summary kept of a thread; None when it is at rest (forgotten)."""
        return self._threads.get(stream)

    def restore(self, stream: UUID, summary: Summary) -> None:
        """Keep a summary :meth:`kept` gave, as if its events were folded now."""
        self._applied += 1
        summary.seen = self._applied
        self._threads[stream] = summary
        self._update(stream, summary)

    def seen(self, stream: UUID) -> int:
        """The last event applied to the thread (0: none is kept)."""
        summary = self._threads.get(stream)
        return summary.seen if summary else 0

    def thread_id(self, stream: UUID) -> str | None:
        """The thread id of a ready stream; None when no thread has it (it is
        forgotten)."""
        summary = self._threads.get(stream)
        if summary is None:
            return None
        if summary.thread_id is None:
            summary.thread_id = self._name_of(stream)
            if summary.thread_id is None:
                del self._threads[stream]
                if self._ready.pop(stream, None) is not None:
                    self._compact()
        return summary.thread_id

    def park(self, stream: UUID, seen: int) -> None:
        """Stop looking at a thread with nothing to run until its next event, unless
        an event came after ``seen``."""
        summary = self._threads.get(stream)
        if summary is not None and summary.seen == seen:
            summary.status = PARKED
            self._update(stream, summary)

    def _update(self, stream: UUID, summary: Summary) -> None:
        if summary.ready():
            if stream not in self._ready:
                self._entries += 1
                self._ready[stream] = self._entries
                self._order.append((stream, self._entries))
            return
        if self._ready.pop(stream, None) is not None:
            self._compact()
        if summary.at_rest():
            del self._threads[stream]

    def _compact(self) -> None:
        """Drop the stale entries of the queue once they outnumber the live ones: each
        entry is copied at most once for every entry that went stale, so the queue
        keeps memory and walks in proportion to the threads ready."""
        if len(self._order) > 2 * len(self._ready) + 64:
            ready = self._ready
            self._order = deque((s, e) for s, e in self._order if ready.get(s) == e)


_STATUSES = {
    ThreadStatus.RUNNING: RUNNING,
    ThreadStatus.INTERRUPTED: PAUSED,
    ThreadStatus.FINISHED: ENDED,
    ThreadStatus.ERROR: ENDED,
    ThreadStatus.ABANDONED: ABANDONED,
}


def summary_of(thread: AgentThread) -> Summary:
    """What ``thread`` itself says: the summary its events fold to, without the input
    waiting for it (which its submissions' stream holds)."""
    status = _STATUSES.get(thread.status, IDLE)
    paused_on = {p.interrupt.tool_call_id for p in thread.pauses if not p.resolved}
    return Summary(
        thread_id=thread.thread_id,
        status=status,
        paused_on=paused_on if status == PAUSED else set(),
        reviewed_calls={
            r.request.review_id: r.request.tool_call_id for r in thread.reviews.pending
        },
        retry_asked=thread.retry_requested,
    )


def _fold(summary: Summary, event: Any) -> None:
    match event:
        case InputSubmitted():
            summary.inputs += 1
            if summary.status == PARKED:
                summary.status = UNKNOWN
        case InputTaken() if summary.inputs and takes_further(event, summary.taken):
            summary.inputs -= 1
            summary.taken = event.submitted_version
            _begun(summary, RUNNING)  # its run starts next, or its runner died first
        case InputTaken():
            pass  # out of date: another runner took this input, or a later one, first
        case AgentThread.StartedFromState() | AgentThread.Forked():
            _begun(summary, UNKNOWN)
        case AgentThread.RunStarted():  # a StartedWithInput too: its thread's run began
            _begun(summary, RUNNING)
            summary.retry_asked = False
        case AgentThread.Started():
            _begun(summary, IDLE)
        case AgentThread.Resumed():
            _begun(summary, RUNNING)
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


def _begun(summary: Summary, status: str) -> None:
    """A thread, a run or a resume began: no pause before it still holds the thread
    (a summary made anew at this event, the thread forgotten, knows of none either)."""
    summary.status = status
    summary.paused_on.clear()
    summary.reviewed_calls.clear()


def _dealt_with(summary: Summary, call_id: str) -> None:
    """A person dealt with the pause on ``call_id``."""
    summary.paused_on.discard(call_id)
    if summary.status == PARKED:
        summary.status = PAUSED
