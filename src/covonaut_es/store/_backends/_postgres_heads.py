"""The head anchors and lease fences of a PostgreSQL store: their tables, and the
store's insert function that writes events and heads and checks fences in one statement
(ADR 0013, ADR 0016, ADR 0015)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.persistence import InterfaceError, OperationalError, StoredEvent
from eventsourcing.utils import retry
from psycopg.sql import SQL, Composed, Identifier, Literal

from covonaut_es.errors import LeaseLostError
from covonaut_es.store._backends._postgres_leases import lock_ids
from covonaut_es.store._backends._postgres_rows import encode_json, rows_json, select_rows
from covonaut_es.store._heads import (
    Fence,
    Head,
    head_ahead,
    heads_table,
    lease_lost,
    lease_table,
)
from covonaut_es.store._settings_tables import column
from covonaut_es.store._write_errors import not_stored

_HEADS_LOCK_KEY = 0x68656164  # "head": serializes the head tables' creation

_LEASE_LOST = "covonaut lease lost"
"""Starts the message the insert function raises for a fence that no longer stands."""

_HEAD_AHEAD = "covonaut head ahead"
"""Starts the message the insert function raises for a stream whose head is anchored
past the version its saved events follow: ``stream S anchored A follows F``."""

_NOT_STORED = "covonaut rows not stored"
"""Starts the message the insert function raises for a table that stored other rows
than it was given: the table, the rows stored, the rows given."""


def refusal_in(exc: Exception, fences: Sequence[Fence]) -> Exception:
    """A typed error for the insert function's refusal (a :class:`LeaseLostError`, a
    :class:`StoreUnavailableError` for a table that stored other rows than the call
    gave it, a :class:`StoredRowError` for a head anchored past what the save
    follows); else ``exc``."""
    if _HEAD_AHEAD in str(exc):
        words = str(exc).partition(_HEAD_AHEAD + ": ")[2].splitlines()[0].split()
        return head_ahead(words[1], int(words[3]), int(words[5]))
    if _NOT_STORED in str(exc):
        said = str(exc).partition(_NOT_STORED + ": ")[2].splitlines()[0]
        table, stored, given = said.rsplit(" ", 2)
        return not_stored(table, f"{stored} rows", int(given))
    if isinstance(exc, LeaseLostError) or _LEASE_LOST not in str(exc):
        return exc
    problem = str(exc).partition(_LEASE_LOST + ": ")[2].splitlines()[0]
    stream, token = fences[0][:2] if fences else (UUID(int=0), 0)
    for fenced_stream, fenced_token, _ in fences:
        if str(fenced_stream) in problem:
            stream, token = fenced_stream, fenced_token
    return lease_lost(stream, token, problem.removeprefix(f"stream {stream}: "))


RETRIED = retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
"""Calls a function again when its statement fails on a session the server ended (a
failover, a restart, ``pg_terminate_backend``), as eventsourcing retries the log's:
each of the store's own statements, reads and idempotent writes."""


@RETRIED
def insert_in_one_statement(
    recorder: Any,
    stored_events: Sequence[StoredEvent],
    heads: Sequence[Head],
    new_streams: Collection[UUID],
    fences: Sequence[Fence],
) -> list[int]:
    """Insert events and heads and check fences in one call of the insert function
    (autocommit); the events' notification ids."""
    params = (
        rows_json(stored_events),
        encode_json([_HeadRow(*head, new=head[0] in new_streams) for head in heads]).decode(),
        encode_json([_FenceRow.of(fence) for fence in fences]).decode(),
        f"{recorder.datastore.lock_timeout}s",
    )
    with recorder.datastore.get_connection() as conn:
        rows = conn.execute(recorder.insert_function, params, prepare=True).fetchall()
    return [row["notification_id"] for row in rows]


class _HeadRow(msgspec.Struct):
    originator_id: UUID
    version: int
    chain: str
    new: bool  # the stream is in NEW_STREAMS


class _FenceRow(msgspec.Struct):
    originator_id: UUID
    token: int
    session: int  # the backend process that holds the lock, or 0
    classid: int  # the lock as pg_locks shows it
    objid: int

    @classmethod
    def of(cls, fence: Fence) -> _FenceRow:
        stream, token, session = fence
        return cls(stream, token, session, *lock_ids(stream))


