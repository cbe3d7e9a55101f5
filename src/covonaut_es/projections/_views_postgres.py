"""The reviewer queue's view on PostgreSQL (imported only when a store needs it)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from eventsourcing.postgres import PostgresTrackingRecorder
from psycopg.sql import SQL

from covonaut_es.projections._views import (
    CREATE_STATEMENTS,
    SealedReviewQueueView,
    SQLReviewQueueView,
)


class PostgresReviewQueueView(SQLReviewQueueView, PostgresTrackingRecorder):
    """The queue in a PostgreSQL database (the store's own, or another)."""

    PLACEHOLDER = "%s"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sql_create_statements.extend(SQL(s).format() for s in self.queue_tables())

    def queue_tables(self) -> Iterable[str]:
        """The statements that create the queue's own tables."""
        return CREATE_STATEMENTS


class SealedPostgresReviewQueueView(SealedReviewQueueView, PostgresReviewQueueView):
    """The sealed queue of an encrypted store, in a PostgreSQL database."""

    BLOB = "BYTEA"

    def queue_tables(self) -> Iterable[str]:
        return self.sealed_create_statements()
