"""The reviewer queue's materialized view, on each back end.

Each view is an eventsourcing tracking recorder: it applies a processed event's queue
changes and records the event's position in one transaction, so a projection that is
killed and restarted continues exactly where it stopped (exactly-once effect). Listing
the queue is one query on an index.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, ClassVar

import msgspec
from eventsourcing.persistence import Tracking, TrackingRecorder
from eventsourcing.popo import POPOTrackingRecorder
from eventsourcing.sqlite import SQLiteTrackingRecorder

from covonaut_es.projections._items import (
    ItemAdded,
    ItemRemoved,
    PendingReview,
    QueueChange,
    ThreadCleared,
    ThreadNamed,
)

_COLUMNS = (
    "thread_id, item_id, review_id, tool_name, digest, reason, data, requested_at, branch_parent"
)
CREATE_STATEMENTS = (
    "CREATE TABLE IF NOT EXISTS covonaut_review_queue ("
    "thread_id TEXT NOT NULL, item_id TEXT NOT NULL, review_id TEXT, "
    "tool_name TEXT NOT NULL, digest TEXT, reason TEXT NOT NULL, data TEXT NOT NULL, "
    "requested_at TEXT NOT NULL, branch_parent TEXT, PRIMARY KEY (thread_id, item_id))",
    "CREATE INDEX IF NOT EXISTS covonaut_review_queue_by_time "
    "ON covonaut_review_queue (requested_at, thread_id, item_id)",
    "CREATE TABLE IF NOT EXISTS covonaut_queue_threads ("
    "aggregate_id TEXT PRIMARY KEY, thread_id TEXT NOT NULL)",
)
# Written with %s placeholders; the SQLite view swaps them for ?.
_UPSERT_ITEM = (
    f"INSERT INTO covonaut_review_queue ({_COLUMNS}) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (thread_id, item_id) DO UPDATE SET review_id = excluded.review_id, "
    "tool_name = excluded.tool_name, digest = excluded.digest, reason = excluded.reason, "
    "data = excluded.data, requested_at = excluded.requested_at, "
    "branch_parent = excluded.branch_parent"
)
_NAME_THREAD = (
    "INSERT INTO covonaut_queue_threads (aggregate_id, thread_id) VALUES (%s, %s) "
    "ON CONFLICT (aggregate_id) DO NOTHING"
)
_REMOVE_ITEM = "DELETE FROM covonaut_review_queue WHERE thread_id = %s AND item_id = %s"
_CLEAR_THREAD = "DELETE FROM covonaut_review_queue WHERE thread_id = %s"
SELECT_PENDING = (
    f"SELECT {_COLUMNS} FROM covonaut_review_queue ORDER BY requested_at, thread_id, item_id"
)
SELECT_THREAD_ID = "SELECT thread_id FROM covonaut_queue_threads WHERE aggregate_id = %s"


class ReviewQueueView(TrackingRecorder, ABC):
    """The reviewer queue as a table, whatever the back end."""

    @abstractmethod
    def apply(self, changes: Sequence[QueueChange], tracking: Tracking) -> None:
        """Make the changes and record the tracking position, atomically."""

    @abstractmethod
    def pending(self) -> tuple[PendingReview, ...]:
        """Every pending item, oldest first."""

    @abstractmethod
    def thread_id_of(self, aggregate_id: str) -> str | None:
        """The thread id of an aggregate id the view has seen."""


def _row(item: PendingReview) -> tuple[Any, ...]:
    return (
        item.thread_id,
        item.item_id,
        item.review_id,
        item.tool_name,
        item.digest,
        item.reason,
        msgspec.json.encode(item.data).decode(),
        item.requested_at.isoformat(),
        item.branch_parent,
    )


def row_to_item(row: Any) -> PendingReview:
    return PendingReview(
        thread_id=row["thread_id"],
        item_id=row["item_id"],
        review_id=row["review_id"],
        tool_name=row["tool_name"],
        digest=row["digest"],
        reason=row["reason"],
        data=msgspec.json.decode(row["data"]),
        requested_at=datetime.fromisoformat(row["requested_at"]),
        branch_parent=row["branch_parent"],
    )


def statements(changes: Iterable[QueueChange]) -> Iterable[tuple[str, tuple[Any, ...]]]:
    for change in changes:
        match change:
            case ThreadNamed(aggregate_id, thread_id):
                yield _NAME_THREAD, (aggregate_id, thread_id)
            case ItemAdded(item):
                yield _UPSERT_ITEM, _row(item)
            case ItemRemoved(thread_id, item_id):
                yield _REMOVE_ITEM, (thread_id, item_id)
            case ThreadCleared(thread_id):
                yield _CLEAR_THREAD, (thread_id,)


class SQLReviewQueueView(ReviewQueueView):
    """The queue's statements run through an eventsourcing SQL datastore."""

    PLACEHOLDER: ClassVar[str]
    """The driver's parameter marker, replacing the ``%s`` of the statements."""

    # Provided by the SQL tracking recorder this is mixed into.
    datastore: Any
    _insert_tracking: Any

    def _sql(self, statement: str) -> str:
        return statement.replace("%s", self.PLACEHOLDER)

    def apply(self, changes: Sequence[QueueChange], tracking: Tracking) -> None:
        with self.datastore.transaction(commit=True) as cursor:
            for statement, params in statements(changes):
                cursor.execute(self._sql(statement), params)
            self._insert_tracking(cursor, tracking)

    def pending(self) -> tuple[PendingReview, ...]:
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(SELECT_PENDING)
            return tuple(row_to_item(row) for row in cursor.fetchall())

    def thread_id_of(self, aggregate_id: str) -> str | None:
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(self._sql(SELECT_THREAD_ID), (aggregate_id,))
            row = cursor.fetchone()
            return None if row is None else str(row["thread_id"])


