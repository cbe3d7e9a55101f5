"""What the inbox shows: a review, a pause in the list, one pause's page, one thread's
page, and a page of the list, each made from the queue or a thread's record."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import attrs
import msgspec

from covonaut_es.audit import AuditEntry, AuditReport
from covonaut_es.domain import (
    Checkpoint,
    Decision,
    Pause,
    PauseKind,
    PendingToolCall,
    ReviewDecision,
    ReviewRules,
    ThreadTree,
    ToolPin,
    may_decide,
    may_offer_edit,
    same_reviewer,
)
from covonaut_es.domain._reviews import DEFAULT_RULES, review_reason
from covonaut_es.messages import Message
from covonaut_es.projections import PendingReview, tool_json
from covonaut_es.service import FoundReview, Reviewer

_FORMS = {Decision.APPROVED: "approve", Decision.REJECTED: "reject", Decision.RESPONDED: "respond"}
"""The review page's form of each decision."""


@attrs.frozen
class ReviewItem:
    """One review as the inbox shows it: the request, and its decision once decided.

    ``rules`` are what its tool's review policy allows; ``approvals``, under four eyes,
    the first reviewer's approval in part while the review waits for a second;
    ``run_on_approval``, whether an approval runs the call itself when the thread next
    runs (no model call in between); ``edit_offered``, whether an approval may edit the
    arguments (:func:`~covonaut_es.domain.may_offer_edit`), known from the thread's own
    record of the review (False for a queue item).
    """

    review_id: str
    thread_id: str
    tool_name: str
    arguments: dict[str, Any]
    digest: str
    reason: str
    requested_at: datetime | None
    decision: ReviewDecision | None = None
    branch_parent: str | None = None
    tool: ToolPin | None = None
    tool_changed: str = ""
    deadline: datetime | None = None
    rules: ReviewRules = DEFAULT_RULES
    approvals: tuple[ReviewDecision, ...] = ()
    run_on_approval: bool = False
    given_up: bool = False
    edit_offered: bool = False

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
            tool=item.tool,
            tool_changed=item.tool_changed,
            deadline=item.deadline,
            rules=item.rules,
            run_on_approval=data.get("run_on_approval") is True,
        )

    @classmethod
    def recorded(cls, found: FoundReview, queued: PendingReview | None) -> ReviewItem:
        """From a thread's own record of a review (pending or decided), with the time
        the queue item (if still queued) says it was asked for; ``given_up`` when its
        thread was abandoned before anyone decided it."""
        review, thread_id = found.review, found.thread_id
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
            tool=request.tool,
            tool_changed=request.tool_changed,
            deadline=request.deadline,
            rules=request.rules or DEFAULT_RULES,
            approvals=review.approvals,
            run_on_approval=request.run_on_approval,
            given_up=review.pending and not found.awaiting,
            edit_offered=may_offer_edit(review),
        )

    def actions(self, reviewer: Reviewer) -> frozenset[str]:
        """The review page's forms ``reviewer`` is offered: of ``approve``,
        ``approve-edited``, ``respond`` and ``reject``, those the review's rules allow
        them (none once decided). Only what is offered: the decision is checked when it
        is recorded."""
        rules = self.rules
        if self.decision is not None or self.given_up or not may_decide(rules, reviewer.scopes):
            return frozenset()
        actions = {_FORMS[decision] for decision in rules.decisions}
        if "approve" in actions and any(
            same_reviewer(a.reviewer, reviewer.id) for a in self.approvals
        ):
            actions.discard("approve")  # a second, different reviewer approves
        if "approve" in actions and self.edit_offered:
            actions.add("approve-edited")
        return frozenset(actions)

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
            "status": self._status(),
            "decision": None if decision is None else decision_json(decision),
            "server": None if self.tool is None else tool_json(self.tool),
            "tool_changed": self.tool_changed,
            "deadline": self.deadline.isoformat() if self.deadline else None,
            "run_on_approval": self.run_on_approval,
            "policy": {
                "decisions": [str(d) for d in self.rules.decisions],
                "editable": None if self.rules.editable is None else list(self.rules.editable),
                "description": self.rules.description,
                "scopes": list(self.rules.scopes),
                "limits": [msgspec.to_builtins(limit) for limit in self.rules.limits],
                "four_eyes": self.rules.four_eyes,
            },
            "approvals": [decision_json(a) for a in self.approvals],
        }

    def _status(self) -> str:
        if self.decision is not None:
            return str(self.decision.decision)
        return "given up" if self.given_up else "pending"


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
        "partial": decision.partial,
    }


