"""Projections: read models derived from the store's log.

This package owns the reviewer queue (:class:`ReviewQueue`): every pending review and
interrupt across all threads, kept by eventsourcing's projection runner in views on
memory, SQLite and PostgreSQL that write each change with its tracking position in one
transaction (a batch of events at a time), and read a page at a time by key
(:meth:`ReviewQueue.page`). The queue of an encrypted store is sealed under the store's
key. It reads
the store's log, may import the store and the domain, and never changes a thread.
"""

from covonaut_es.projections._items import PendingReview, tool_json
from covonaut_es.projections._paging import EVERY_ITEM, MAX_PAGE_SIZE, QueueFilter, QueuePage
from covonaut_es.projections._queue import ReviewQueue

__all__ = [
    "EVERY_ITEM",
    "MAX_PAGE_SIZE",
    "PendingReview",
    "QueueFilter",
    "QueuePage",
    "ReviewQueue",
    "tool_json",
]
