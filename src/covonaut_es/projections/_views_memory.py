"""The reviewer queue's view of an in-memory store, in this process.

Kept in three indexes, so that every change costs the items it touches: the items by
thread (a thread that resumes clears its own items only), their sort keys in order (a
page is read from a position, as the SQL views read theirs from their index; sortedcontainers'
``SortedList`` keeps the order in O(log n) per change), and the threads of each pending
review (finding a review's thread is one lookup).
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterator, Sequence

from eventsourcing.persistence import Tracking
from sortedcontainers import SortedList  # type: ignore[import-untyped]  # no stubs

from covonaut_es.projections._items import (
    ItemAdded,
    ItemRemoved,
    PendingReview,
    QueueChange,
    ThreadCleared,
    ThreadGivenUp,
    ThreadNamed,
)
from covonaut_es.projections._paging import QueueFilter, QueueKey
from covonaut_es.projections._views import ReviewQueueView
from covonaut_es.store._tracking import MemoryTracking

_Key = tuple[str, str, str]
"""An item's place in the order: its request time as ISO text (the order the SQL views'
text column gives), its thread id and its item id."""


def _key_of(item: PendingReview) -> _Key:
    return (item.requested_at.isoformat(), item.thread_id, item.item_id)


class MemoryReviewQueueView(MemoryTracking, ReviewQueueView):
    """The queue of an in-memory store, in this process."""

    def __init__(self) -> None:
        super().__init__()
        self._threads: dict[str, str | None] = {}  # None: given up
        self._by_thread: dict[str, dict[str, PendingReview]] = {}
        self._order: SortedList = SortedList()
        self._by_review: dict[str, dict[str, None]] = {}

    def apply(self, changes: Sequence[QueueChange], tracking: Tracking) -> None:
        with self.tracked(tracking):
            for change in changes:
                match change:
                    case ThreadNamed(aggregate_id, thread_id):
                        self._threads.setdefault(aggregate_id, thread_id)
                    case ItemAdded(item):
                        self._remove(item.thread_id, item.item_id)
                        self._add(item)
                    case ItemRemoved(thread_id, item_id):
                        self._remove(thread_id, item_id)
                    case ThreadCleared(thread_id):
                        self._clear(thread_id)
                    case ThreadGivenUp(aggregate_id, thread_id):
                        if thread_id is not None:
                            self._clear(thread_id)
                        self._threads[aggregate_id] = None

    def _add(self, item: PendingReview) -> None:
        self._by_thread.setdefault(item.thread_id, {})[item.item_id] = item
        self._order.add(_key_of(item))
        if item.review_id is not None:
            self._by_review.setdefault(item.review_id, {})[item.thread_id] = None

    def _remove(self, thread_id: str, item_id: str) -> None:
        items = self._by_thread.get(thread_id)
        item = None if items is None else items.pop(item_id, None)
        if item is None:
            return
        if not items:
            del self._by_thread[thread_id]
        self._order.remove(_key_of(item))
        if item.review_id is not None and not self._holds(thread_id, item.review_id):
            holders = self._by_review[item.review_id]
            del holders[thread_id]
            if not holders:
                del self._by_review[item.review_id]

    def _holds(self, thread_id: str, review_id: str) -> bool:
        """Whether another item of the thread is still that review."""
        items = self._by_thread.get(thread_id, {})
        return any(i.review_id == review_id for i in items.values())

    def _clear(self, thread_id: str) -> None:
        for item_id in list(self._by_thread.get(thread_id, ())):
            self._remove(thread_id, item_id)

    def _item(self, key: _Key) -> PendingReview:
        return self._by_thread[key[1]][key[2]]

    def pending(self) -> tuple[PendingReview, ...]:
        with self.locked():
            return tuple(self._item(key) for key in self._order)

    def thread_ids_of(self, aggregate_ids: Collection[str]) -> dict[str, str | None]:
        with self.locked():
            return {a: self._threads[a] for a in aggregate_ids if a in self._threads}

    def threads_with_review(self, review_id: str) -> tuple[str, ...]:
        with self.locked():
            holders = self._by_review.get(review_id, {})
            items = [self._by_thread[t][i] for t in holders for i in self._by_thread[t]]
        found = sorted(_key_of(i) for i in items if i.review_id == review_id)
        return tuple(dict.fromkeys(key[1] for key in found))

    def items_after(
        self, key: QueueKey | None, limit: int, only: QueueFilter, newest_first: bool
    ) -> list[tuple[QueueKey, PendingReview | None]]:
        with self.locked():
            keys = self._keys_after(key, only, newest_first)
            return [(QueueKey(*k), self._item(k)) for k in itertools.islice(keys, limit)]

    def _keys_after(
        self, key: QueueKey | None, only: QueueFilter, newest_first: bool
    ) -> Iterator[_Key]:
        bound = None if key is None else (key.requested_at, key.thread_key, key.item_key)
        if only.thread_id is not None:  # the thread's own items, not the queue's
            own = sorted(map(_key_of, self._by_thread.get(only.thread_id, {}).values()))
            ordered = reversed(own) if newest_first else iter(own)
            if bound is None:
                return ordered
            if newest_first:
                return (k for k in ordered if k < bound)
            return (k for k in ordered if k > bound)
        if newest_first:
            return iter(self._order.irange(maximum=bound, inclusive=(True, False), reverse=True))
        return iter(self._order.irange(minimum=bound, inclusive=(False, True)))
