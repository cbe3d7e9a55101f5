"""Stored records sent to PostgreSQL as one JSON document (ADR 0015).

eventsourcing's PostgreSQL recorders send rows as an array of a composite type, which
psycopg writes in Python, quoting each payload's hex text with regular expressions: for
a save of one or two events that was two thirds of the client's CPU per insert, and
for a snapshot milliseconds. msgspec writes the same rows as JSON in C (a payload in
base64), and PostgreSQL reads them with ``json_to_recordset``, faster than it parses
the composite array too.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import msgspec
from eventsourcing.persistence import AggregateRecorder, StoredEvent

encode_json = msgspec.json.Encoder().encode


def rows_json(stored_events: Sequence[StoredEvent]) -> str:
    """The records as the JSON that :func:`select_rows` reads."""
    return encode_json(stored_events).decode()


def select_rows(source: Any, id_type: str) -> Any:
    """A ``SELECT`` (a psycopg ``Composed``) of the four columns of the records in the
    JSON ``source`` (psycopg SQL)."""
    from psycopg.sql import SQL, Identifier

    return SQL(
        "SELECT e.originator_id, e.originator_version, e.topic, decode(e.state, 'base64') "
        "FROM json_to_recordset({source}) AS e(originator_id {id_type}, "
        "originator_version bigint, topic text, state text)"
    ).format(source=source, id_type=Identifier(id_type))


class _JsonRows:
    """Mixed into the class of a PostgreSQL aggregate recorder (snapshots)."""

    json_insert: Any  # the INSERT statement, a psycopg Composed

    def _insert_stored_events(
        self, curs: Any, stored_events: Sequence[StoredEvent], **_: Any
    ) -> None:
        curs.execute(self.json_insert, (rows_json(stored_events),))


def insert_rows_as_json(recorder: AggregateRecorder) -> None:
    """Have a PostgreSQL aggregate recorder (not an application recorder, whose inserts
    also lock and return ids) send its rows as JSON; leave any other as it is."""
    module = sys.modules.get("eventsourcing.postgres")  # loaded if the store is PostgreSQL
    if (
        module is None
        or type(recorder) is not module.PostgresAggregateRecorder
        or isinstance(recorder, _JsonRows)
    ):
        return
    from psycopg.sql import SQL, Identifier

    insert = SQL("INSERT INTO {schema}.{table} (originator_id, originator_version, topic, state) ")
    datastore: Any = recorder.datastore  # type: ignore[attr-defined]
    table: Any = recorder.events_table_name  # type: ignore[attr-defined]
    statement = insert.format(
        schema=Identifier(datastore.schema), table=Identifier(table)
    ) + select_rows(SQL("%s::json"), datastore.originator_id_type)
    recorder.__class__ = type("JsonRowsRecorder", (_JsonRows, type(recorder)), {})
    recorder.json_insert = statement  # type: ignore[attr-defined]
