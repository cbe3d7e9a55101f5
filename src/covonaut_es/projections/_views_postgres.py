"""The reviewer queue's view on PostgreSQL (imported only when a store needs it)."""

from __future__ import annotations

from typing import Any

from eventsourcing.postgres import PostgresTrackingRecorder
from psycopg.sql import SQL

from covonaut_es.projections._views import CREATE_STATEMENTS, SQLReviewQueueView


class PostgresReviewQueueView(PostgresTrackingRecorder, SQLReviewQueueView):
    """The queue in a PostgreSQL database (the store's own, or another)."""

    PLACEHOLDER = "%s"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sql_create_statements.extend(
            SQL(statement).format() for statement in CREATE_STATEMENTS
        )
