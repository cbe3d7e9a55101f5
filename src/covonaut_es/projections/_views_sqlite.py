"""The reviewer queue's view in a SQLite file (the store's own, or another)."""

from __future__ import annotations

from eventsourcing.persistence import IntegrityError
from eventsourcing.sqlite import SQLiteTrackingRecorder

from covonaut_es.projections._views import (
    CREATE_STATEMENTS,
    SealedReviewQueueView,
    SQLReviewQueueView,
)


class SQLiteReviewQueueView(SQLReviewQueueView, SQLiteTrackingRecorder):
    """The queue in a SQLite file (the store's own, or another)."""

    PLACEHOLDER = "?"

    def construct_create_table_statements(self) -> list[str]:
        return [*super().construct_create_table_statements(), *CREATE_STATEMENTS]

    def create_table(self) -> None:
        try:
            super().create_table()
        except IntegrityError:
            # eventsourcing reads whether the tables exist, then makes them and records
            # their migration in one transaction, which another process (a second queue
            # started at once) committed in between: they are made now, and reading
            # again finds them.
            super().create_table()


class SealedSQLiteReviewQueueView(SealedReviewQueueView, SQLiteReviewQueueView):
    """The sealed queue of an encrypted store, in a SQLite file."""

    BLOB = "BLOB"

    def construct_create_table_statements(self) -> list[str]:
        # Only the tracking table and the sealed tables: no plain queue table.
        return [
            *SQLiteTrackingRecorder.construct_create_table_statements(self),
            *self.sealed_create_statements(),
        ]
