"""What the reviewer queue holds, and the changes its projection makes to it.

Computing the changes is pure: :func:`changes_for` maps one thread event to the rows it
adds or removes. The views (:mod:`covonaut_es.projections._views`) apply them with the
tracking position in one transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any

import msgspec

from covonaut_es.domain import (
    AgentThread,
    Interrupt,
    PauseKind,
    ReviewRules,
    ToolPin,
    may_decide,
)
from covonaut_es.domain._reviews import DEFAULT_RULES
from covonaut_es.domain._shown import shown_operation_fits
from covonaut_es.messages import JsonValue


class PendingReview(msgspec.Struct, frozen=True, kw_only=True):
    """A pause waiting for a person, in some thread: a review to decide, a tool's
    pause to answer, or a call in doubt to settle.

    Attributes:
        thread_id: The paused thread.
        item_id: The review id of a review, else the paused call's id (unique within
            the thread).
        kind: What the pause waits for.
        review_id: The review's id, for a review.
        tool_name: The tool of the paused call.
        digest: The operation digest of a review (tool name and arguments); None for
            a review whose stored pause was altered (see :func:`pending_from`).
        reason: Why the run paused, or that a review's stored pause was altered.
        data: The interrupt's data (of an altered review's pause, its ids only).
        requested_at: When the run paused.
        branch_parent: For a pause a fork inherited, the thread it came from.
    """

    thread_id: str
    item_id: str
    kind: PauseKind = PauseKind.INTERRUPT
    review_id: str | None = None
    tool_name: str
    digest: str | None = None
    reason: str
    data: JsonValue = None
    requested_at: datetime
    branch_parent: str | None = None

    @property
    def tool_call_id(self) -> str:
        """The paused call (a review's is in its request)."""
        if self.review_id is None:
            return self.item_id
        data = self.data if isinstance(self.data, dict) else {}
        call_id = data.get("tool_call_id")
        return call_id if isinstance(call_id, str) else ""

    @property
    def tool(self) -> ToolPin | None:
        """For a review of a tool from a server (MCP), the tool as the model was offered
        it; None for the application's own tools, or data that does not hold a pin."""
        found = self.data.get("tool") if isinstance(self.data, dict) else None
        try:
            return None if found is None else msgspec.convert(found, ToolPin)
        except msgspec.ValidationError:
            return None

    @property
    def tool_changed(self) -> str:
        """For a review, what changed in its server's tool since an earlier review of
        the same name; empty when nothing did."""
        data = self.data if isinstance(self.data, dict) else {}
        note = data.get("tool_changed")
        return note if isinstance(note, str) else ""

    @property
    def deadline(self) -> datetime | None:
        """For a review with a deadline, when it expires; None otherwise, or for data
        that does not hold a time with its offset."""
        data = self.data if isinstance(self.data, dict) else {}
        text = data.get("deadline")
        try:
            found = datetime.fromisoformat(text) if isinstance(text, str) else None
        except ValueError:
            return None
        return found if found is not None and found.tzinfo is not None else None

    @property
    def rules(self) -> ReviewRules:
        """For a review, what its tool's policy allows (the defaults for data that
        records none, or rules that do not read): for what a surface shows; the
        thread's record is the authority."""
        return self._recorded_rules() or DEFAULT_RULES

    def listed_to(self, scopes: Collection[str]) -> bool:
        """Whether a reviewer holding ``scopes`` is listed this review: they may decide
        it (:func:`~covonaut_es.domain.may_decide`) by the rules it records, or it
        records none. Rules that do not read (an altered row, or one a later version
        wrote) list it to no one whose scopes are checked."""
        rules = self._recorded_rules()
        return rules is not None and may_decide(rules, scopes)

    def _recorded_rules(self) -> ReviewRules | None:
        """The rules the data records (the defaults when it records none); None when
        they do not read."""
        found = self.data.get("rules") if isinstance(self.data, dict) else None
        # Converted to the struct itself: a conversion to a union analyses the union
        # anew at each call, six times the cost, paid for every item of a listing.
        try:
            return DEFAULT_RULES if found is None else msgspec.convert(found, ReviewRules)
        except msgspec.ValidationError:
            return None


def tool_json(tool: ToolPin) -> dict[str, Any]:
    """A server's tool, as a review's JSON gives it."""
    return {
        "server": tool.server,
        "origin": tool.origin,
        "tool": tool.tool,
        "description": tool.description,
        "digest": tool.digest,
    }


class ThreadNamed(msgspec.Struct, frozen=True):
    """The view learns which thread id an aggregate id belongs to."""

    aggregate_id: str
    thread_id: str


class ItemAdded(msgspec.Struct, frozen=True):
    """A pending item enters the queue."""

    item: PendingReview


class ItemRemoved(msgspec.Struct, frozen=True):
    """A pending item was decided."""

    thread_id: str
    item_id: str


class ThreadCleared(msgspec.Struct, frozen=True):
    """Every item of a thread leaves the queue: it resumed."""

    thread_id: str


class ThreadGivenUp(msgspec.Struct, frozen=True):
    """A thread was abandoned: its items leave the queue, and the view keeps it as given
    up, so that nothing later in its stream (a run's commit put after the abandonment)
    lists anything of it again, nor names it. An abandoned thread waits for nobody.
    ``thread_id`` is None for a thread the view never named: it has no items."""

    aggregate_id: str
    thread_id: str | None


QueueChange = ThreadNamed | ItemAdded | ItemRemoved | ThreadCleared | ThreadGivenUp

QUEUE_EVENT_TYPES: tuple[type[AgentThread.Event], ...] = (
    AgentThread.StartedFromState,
    AgentThread.Forked,
    AgentThread.Interrupted,
    AgentThread.ReviewDecided,
    AgentThread.ReviewApprovedWithEdits,
    AgentThread.ReviewResponded,
    AgentThread.ReviewExpired,
    AgentThread.InterruptAnswered,
    AgentThread.ToolCallSettled,
    AgentThread.ToolCallRetried,
    AgentThread.RetryRequested,
    AgentThread.Resumed,
    AgentThread.Abandoned,
)
"""The events the queue follows; the projection subscribes to these topics only. A
thread begun afresh is named when it first has something to list (:data:`NAMED_LATER`),
not by its first event, which would cost the queue every thread the log began."""

QUEUE_FOLLOWER = "the review queue (its own database's tracking table)"
"""How a refusal of the queue's position names it (never by its URL, which may hold a
password)."""

SELF_NAMED = (AgentThread.StartedFromState, AgentThread.Forked)
"""The first events the queue follows, which name their thread themselves."""


def pending_from(
    interrupt: Interrupt, thread_id: str, at: datetime, branch_parent: str | None = None
) -> PendingReview:
    """The queue item of an interrupt (a review's request fills in its fields).

    A review's item shows its arguments and digest only when they are one operation
    (:func:`~covonaut_es.domain._shown.shown_operation_fits`): the stored copy the queue
    reads is not the thread's request, so one that was altered is listed as altered,
    with no arguments nor digest to approve."""
    data = interrupt.data if isinstance(interrupt.data, dict) else {}
    review = interrupt.kind is PauseKind.REVIEW
    named = data.get("review_id") if review else None
    review_id = named if isinstance(named, str) else None
    digest = data.get("digest") if review else None
    shown, reason = interrupt.data, interrupt.reason
    if review and not shown_operation_fits(interrupt.tool_name, data):
        digest, shown = None, {"review_id": review_id, "tool_call_id": interrupt.tool_call_id}
        reason = (
            f"the stored pause of review {review_id!r} was altered: its arguments are not "
            "the operation its digest covers; read the review from its thread"
        )
    return PendingReview(
        thread_id=thread_id,
        item_id=review_id or interrupt.tool_call_id,
        kind=interrupt.kind,
        review_id=review_id,
        tool_name=interrupt.tool_name,
        digest=digest,
        reason=reason,
        data=shown,
        requested_at=at,
        branch_parent=branch_parent,
    )


_DEALT_WITH = (
    AgentThread.InterruptAnswered,
    AgentThread.ToolCallSettled,
    AgentThread.ToolCallRetried,
    AgentThread.RetryRequested,
)
"""A person (or the application) dealt with the pause on a call: answered, settled or
sent to run again."""

NAMED_LATER: tuple[type[AgentThread.Event], ...] = (
    AgentThread.Interrupted,
    AgentThread.ReviewDecided,
    *_DEALT_WITH,
    AgentThread.Resumed,
    AgentThread.Abandoned,
)
"""The events whose thread the queue names from the store when its view has no name
for it, nor keeps it as given up: they list a pause, or take one off (the view's name
of a thread with pauses listed may have been deleted, or damaged, by a writer of its
table: the pauses still leave)."""


def changes_for(event: Any, thread_id_of: Callable[[str], str | None]) -> list[QueueChange]:
    """The queue changes one event makes; ``thread_id_of`` names an aggregate id."""
    if isinstance(event, SELF_NAMED):
        # A thread that starts paused: on its parent's interrupts, or its document's.
        named: QueueChange = ThreadNamed(event.originator_id.hex, event.thread_id)
        parent = getattr(event, "parent_thread_id", None)
        return [named] + [
            ItemAdded(pending_from(i, event.thread_id, event.timestamp, parent))
            for i in event.interrupts
        ]
    thread_id = thread_id_of(event.originator_id.hex)
    if isinstance(event, AgentThread.Abandoned):
        return [ThreadGivenUp(event.originator_id.hex, thread_id)]
    if thread_id is None:
        return []  # a thread given up, or whose first event names no thread
    if isinstance(event, AgentThread.Interrupted):
        return [ItemAdded(pending_from(event.interrupt, thread_id, event.timestamp))]
    if isinstance(event, AgentThread.ReviewDecided):
        return [ItemRemoved(thread_id, event.review_id)]
    if isinstance(event, _DEALT_WITH) and event.tool_call_id:
        return [ItemRemoved(thread_id, event.tool_call_id)]
    if isinstance(event, AgentThread.Resumed):
        return [ThreadCleared(thread_id)]
    return []
