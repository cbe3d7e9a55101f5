"""Stored records sent to PostgreSQL as one JSON document (ADR 0015).

eventsourcing's PostgreSQL recorders send rows as an array of a composite type, which
psycopg writes in Python, quoting each payload's hex text with regular expressions: for
a save of one or two events that was two thirds of the client's CPU per insert, and
for a snapshot milliseconds. msgspec writes the same rows as JSON in C (a payload in
base64), and PostgreSQL reads them with ``json_to_recordset``, faster than it parses
the composite array too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
from eventsourcing.persistence import StoredEvent
from psycopg.sql import SQL, Identifier

encode_json = msgspec.json.Encoder().encode


def rows_json(stored_events: Sequence[StoredEvent]) -> str:
    """The records as the JSON that :func:`select_rows` reads."""
    return encode_json(stored_events).decode()


def select_rows(source: Any, id_type: str) -> Any:
    """A ``SELECT`` (a psycopg ``Composed``) of the four columns of the records in the
    JSON ``source`` (psycopg SQL)."""
    return SQL(
        "SELECT e.originator_id, e.originator_version, e.topic, decode(e.state, 'base64') "
        "FROM json_to_recordset({source}) AS e(originator_id {id_type}, "
        "originator_version bigint, topic text, state text)"
    ).format(source=source, id_type=Identifier(id_type))
