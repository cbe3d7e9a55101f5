"""Finding a review by its id: the thread a command on it acts on (ADR 0078).

A review is found through the service's :class:`ReviewIndex` where it is pending (one
lookup), else through the log's review requests and forks (the store's own index of
them); a review pending in a parent and its fork, which inherited it, is ambiguous
unless the command names the thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from covonaut_es._text import is_text
from covonaut_es.domain import Review
from covonaut_es.errors import AmbiguousReviewError, ReviewNotFoundError
from covonaut_es.store import Store


@attrs.frozen
class FoundReview:
    """A review and the thread it was found in.

    Attributes:
        thread_id: The thread that holds it (for a review a fork inherited pending, the
            fork it is pending in).
        review: The review as that thread records it now.
        awaiting: Whether a person can still decide it (the thread's
            ``reviews_awaiting`` holds it): False once decided, or once the thread is
            abandoned.
    """

    thread_id: str
    review: Review
    awaiting: bool


class ReviewIndex(Protocol):
    """Finds the threads where a review is pending by its id, without reading the log:
    the reviewer queue (:class:`~covonaut_es.projections.ReviewQueue`) is one."""

    def threads_with_review(self, review_id: str, store: Store) -> tuple[str, ...] | None:
        """The threads of ``store`` where the review is pending; None when the index is
        behind the store's log and cannot tell."""


def thread_of_review(
    store: Store, index: ReviewIndex | None, review_id: str, thread_id: str | None
) -> str:
    """The thread a command on review ``review_id`` acts on: ``thread_id`` when given,
    else the one thread where the review is pending, else the one that asked for it.

    Raises:
        ReviewNotFoundError: No thread holds it.
        AmbiguousReviewError: It is pending in several threads.
    """
    if thread_id is not None:
        return thread_id
    if not is_text(review_id):  # a lone surrogate (a byte of argv not UTF-8): no id has one
        raise no_review(store, review_id, None)
    # Pending: one lookup in the index. Decided, expired or unknown (or the index
    # cannot tell): the log's review requests and forks say who asked for it.
    indexed = None if index is None else index.threads_with_review(review_id, store)
    holders = indexed or store.threads_with_review(review_id)
    if not holders:
        raise no_review(store, review_id, None)
    if len(holders) == 1:
        return holders[0]
    pending = _pending_in(store, review_id, holders)
    if len(pending) > 1:
        msg = (
            f"review {review_id!r} is pending in several threads ({', '.join(pending)}): "
            "a fork inherits its parent's pending reviews; name the thread to decide it on"
        )
        raise AmbiguousReviewError(msg, thread_ids=tuple(pending))
    return (pending or holders)[0]


def held_review(store: Store, review_id: str, ambiguous: AmbiguousReviewError) -> Review | None:
    """The review an ``ambiguous`` lookup found in several threads, as the first of them
    records it: what says whom its threads may be told (the forks hold the parent's
    request, its rules the same)."""
    return store.load(ambiguous.thread_ids[0]).reviews.get(review_id)


def no_review(store: Store, review_id: str, thread_id: str | None) -> ReviewNotFoundError:
    """The error of a review not found in ``thread_id``, or in any thread of ``store``."""
    where = f"thread {thread_id!r}" if thread_id else f"any thread of {store.url}"
    return ReviewNotFoundError(f"no review {review_id!r} in {where}")


def _pending_in(store: Store, review_id: str, thread_ids: Sequence[str]) -> list[str]:
    """The threads where the review still waits for a decision: a thread given up
    decides none of its reviews, so it holds none that waits."""
    pending = []
    for thread_id in thread_ids:
        awaiting = store.load(thread_id).reviews_awaiting
        if any(review.request.review_id == review_id for review in awaiting):
            pending.append(thread_id)
    return pending