@attrs.frozen
class PendingItem:
    """One pause waiting for a person, as the inbox lists it.

    Attributes:
        kind: What it waits for: a review, a tool's pause, or a call in doubt.
        thread_id: The paused thread.
        tool_call_id: The paused call.
        tool_name: Its tool.
        reason: Why the run paused.
        details: What the list shows of it: a review's arguments, a call in doubt's
            arguments as the model wrote them, or the data a tool paused with.
        data: The pause's data.
        requested_at: When the run paused.
        review_id: A review's id ("" for other pauses).
        digest: A review's operation digest ("" for other pauses).
        branch_parent: For a pause a fork inherited, the thread it came from.
        deadline: For a review with a deadline, when it expires.
        pause: The pause's token (:func:`~covonaut_es.service.pause_token`), which a
            command on it sends so as to act on this pause only ("" when the thread
            has moved on since the queue listed it).
    """

    kind: PauseKind
    thread_id: str
    tool_call_id: str
    tool_name: str
    reason: str
    details: Any
    data: Any
    requested_at: datetime
    review_id: str = ""
    digest: str = ""
    branch_parent: str | None = None
    deadline: datetime | None = None
    pause: str = ""

    @classmethod
    def queued(cls, item: PendingReview) -> PendingItem:
        """From a queue item."""
        data = item.data if isinstance(item.data, dict) else {}
        details = data.get("arguments") if item.kind is not PauseKind.INTERRUPT else item.data
        return cls(
            kind=item.kind,
            thread_id=item.thread_id,
            tool_call_id=item.tool_call_id,
            tool_name=item.tool_name,
            reason=item.reason,
            details=details,
            data=item.data,
            requested_at=item.requested_at,
            review_id=item.review_id or "",
            digest=item.digest or "",
            branch_parent=item.branch_parent,
            deadline=item.deadline,
        )

    def to_json(self) -> dict[str, Any]:
        """The pause as the JSON API lists it."""
        return {
            "kind": str(self.kind),
            "thread_id": self.thread_id,
            "tool_call_id": self.tool_call_id,
            "tool_name": self.tool_name,
            "reason": self.reason,
            "data": self.data,
            "requested_at": self.requested_at.isoformat(),
            "review_id": self.review_id or None,
            "digest": self.digest or None,
            "branch_parent": self.branch_parent,
            "deadline": self.deadline.isoformat() if self.deadline else None,
            "pause": self.pause or None,
        }


@attrs.frozen
class Page:
    """One page of the inbox: the pauses shown, and how many match in all."""

    items: tuple[PendingItem, ...]
    total: int
    number: int
    size: int

    @property
    def last(self) -> int:
        """The number of the last page (1 when nothing matches)."""
        return max(1, -(-self.total // self.size))


@attrs.frozen
class PauseView:
    """What the page of one pause shows, as its thread records it now.

    Attributes:
        thread_id: The thread.
        status: The thread's status.
        pause: The pause, and whether a person has dealt with it.
        call: For a call in doubt not yet settled, the open call (its arguments and
            idempotency key, which a person checks the external system for).
        messages: The thread's last messages; None when they are hidden from the
            reviewer (the thread asked for a review outside their scopes).
        token: The pause's token, which the page's forms send: they act on this pause
            only, never on a later one of the same call.
        actionable: Whether a person can still act on it here (its thread's
            ``awaiting_person`` holds it).
    """

    thread_id: str
    status: str
    pause: Pause
    call: PendingToolCall | None
    messages: tuple[Message, ...] | None
    token: str = ""
    actionable: bool = False

    @property
    def review_id(self) -> str:
        """For a review's pause, the review (its page is where it is decided)."""
        data = self.pause.interrupt.data
        review_id = data.get("review_id") if isinstance(data, dict) else None
        if self.pause.kind is not PauseKind.REVIEW or not isinstance(review_id, str):
            return ""
        return review_id


@attrs.frozen
class ThreadView:
    """What the thread page shows."""

    thread_id: str
    status: str
    timeline: tuple[AuditEntry, ...]
    checkpoints: tuple[Checkpoint, ...]
    tree: ThreadTree
    audit: AuditReport
    hidden: frozenset[str] = frozenset()
    """The threads of the tree the reviewer may not see: listed unnamed."""

    def tree_walk(self) -> Iterator[ThreadTree | None]:
        """The tree's threads in the order the page lists them, each fork after its
        parent, and None where the list of a thread's forks ends: the page nests them
        in one loop, since a chain of forks may be deeper than a template can recurse."""
        stack: list[ThreadTree | None] = [self.tree]
        while stack:
            node = stack.pop()
            yield node
            if node is not None and node.children:
                stack.append(None)
                stack.extend(reversed(node.children))
