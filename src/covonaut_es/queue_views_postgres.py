"""The reviewer queue's view on PostgreSQL (imported only when a store needs it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import Tracking
from eventsourcing.postgres import PostgresTrackingRecorder
from psycopg.sql import SQL

from covonaut_es.queue_items import PendingReview, QueueChange
from covonaut_es.queue_views import (
    CREATE_STATEMENTS,
    SELECT_PENDING,
    SELECT_THREAD_ID,
    ReviewQueueView,
    row_to_item,
    statements,
)


class PostgresReviewQueueView(PostgresTrackingRecorder, ReviewQueueView):
    """The queue in a PostgreSQL database (the store's own, or another)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sql_create_statements.extend(
            SQL(statement).format() for statement in CREATE_STATEMENTS
        )

    def apply(self, changes: Sequence[QueueChange], tracking: Tracking) -> None:
        with self.datastore.transaction(commit=True) as cursor:
            for statement, params in statements(changes):
                cursor.execute(statement, params)
            self._insert_tracking(cursor, tracking)

    def pending(self) -> tuple[PendingReview, ...]:
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(SELECT_PENDING)
            return tuple(row_to_item(row) for row in cursor.fetchall())

    def thread_id_of(self, aggregate_id: str) -> str | None:
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(SELECT_THREAD_ID, (aggregate_id,))
            row = cursor.fetchone()
            return None if row is None else str(row["thread_id"])
