"""Which threads hold a review whose deadline is due, folded from the store's log.

:class:`ReviewDeadlines` keeps the deadline of every pending review the log shows
(asked for in a thread, or inherited by a fork) and whether a notice of its nearing
deadline was recorded. It only chooses which threads a worker sweeps: the expiry and
the notice are commands of :class:`~covonaut_es.service.ThreadService`, which decide
from the thread itself, by the service's clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import attrs

from covonaut_es.domain import AgentThread, PauseKind, near

DEADLINE_TRACKED: tuple[type, ...] = (
    AgentThread.Forked,
    AgentThread.ReviewRequested,
    AgentThread.ReviewDecided,
    AgentThread.ReviewApprovedWithEdits,
    AgentThread.ReviewResponded,
    AgentThread.ReviewExpired,
    AgentThread.ReviewDeadlineNear,
    AgentThread.Abandoned,
)
"""The event types the deadlines follow (each decision event is listed: the log is
filtered by topic)."""


def _comparable(deadline: datetime) -> bool:
    """Whether a deadline from the log compares with the clock's times: a naive one
    (which no clock the library accepts writes, but a writer of the database may) is
    passed over rather than stop the sweep of every thread."""
    return deadline.utcoffset() is not None


@attrs.define
class _Waiting:
    deadline: datetime
    noted: bool = False


class ReviewDeadlines:
    """The pending reviews with a deadline, per thread, as the log tells them; only the
    threads holding any are kept."""

    def __init__(self) -> None:
        self._names: dict[Any, str] = {}  # aggregate id -> thread id, of threads kept
        self._waiting: dict[str, dict[str, _Waiting]] = {}

    def apply(self, event: Any) -> None:
        """Fold one event of a :data:`DEADLINE_TRACKED` type."""
        match event:
            case AgentThread.Forked(thread_id=thread_id, interrupts=interrupts):
                for interrupt in interrupts:
                    if interrupt.kind is PauseKind.REVIEW and isinstance(interrupt.data, dict):
                        self._inherit(event.originator_id, thread_id, interrupt.data)
            case AgentThread.ReviewRequested(request=request) if (
                request.deadline is not None and _comparable(request.deadline)
            ):
                self._names[event.originator_id] = request.thread_id
                waiting = self._waiting.setdefault(request.thread_id, {})
                waiting[request.review_id] = _Waiting(request.deadline)
            case AgentThread.ReviewDecided(review_id=review_id):
                waiting = self._of(event)
                waiting.pop(review_id, None)
                if not waiting:
                    self._forget(event.originator_id)
            case AgentThread.ReviewDeadlineNear(review_id=review_id):
                found = self._of(event).get(review_id)
                if found is not None:
                    found.noted = True
            case AgentThread.Abandoned():
                self._forget(event.originator_id)

    def kept(self, stream: Any) -> tuple[str, dict[str, tuple[datetime, bool]]] | None:
        """The thread id of a stream and its pending reviews' deadlines and notices;
        None when it holds none."""
        name = self._names.get(stream)
        waiting = self._waiting.get(name or "")
        if name is None or not waiting:
            return None
        return name, {review: (w.deadline, w.noted) for review, w in waiting.items()}

    def restore(
        self, stream: Any, thread_id: str, waiting: dict[str, tuple[datetime, bool]]
    ) -> None:
        """Keep a thread's pending reviews as :meth:`kept` gave them."""
        kept = {
            review: _Waiting(deadline, noted)
            for review, (deadline, noted) in waiting.items()
            if _comparable(deadline)
        }
        if kept:
            self._names[stream] = thread_id
            self._waiting[thread_id] = kept

    def __len__(self) -> int:
        """How many threads are kept."""
        return len(self._names)

    def due(self, now: datetime, lead: timedelta | None) -> tuple[str, ...]:
        """The threads with a review past its deadline at ``now``, or (with a ``lead``)
        one expiring within it whose notice is not recorded yet."""
        return tuple(
            thread_id
            for thread_id, waiting in self._waiting.items()
            if any(
                now >= w.deadline
                or (lead is not None and not w.noted and near(w.deadline, now, lead))
                for w in waiting.values()
            )
        )

    def swept(self, thread_id: str, now: datetime, lead: timedelta | None) -> None:
        """A sweep of the thread at ``now`` went through: its reviews nearing their
        deadline need no other (a fork's may have been noted in its parent)."""
        for waiting in self._waiting.get(thread_id, {}).values():
            if lead is not None and near(waiting.deadline, now, lead):
                waiting.noted = True

    def _of(self, event: Any) -> dict[str, _Waiting]:
        return self._waiting.get(self._names.get(event.originator_id, ""), {})

    def _forget(self, stream: Any) -> None:
        self._waiting.pop(self._names.pop(stream, ""), None)

    def _inherit(self, stream: Any, thread_id: str, data: dict[str, Any]) -> None:
        # A fork's interrupt repeats its parent's request as JSON data: read leniently,
        # as it only chooses what to sweep (the thread itself decides).
        review_id, deadline = data.get("review_id"), data.get("deadline")
        if not isinstance(review_id, str) or not isinstance(deadline, str):
            return
        try:
            when = datetime.fromisoformat(deadline)
        except ValueError:
            return
        if not _comparable(when):
            return
        self._names[stream] = thread_id
        self._waiting.setdefault(thread_id, {})[review_id] = _Waiting(when)
