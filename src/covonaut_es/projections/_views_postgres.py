"""The reviewer queue's view on PostgreSQL (imported only when a store needs it)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from eventsourcing.postgres import PostgresTrackingRecorder
from psycopg.sql import SQL

from covonaut_es.projections._views import (
    CREATE_STATEMENTS,
    SEALED_CREATE_STATEMENTS,
    SealedReviewQueueView,
    SQLReviewQueueView,
)

_QUEUE_TABLE = re.compile(
    r"\b("
    + "|".join(
        re.escape(name)
        for statement in (*CREATE_STATEMENTS, *SEALED_CREATE_STATEMENTS)
        for name in re.findall(r"^CREATE TABLE IF NOT EXISTS (\w+)", statement)
    )
    + r")\b"
)
"""A name of one of the queue's own tables in a statement, each one a statement of the
views creates (not an index's, which goes on with ``_by_``)."""


class PostgresReviewQueueView(SQLReviewQueueView, PostgresTrackingRecorder):
    """The queue in a PostgreSQL database (the store's own, or another), its tables named
    with the datastore's schema, never found through the role's ``search_path``, where a
    same-named table of another schema would be read and written instead."""

    PLACEHOLDER = "%s"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sql_create_statements.extend(SQL(self._sql(s)).format() for s in self.queue_tables())

    def _sql(self, statement: str) -> str:
        schema = self.datastore.schema.replace('"', '""')
        return _QUEUE_TABLE.sub(rf'"{schema}".\1', super()._sql(statement))

    def queue_tables(self) -> Iterable[str]:
        """The statements that create the queue's own tables."""
        return CREATE_STATEMENTS


class SealedPostgresReviewQueueView(SealedReviewQueueView, PostgresReviewQueueView):
    """The sealed queue of an encrypted store, in a PostgreSQL database."""

    BLOB = "BYTEA"

    def queue_tables(self) -> Iterable[str]:
        return self.sealed_create_statements()