class SQLiteReviewQueueView(SQLiteTrackingRecorder, SQLReviewQueueView):
    """The queue in a SQLite file (the store's own, or another)."""

    PLACEHOLDER = "?"

    def construct_create_table_statements(self) -> list[str]:
        return [*super().construct_create_table_statements(), *CREATE_STATEMENTS]


class MemoryReviewQueueView(POPOTrackingRecorder, ReviewQueueView):
    """The queue of an in-memory store, in this process."""

    def __init__(self) -> None:
        super().__init__()
        self._items: dict[tuple[str, str], PendingReview] = {}
        self._threads: dict[str, str] = {}

    def apply(self, changes: Sequence[QueueChange], tracking: Tracking) -> None:
        with self._database_lock:
            self._assert_tracking_uniqueness(tracking)
            for change in changes:
                match change:
                    case ThreadNamed(aggregate_id, thread_id):
                        self._threads.setdefault(aggregate_id, thread_id)
                    case ItemAdded(item):
                        self._items[item.thread_id, item.item_id] = item
                    case ItemRemoved(thread_id, item_id):
                        self._items.pop((thread_id, item_id), None)
                    case ThreadCleared(thread_id):
                        for key in [k for k in self._items if k[0] == thread_id]:
                            del self._items[key]
            self._insert_tracking(tracking)

    def pending(self) -> tuple[PendingReview, ...]:
        with self._database_lock:
            items = list(self._items.values())
        return tuple(sorted(items, key=lambda i: (i.requested_at, i.thread_id, i.item_id)))

    def thread_id_of(self, aggregate_id: str) -> str | None:
        with self._database_lock:
            return self._threads.get(aggregate_id)


VIEW_TOPICS: dict[str, str] = {
    "covonaut_es.store._memory": "covonaut_es.projections._views:MemoryReviewQueueView",
    "eventsourcing.sqlite": "covonaut_es.projections._views:SQLiteReviewQueueView",
    "eventsourcing.postgres": "covonaut_es.projections._views_postgres:PostgresReviewQueueView",
}
"""The view class for each persistence module, as topics: PostgreSQL's needs psycopg."""