def heads_tables(recorder: Any, *, create: bool) -> bool:
    """Whether the head table exists, creating it (anchoring the threads stored) and the
    lease table if ``create`` and the catalog shows them missing: DDL on a table, even
    DDL that would change nothing, needs its owner (ADR 0117)."""
    schema = recorder.datastore.schema
    table = f'"{schema}"."{heads_table(recorder)}"'
    leases = f'"{schema}"."{lease_table(recorder)}"'
    events = f'"{schema}"."{recorder.events_table_name}"'
    with recorder.datastore.transaction(commit=True) as curs:
        found = _tables_found(curs, table, leases)
        if all(found) or not create:
            return found[0]
        # Processes of an application of the user's own, which creates its tables
        # without a store's setup lock, may start at once: asked again under the lock.
        curs.execute("SELECT pg_advisory_xact_lock(%s)", (_HEADS_LOCK_KEY,))
        heads_found, leases_found = _tables_found(curs, table, leases)
        if not leases_found:
            curs.execute(
                f"CREATE TABLE {leases} (originator_id uuid PRIMARY KEY, token bigint NOT NULL)"
            )
        if heads_found:
            return True
        curs.execute(
            f"CREATE TABLE {table} (originator_id uuid PRIMARY KEY, "
            "version bigint NOT NULL, chain text NOT NULL)"
        )
        curs.execute(
            f"INSERT INTO {table} SELECT originator_id, MAX(originator_version), '' "
            f"FROM {events} GROUP BY originator_id"
        )
    return True


def _tables_found(curs: Any, *tables: str) -> tuple[bool, ...]:
    """Whether each of ``tables`` (quoted with their schema) exists, from the catalog."""
    listed = ", ".join(f"to_regclass(%s) IS NOT NULL AS found_{i}" for i in range(len(tables)))
    curs.execute(f"SELECT {listed}", tables)
    return tuple(bool(found) for found in curs.fetchone().values())


def insert_function_call(recorder: Any, *, create: bool) -> str | None:
    """The call of the store's insert function, (re)creating it if ``create`` and the
    catalog shows it absent or of another body (one of an earlier version): replacing a
    function needs its owner (ADR 0117); None when it is absent and may not be created.
    """
    datastore = recorder.datastore
    schema, events = datastore.schema, recorder.events_table_name
    made = insert_function(schema, events, datastore.originator_id_type)
    with datastore.transaction(commit=True) as curs:
        current = insert_function_current(curs, schema, events, made)
        if create and not current:
            curs.execute("SELECT pg_advisory_xact_lock(%s)", (_HEADS_LOCK_KEY,))
            curs.execute(made)
        elif current is None:
            return None
        # Rendered once: a composed query is rendered again on every execution.
        return (
            SQL(
                "SELECT notification_id FROM {function}(%s::json, %s::json, %s::json, %s) "
                "AS notification_id"
            )
            .format(function=_function_name(schema, events))
            .as_string(curs)
        )


def insert_function(schema: str, events: str, id_type: str) -> Composed:
    """The statement that makes (or replaces) the insert function of the store whose
    events table is ``events`` in ``schema``, its stream ids of type ``id_type``."""
    return SQL(_INSERT_FUNCTION).format(
        function=_function_name(schema, events),
        schema=Identifier(schema),
        events=Identifier(events),
        heads=Identifier(f"{events}_heads"),
        heads_name=Literal(f"{events}_heads"),
        events_name=Literal(events),
        leases=Identifier(f"{events}_leases"),
        rows=select_rows(SQL("events"), id_type),
        id_type=Identifier(id_type),
        channel=Identifier(events.replace(".", "_")),  # eventsourcing's channel name
    )


def insert_function_current(cursor: Any, schema: str, events: str, made: Composed) -> bool | None:
    """Whether the catalog, read through ``cursor``, shows the insert function as
    ``made`` (:func:`insert_function`) makes it; False for one of another body (an
    earlier version's), None for none."""
    cursor.execute(
        "SELECT p.prosrc FROM (SELECT to_regprocedure(%s) AS oid) AS f "
        "LEFT JOIN pg_catalog.pg_proc AS p ON p.oid = f.oid",
        (f'"{schema}"."{events}_insert"(json, json, json, text)',),
    )
    body = column(cursor.fetchone(), 0, "prosrc")
    if body is None:
        return None
    return bool(body == made.as_string(cursor.connection).split("$body$")[1])


def _function_name(schema: str, events: str) -> Composed:
    """The insert function's name, with its schema."""
    return SQL("{schema}.{name}").format(
        schema=Identifier(schema), name=Identifier(f"{events}_insert")
    )


