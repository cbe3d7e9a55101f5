"""The reviewer's desk: what the inbox reads and decides, free of HTTP.

:class:`ReviewDesk` lists pending reviews from the reviewer queue, finds one review (in
the queue, or decided, in its thread's record), gathers a thread's history, and records
decisions through an ``Agent`` whose verifier establishes the reviewer from the
credential it is handed. Every method blocks; the web layer runs them in worker threads.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

import attrs

from covonaut_es.audit import AuditEntry, AuditReport
from covonaut_es.domain import Checkpoint, Review, ReviewDecision, ThreadTree
from covonaut_es.domain._reviews import review_reason
from covonaut_es.errors import ReviewNotFoundError, ThreadNotFoundError
from covonaut_es.messages import Message
from covonaut_es.projections import PendingReview, ReviewQueue
from covonaut_es.providers import ScriptedProvider
from covonaut_es.runtime import Agent, AgentConfig, CheckpointSettings, ReviewerVerifier
from covonaut_es.store import Store


class Action(enum.StrEnum):
    """What a reviewer can do with a pending review."""

    APPROVE = "approve"
    REJECT = "reject"
    RESPOND = "respond"


TEXT_FIELD: dict[Action, str] = {
    Action.APPROVE: "comment",
    Action.REJECT: "reason",
    Action.RESPOND: "answer",
}
"""The name each action gives its text, in the pages' forms and the API's bodies."""


class AmbiguousReviewError(ReviewNotFoundError):
    """A review id is pending in several threads (forks inherit pending reviews)."""


@attrs.frozen
class ReviewItem:
    """One review as the inbox shows it: the request, and its decision once decided."""

    review_id: str
    thread_id: str
    tool_name: str
    arguments: dict[str, Any]
    digest: str
    reason: str
    requested_at: datetime | None
    decision: ReviewDecision | None = None
    branch_parent: str | None = None

    @classmethod
    def pending(cls, item: PendingReview) -> ReviewItem:
        """From a queue item of a review request."""
        data = item.data if isinstance(item.data, dict) else {}
        arguments = data.get("arguments")
        return cls(
            review_id=item.review_id or "",
            thread_id=item.thread_id,
            tool_name=item.tool_name,
            arguments=arguments if isinstance(arguments, dict) else {},
            digest=item.digest or "",
            reason=item.reason,
            requested_at=item.requested_at,
            branch_parent=item.branch_parent,
        )

    @classmethod
    def recorded(cls, review: Review, thread_id: str, queued: PendingReview | None) -> ReviewItem:
        """From a thread's own record of a review (pending or decided), with the time
        the queue item (if still queued) says it was asked for."""
        request = review.request
        return cls(
            review_id=request.review_id,
            thread_id=thread_id,
            tool_name=request.tool_name,
            arguments=request.arguments,
            digest=request.digest,
            reason=review_reason(request),
            requested_at=queued.requested_at if queued else None,
            decision=review.decision,
            branch_parent=queued.branch_parent if queued else None,
        )

    def to_json(self) -> dict[str, Any]:
        """The review as the JSON API gives it."""
        decision = self.decision
        return {
            "review_id": self.review_id,
            "thread_id": self.thread_id,
            "tool_name": self.tool_name,
            "arguments": self.arguments,
            "reason": self.reason,
            "digest": self.digest,
            "requested_at": self.requested_at.isoformat() if self.requested_at else None,
            "status": "pending" if decision is None else str(decision.decision),
            "decision": None if decision is None else decision_json(decision),
        }


def decision_json(decision: ReviewDecision) -> dict[str, Any]:
    """A recorded decision as the JSON API gives it."""
    return {
        "review_id": decision.review_id,
        "thread_id": decision.thread_id,
        "decision": str(decision.decision),
        "reviewer": decision.reviewer,
        "digest": decision.digest,
        "comment": decision.comment,
        "arguments": decision.arguments,
        "decided_at": decision.decided_at.isoformat(),
    }


@attrs.frozen
class Page:
    """One page of the inbox: the reviews shown, and how many match in all."""

    items: tuple[ReviewItem, ...]
    total: int
    number: int
    size: int

    @property
    def last(self) -> int:
        """The number of the last page (1 when nothing matches)."""
        return max(1, -(-self.total // self.size))


@attrs.frozen
class ThreadView:
    """What the thread page shows."""

    thread_id: str
    status: str
    timeline: tuple[AuditEntry, ...]
    checkpoints: tuple[Checkpoint, ...]
    tree: ThreadTree
    audit: AuditReport


class ReviewDesk:
    """Reads the queue and the store, and records verified decisions.

    Args:
        store: The store the reviews' threads live in.
        queue: The reviewer queue of that store, followed by the caller.
        verifier: Establishes the reviewer of every decision from its credential.
    """

    def __init__(self, store: Store, queue: ReviewQueue, verifier: ReviewerVerifier) -> None:
        self.store = store
        self.queue = queue
        self.verifier = verifier

    def position(self) -> int:
        """The queue's log position: it changes whenever the queue may have."""
        return self.queue.position()

    def reviews(self) -> tuple[ReviewItem, ...]:
        """Every pending review request, oldest first (interrupts of tools that are not
        reviews are not decided here)."""
        return tuple(ReviewItem.pending(i) for i in self.queue.pending() if i.review_id)

    def page(
        self, *, thread: str = "", tool: str = "", newest_first: bool = False, number: int = 1,
        size: int = 50,
    ) -> Page:  # fmt: skip
        """One page of the pending reviews, filtered by thread and tool (only the
        page's items are converted, so a long queue costs one pass)."""
        items = [
            item
            for item in self.queue.pending()
            if item.review_id
            and (not thread or item.thread_id == thread)
            and (not tool or item.tool_name == tool)
        ]
        if newest_first:
            items.reverse()
        number = max(1, number)
        start = (number - 1) * size
        shown = tuple(ReviewItem.pending(item) for item in items[start : start + size])
        return Page(shown, len(items), number, size)

    def review(self, review_id: str, thread_id: str | None = None) -> ReviewItem:
        """The review with that id, as its thread records it now (the queue, which may
        lag behind, only says which thread has it pending when none is named).

        Raises:
            ReviewNotFoundError: No such review (in that thread).
            AmbiguousReviewError: Pending in several threads and none named.
        """
        queued = [
            item
            for item in self.queue.pending()
            if review_id and item.review_id == review_id and thread_id in (None, item.thread_id)
        ]
        if thread_id is None and len(queued) > 1:
            threads = ", ".join(repr(item.thread_id) for item in queued)
            msg = (
                f"review {review_id!r} is pending in several threads ({threads}): a fork "
                "inherits its parent's pending reviews; name the thread with ?thread=ID"
            )
            raise AmbiguousReviewError(msg)
        thread_id = (
            thread_id if thread_id is not None else (queued[0].thread_id if queued else None)
        )
        if thread_id is not None and self.store.exists(thread_id):
            for review in self.store.state_at(thread_id).reviews:
                if review.request.review_id == review_id:
                    return ReviewItem.recorded(review, thread_id, queued[0] if queued else None)
        where = "any pending review" if thread_id is None else f"thread {thread_id!r}"
        msg = f"no review {review_id!r} in {where}; a decided review is found with ?thread=ID"
        raise ReviewNotFoundError(msg)

    def messages(self, thread_id: str, last: int = 8) -> tuple[Message, ...]:
        """The thread's last messages, for context."""
        return self.store.state_at(thread_id).messages[-last:]

    def decide(
        self,
        item: ReviewItem,
        action: Action,
        credential: str,
        *,
        text: str = "",
        arguments: dict[str, Any] | None = None,
    ) -> ReviewDecision:
        """Record a decision of the reviewer ``credential`` verifies as; ``text`` is the
        comment, the reason or the answer.

        Raises:
            ReviewerNotVerifiedError: The credential does not verify; nothing is recorded.
            StaleReviewError: The review was decided already; nothing is recorded.
        """
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider(),  # deciding never calls a model
                reviewer_verifier=self.verifier,
                checkpoint=CheckpointSettings(store=self.store, thread_id=item.thread_id),
            )
        )
        if action is Action.APPROVE:
            return agent.approve(
                item.review_id, reviewer=credential, comment=text, arguments=arguments
            )
        if action is Action.REJECT:
            return agent.reject(item.review_id, reviewer=credential, reason=text)
        return agent.respond(item.review_id, reviewer=credential, answer=text)

    def thread(self, thread_id: str) -> ThreadView:
        """The thread page's content.

        Raises:
            ThreadNotFoundError: No such thread (said without the store's location,
                which is the operator's business, not the reviewer's).
        """
        if not self.store.exists(thread_id):
            raise ThreadNotFoundError(f"no thread {thread_id!r}")
        state = self.store.state_at(thread_id)
        root = self.store.path_to_root(thread_id)[-1]
        return ThreadView(
            thread_id=thread_id,
            status=str(state.status),
            timeline=tuple(self.store.replay(thread_id)),
            checkpoints=state.checkpoints,
            tree=self.store.tree(root),
            audit=self.store.verify(thread_id),
        )

    def reachable(self) -> bool:
        """Whether the store answers a read."""
        try:
            next(self.store.thread_ids(), None)
        except Exception:
            return False
        return True
