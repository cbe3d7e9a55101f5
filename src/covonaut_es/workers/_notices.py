"""Review notices: an outbox that is the store's log, sent at least once, in order.

A notice is derived from a recorded event: ``ReviewRequested`` (a review was asked
for) and ``ReviewDeadlineNear`` (a worker recorded that a pending review expires soon).
:class:`NoticeSender` hands each to a :class:`ReviewNotifier` in log order and records
the log position once the notifier returned, with the store's tracking recorder
(:meth:`Store.record_log_position <covonaut_es.Store.record_log_position>`). So a notice
is never lost (one that failed is tried again first), and one sent but not recorded (a
crash in between) is sent again with the same idempotency key, which the receiver uses
to drop the repeat (ADR 0043).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, Protocol, cast, runtime_checkable

import attrs

from covonaut_es import _logs
from covonaut_es.domain import AgentThread
from covonaut_es.store import Store

logger = _logs.logger("covonaut_es.workers")

NOTICES_CONSUMER = "covonaut_review_notices"
"""The name under which the sender records its log position."""

NOTICE_EVENTS: tuple[type[AgentThread.Event], ...] = (
    AgentThread.ReviewRequested,
    AgentThread.ReviewDeadlineNear,
)
"""The events a notice is made of."""

NoticeKind = Literal["review_requested", "deadline_near"]


@attrs.frozen
class ReviewNotice:
    """What a notifier is told: a review to decide, or one whose deadline is near.

    It carries no arguments of the operation: a reviewer reads those in the inbox,
    where they are shown whole, not in a chat message or a mail.

    Attributes:
        kind: ``"review_requested"`` or ``"deadline_near"``.
        idempotency_key: The same for every attempt to deliver this notice, and unique
            to it: the receiver drops a notice whose key it has seen.
        thread_id: The thread whose review it is.
        review_id: The review.
        tool_name: The tool whose call waits.
        deadline: When the review expires, or None when it has no deadline.
        recorded_at: When the event it is made of was recorded.
        position: The event's position in the store's log.
    """

    kind: NoticeKind
    idempotency_key: str
    thread_id: str
    review_id: str
    tool_name: str
    deadline: datetime | None
    recorded_at: datetime
    position: int

    def to_json(self) -> dict[str, Any]:
        """The notice as JSON data (what the webhook posts)."""
        return {
            "kind": self.kind,
            "idempotency_key": self.idempotency_key,
            "thread_id": self.thread_id,
            "review_id": self.review_id,
            "tool_name": self.tool_name,
            "deadline": None if self.deadline is None else self.deadline.isoformat(),
            "recorded_at": self.recorded_at.isoformat(),
        }


@runtime_checkable
class ReviewNotifier(Protocol):
    """Delivers review notices (for example :class:`~covonaut_es.workers.WebhookNotifier`).

    ``notifier(notice)`` returns once the notice was delivered and raises otherwise
    (say, :class:`~covonaut_es.errors.NoticeDeliveryError`); it may be called again with
    the same notice, after a failure or a restart, so a receiver must drop a repeated
    ``idempotency_key``.
    """

    def __call__(self, notice: ReviewNotice, /) -> None:
        """Deliver ``notice``, or raise."""


def notice_of(event: AgentThread.Event, position: int) -> ReviewNotice:
    """The notice a recorded event of :data:`NOTICE_EVENTS` makes."""
    # Made of the stored event's identity: the same on every attempt, and unique.
    key = f"{event.originator_id.hex}-{event.originator_version}"
    if isinstance(event, AgentThread.ReviewRequested):
        request = event.request
        return ReviewNotice(
            "review_requested",
            key,
            request.thread_id,
            request.review_id,
            request.tool_name,
            request.deadline,
            event.timestamp,
            position,
        )
    assert isinstance(event, AgentThread.ReviewDeadlineNear)
    return ReviewNotice(
        "deadline_near",
        key,
        event.thread_id,
        event.review_id,
        event.tool_name,
        event.deadline,
        event.timestamp,
        position,
    )


class NoticeSender:
    """Sends the notices of a store's log to a notifier, each at least once, in order.

    Run one sender per store and notifier: two would each send every notice (the
    receiver drops the repeats by key).

    Args:
        store: The store whose log is the outbox.
        notifier: Delivers each notice.
        consumer: The name its position is recorded under; another name starts over.
    """

    def __init__(
        self, store: Store, notifier: ReviewNotifier, *, consumer: str = NOTICES_CONSUMER
    ) -> None:
        self.store = store
        self.notifier = notifier
        self.consumer = consumer

    def send_pending(self) -> int:
        """Send every notice recorded after the last position acknowledged, in log
        order; how many were sent.

        Raises:
            StoredRowError: The position recorded is past the log's end, or the log's
                end past where new events are numbered (ADR 0113).
            Exception: What the notifier raised for the first notice it could not
                deliver; that notice and the ones after it are sent by the next call.
        """
        sent = 0
        mapper = self.store.log.mapper
        # Read up to the end as checked (ADR 0113): a row moved past where new events are
        # numbered is refused, not sent and recorded as the position.
        position, end = self.store.log.position_and_end(self.consumer)
        notifications = self.store.log.notifications(*NOTICE_EVENTS, after=position, stop=end)
        for notification, event in _logs.passing_over(
            logger,
            notifications,
            mapper.to_domain_event,
            reader="review notices",
            then="no notice is made of it",
        ):
            if event is not None:
                self.notifier(notice_of(cast(AgentThread.Event, event), notification.id))
                sent += 1
            self.store.record_log_position(self.consumer, notification.id)
        return sent