# Its test of a fence's session holding the lock repeats SESSION_HOLDS_LOCK in PL/pgSQL,
# kept as it is: the function's body is compared with the catalog's (ADR 0117), so a new
# body is a function missing to every role that may not replace it, until its owner
# opens the store.
_INSERT_FUNCTION = """
CREATE OR REPLACE FUNCTION {function}(events json, heads json, fences json, timeout text)
RETURNS SETOF bigint LANGUAGE plpgsql AS $body$
DECLARE
    fence record;
    head record;
    held bigint;
    stored bigint;
    ids bigint[];
    anchored bigint;
    follows bigint;
    ahead text;
BEGIN
    PERFORM set_config('lock_timeout', timeout, true);
    LOCK TABLE {schema}.{events} IN EXCLUSIVE MODE;
    -- Each fence's lease and each new stream's events are read by their keys, row by
    -- row: a join of the JSON rows with a table is planned for a hundred of them, and
    -- scans the whole table (a save's cost grew with the threads stored).
    FOR fence IN SELECT * FROM json_to_recordset(fences)
        AS f(originator_id uuid, token bigint, session integer, classid oid, objid oid)
    LOOP
        -- A new lease of a fenced stream waits for this insert to commit, or wins first.
        SELECT l.token INTO held FROM {schema}.{leases} AS l
            WHERE l.originator_id = fence.originator_id FOR SHARE;
        IF held IS DISTINCT FROM fence.token THEN
            RAISE EXCEPTION 'covonaut lease lost: stream %: the store records lease %',
                fence.originator_id, coalesce(held::text, 'none');
        END IF;
        IF fence.session <> 0 AND NOT EXISTS (
            SELECT FROM pg_locks AS k WHERE k.locktype = 'advisory' AND k.granted
            AND k.pid = fence.session AND k.classid = fence.classid
            AND k.objid = fence.objid AND k.objsubid = 1
        ) THEN
            RAISE EXCEPTION 'covonaut lease lost: stream %: database session % '
                'holds its lock no more', fence.originator_id, fence.session;
        END IF;
    END LOOP;
    FOR head IN SELECT * FROM json_to_recordset(heads) AS h(originator_id uuid, new boolean)
    LOOP
        IF head.new AND EXISTS (
            SELECT FROM {schema}.{events} AS e WHERE e.originator_id = head.originator_id
        ) THEN
            RAISE unique_violation USING MESSAGE = 'a new stream already has events';
        END IF;
        -- A head anchored at or past the first version saved: the stream's newest
        -- events were deleted, which the new anchor would hide. Told once the events'
        -- insert has not conflicted (a conflict stays one).
        SELECT a.version INTO anchored FROM {schema}.{heads} AS a
            WHERE a.originator_id = head.originator_id;
        SELECT min(r.originator_version) - 1 INTO follows
            FROM json_to_recordset(events) AS r(originator_id {id_type}, originator_version bigint)
            WHERE r.originator_id = head.originator_id;
        IF ahead IS NULL AND anchored > follows THEN
            ahead := format('stream %s anchored %s follows %s',
                head.originator_id, anchored, follows);
        END IF;
    END LOOP;
    NOTIFY {channel};
    INSERT INTO {schema}.{heads} (originator_id, version, chain)
        SELECT * FROM json_to_recordset(heads)
            AS h(originator_id uuid, version bigint, chain text)
        ON CONFLICT (originator_id) DO UPDATE
        SET version = EXCLUDED.version, chain = EXCLUDED.chain;
    -- A trigger or rule may drop or change a row: the call stores exactly its rows or
    -- fails whole (ADR 0109).
    GET DIAGNOSTICS stored = ROW_COUNT;
    IF stored <> json_array_length(heads) THEN
        RAISE EXCEPTION 'covonaut rows not stored: % % %',
            {heads_name}, stored, json_array_length(heads);
    END IF;
    WITH inserted AS (
        INSERT INTO {schema}.{events} (originator_id, originator_version, topic, state)
        {rows}
        RETURNING notification_id
    ) SELECT array_agg(notification_id ORDER BY notification_id) INTO ids FROM inserted;
    IF ahead IS NOT NULL THEN
        RAISE EXCEPTION 'covonaut head ahead: %', ahead;
    END IF;
    SELECT count(DISTINCT i) FILTER (WHERE i > 0) INTO stored FROM unnest(ids) AS i;
    IF stored <> json_array_length(events) OR cardinality(ids) <> stored THEN
        RAISE EXCEPTION 'covonaut rows not stored: % % %',
            {events_name}, stored, json_array_length(events);
    END IF;
    RETURN QUERY SELECT unnest(ids);
END;
$body$
"""
