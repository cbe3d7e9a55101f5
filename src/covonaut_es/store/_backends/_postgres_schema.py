"""The PostgreSQL back end's schema: what a store's tables, indexes and columns are, the
catalog check that finds what of them an open is yet to make or was changed around the
library (ADR 0075, ADR 0117), the advisory lock under which processes make them, and the
connections of its own that the check runs on.

Used by :mod:`.postgres`, whose port opens a store through it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import psycopg
from eventsourcing import postgres
from psycopg.conninfo import make_conninfo
from psycopg.sql import SQL, Identifier

from covonaut_es.errors import (
    ForeignSchemaError,
    StoreLockedError,
    StoreOwnerRequiredError,
    StoreUnavailableError,
)
from covonaut_es.store._backends._postgres_heads import insert_function, insert_function_current
from covonaut_es.store._backends._postgres_leases import WORKERS_TABLE
from covonaut_es.store._settings import refuse_application_tables
from covonaut_es.store._urls import postgres_params
from covonaut_es.store._write_errors import NO_PRIVILEGE, sqlstate

STORE_EVENTS = "covonaut_events"  # named after the store's application, "covonaut"

_STORE_COLUMNS: dict[str, dict[str, str]] = {
    STORE_EVENTS: {
        "originator_id": "uuid not null",
        "originator_version": "bigint not null",
        "topic": "text",
        "state": "bytea",
        "notification_id": "bigint not null",
    },
    "covonaut_snapshots": {
        "originator_id": "uuid not null",
        "originator_version": "bigint not null",
        "topic": "text",
        "state": "bytea",
    },
    f"{STORE_EVENTS}_heads": {
        "originator_id": "uuid not null",
        "version": "bigint not null",
        "chain": "text not null",
    },
    f"{STORE_EVENTS}_leases": {"originator_id": "uuid not null", "token": "bigint not null"},
    "covonaut_settings": {"name": "text not null", "value": "text not null"},
}
"""The columns a store's tables are made with, each with its type as PostgreSQL's
catalog names it, and whether it holds NULL: those eventsourcing's statements and the
store's read. (The tables of listings' summaries and workers' outstanding threads are
made again from the log when they cannot be read, as earlier versions' are.)"""

SUMMARIES, OUTSTANDING, REVIEWS = "summaries", "outstanding_v2", "reviews"
"""The suffixes of the tables a store keeps beside its log, after its events table."""

TRACKING_TABLE = "covonaut_tracking"
"""eventsourcing's tracking table of the store's application: how far each consumer of
the log got (:class:`~covonaut_es.store._positions.LogPositions`). Its key is
eventsourcing's to choose and migrate (one row per consumer, or one per position), so
it is none of :data:`_STORE_INDEXES`."""

_MADE_TABLES = frozenset(
    [
        *_STORE_COLUMNS,
        *(f"{STORE_EVENTS}_{suffix}" for suffix in (SUMMARIES, OUTSTANDING, REVIEWS)),
        WORKERS_TABLE,
        TRACKING_TABLE,
    ]
)
"""Every table an open that makes a store's tables makes: where the catalog shows them
all, an open sends no DDL (ADR 0117)."""

_STORE_INDEXES: dict[str, tuple[str, bool, tuple[str, ...]]] = {
    f"{STORE_EVENTS}_pkey": (STORE_EVENTS, True, ("originator_id", "originator_version")),
    f"{STORE_EVENTS}_notification_id_idx": (STORE_EVENTS, True, ("notification_id",)),
    "covonaut_snapshots_pkey": (
        "covonaut_snapshots",
        True,
        ("originator_id", "originator_version"),
    ),
    f"{STORE_EVENTS}_heads_pkey": (f"{STORE_EVENTS}_heads", True, ("originator_id",)),
    f"{STORE_EVENTS}_leases_pkey": (f"{STORE_EVENTS}_leases", True, ("originator_id",)),
    "covonaut_settings_pkey": ("covonaut_settings", True, ("name",)),
    f"{STORE_EVENTS}_{SUMMARIES}_pkey": (f"{STORE_EVENTS}_{SUMMARIES}", True, ("position",)),
    f"{STORE_EVENTS}_{SUMMARIES}_originator_id_key": (
        f"{STORE_EVENTS}_{SUMMARIES}",
        True,
        ("originator_id",),
    ),
    f"{STORE_EVENTS}_{SUMMARIES}_seen": (f"{STORE_EVENTS}_{SUMMARIES}", False, ("seen",)),
    f"{STORE_EVENTS}_{OUTSTANDING}_pkey": (
        f"{STORE_EVENTS}_{OUTSTANDING}",
        True,
        ("originator_id",),
    ),
    f"{STORE_EVENTS}_{REVIEWS}_pkey": (
        f"{STORE_EVENTS}_{REVIEWS}",
        True,
        ("review", "position"),
    ),
    f"{WORKERS_TABLE}_pkey": (WORKERS_TABLE, True, ("worker_id",)),
}
"""The indexes the statements that make a store's tables make (each table's primary key
and unique constraints, eventsourcing's index of notification ids, the summaries' index
of positions seen): each one's table, whether it is unique, and its columns. An open
that finds one missing makes it again, as a unique index where it was a key (ADR 0117)."""

_ADDED_COLUMNS = {WORKERS_TABLE: ("calls",)}
"""The columns a later version added to a table an earlier version made: an open that
finds one missing adds it (those of :data:`_STORE_COLUMNS` missing are a change made
around the library)."""

_INDEXES_READ = (
    "SELECT i.relname, t.relname, x.indisunique, x.indisvalid AND x.indpred IS NULL "
    "AND x.indexprs IS NULL, ARRAY(SELECT a.attname::text FROM unnest(x.indkey::int2[]) "
    "WITH ORDINALITY AS k(num, ord) JOIN pg_catalog.pg_attribute a ON a.attrelid = x.indrelid "
    "AND a.attnum = k.num ORDER BY k.ord) "
    "FROM pg_catalog.pg_index x JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid "
    "JOIN pg_catalog.pg_class t ON t.oid = x.indrelid "
    "JOIN pg_catalog.pg_namespace n ON n.oid = i.relnamespace "
    "WHERE n.nspname = %s AND i.relname = ANY(%s)"
)
"""Each of a schema's indexes named as one of :data:`_STORE_INDEXES`: its table, whether
it is unique, whether it is whole (valid, of no predicate or expression), its columns."""

_EVENT_COLUMNS = frozenset(_STORE_COLUMNS[STORE_EVENTS])
"""The columns of eventsourcing's application recorder's table (named after its
application: a table that has them all is an application's events)."""

_COLUMNS_READ = (
    "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod) "
    "|| CASE WHEN a.attnotnull THEN ' not null' ELSE '' END "
    "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
    "AND NOT a.attisdropped "
    "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f') "
    "AND (c.relname = ANY(%s) OR a.attname = ANY(%s))"
)
"""The tables, views and their like of a schema that are a store's (each with every
column, none for a table whose columns were all dropped) or that may be an
application's events (with those columns), each column with its type as
:data:`_STORE_COLUMNS` names it. Read from PostgreSQL's catalog: ``information_schema``'s
views cost milliseconds to plan, on every open's new connection, and show neither a
materialized view nor a table without columns."""


def check_tables(conn: psycopg.Connection[Any], env: Mapping[str, str], shown: str) -> list[str]:
    """See :meth:`_PostgresBackend.check_file` (ADR 0075); what of the store is yet to be
    made, each named ("index 'covonaut_events_pkey'"): a table, an index, a column an
    earlier version lacked, the insert function (or an earlier version's); none where
    the open sends no DDL (ADR 0117).

    Raises:
        ForeignSchemaError: A table or index was changed around the library.
    """
    schema = env.get("POSTGRES_SCHEMA") or "public"
    rows = conn.execute(_COLUMNS_READ, (schema, sorted(_MADE_TABLES), list(_EVENT_COLUMNS)))
    columns: dict[str, dict[str, str]] = {}
    for table, name, kind in rows:
        found = columns.setdefault(str(table), {})
        if name is not None:
            found[str(name)] = str(kind)
    tables = sorted(table for table, found in columns.items() if found.keys() >= _EVENT_COLUMNS)
    if tables and STORE_EVENTS not in tables:
        shown_tables = ", ".join(repr(table[:63]) for table in tables[:5])
        refuse_application_tables(shown, f"event tables ({shown_tables})")
    _refuse_changed_tables(shown, columns)
    missing = [f"table {table!r}" for table in sorted(_MADE_TABLES - columns.keys())]
    missing += [
        f"column {name!r} of table {table!r}"
        for table, added in _ADDED_COLUMNS.items()
        if table in columns
        for name in added
        if name not in columns[table]
    ]
    indexes = conn.execute(_INDEXES_READ, (schema, sorted(_STORE_INDEXES))).fetchall()
    shapes = {
        str(name): (str(table), bool(unique), bool(whole), tuple(cols))
        for name, table, unique, whole, cols in indexes
    }
    for index, (table, unique, cols) in sorted(_STORE_INDEXES.items()):
        if table not in columns:
            continue  # made with its table
        shape = shapes.get(index)
        if shape is None:
            missing.append(f"index {index!r}")
        elif shape != (table, unique, True, cols):
            _refuse_changed_index(shown, index, shape, (table, unique, True, cols))
    if STORE_EVENTS in columns:
        made = insert_function(schema, STORE_EVENTS, "uuid")
        with conn.cursor() as cursor:
            current = insert_function_current(cursor, schema, STORE_EVENTS, made)
        if not current:
            missing.append(f"function '{STORE_EVENTS}_insert'")
    return missing


def _refuse_changed_index(
    shown: str,
    index: str,
    found: tuple[str, bool, bool, tuple[str, ...]],
    expected: tuple[str, bool, bool, tuple[str, ...]],
) -> None:
    """Refuse a store whose index ``index`` has another form than ``expected`` (its
    table, unique, whole, its columns).

    Raises:
        ForeignSchemaError: Always.
    """

    def form(table: str, unique: bool, whole: bool, cols: tuple[str, ...]) -> str:
        kind = ("unique " if unique else "") + ("index" if whole else "partial or invalid index")
        return f"a {kind} of {table!r} on ({', '.join(cols)})"

    msg = (
        f"store {shown}: index {index!r} was changed around the library: it is "
        f"{form(*found)}, expected {form(*expected)}; drop it, and open the store as the "
        "owner of its tables, which makes it again (nothing was read or written)"
    )
    raise ForeignSchemaError(msg)


def _refuse_changed_tables(shown: str, columns: Mapping[str, Mapping[str, str]]) -> None:
    """Refuse a store whose tables (those of them that exist: ``columns`` gives each
    one's columns and their types) lack a column of the store's, or declare it another
    way.

    Raises:
        ForeignSchemaError: Naming the first such column.
    """
    for table in sorted(columns.keys() & _STORE_COLUMNS.keys()):
        for name, expected in _STORE_COLUMNS[table].items():
            found = columns[table].get(name)
            if found != expected:
                what = "is missing" if found is None else f"is declared {found}"
                msg = (
                    f"store {shown}: table {table!r} was changed around the library: its "
                    f"column {name!r} {what}, expected {expected}; restore the table from "
                    "a backup or an export (nothing was read or written)"
                )
                raise ForeignSchemaError(msg)


SCHEMA_LOCK_KEY = 0x636F766F  # "covo": serializes table creation across processes

SCHEMA_LOCK_WAIT_S = 30
"""How long an open waits for another session making the database's tables, in seconds
(it takes milliseconds: a session that holds the lock longer is stuck)."""


def make_indexes(datastore: postgres.PostgresDatastore) -> None:
    """Make each index of :data:`_STORE_INDEXES` that a table of the store that exists
    lacks: a key or index lost from a table (a restore whose post-data section failed)
    is left so by ``CREATE TABLE IF NOT EXISTS``; a table made later comes with its own."""
    schema = datastore.schema
    with datastore.transaction(commit=True) as curs:
        curs.execute(
            "SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = ANY(%s)",
            (schema, sorted(_MADE_TABLES)),
        )
        tables = {row["relname"] for row in curs.fetchall()}
        for index, (table, unique, cols) in _STORE_INDEXES.items():
            if table in tables:
                curs.execute(
                    SQL("CREATE {unique}INDEX IF NOT EXISTS {index} ON {table} ({cols})").format(
                        unique=SQL("UNIQUE " if unique else ""),
                        index=Identifier(index),
                        table=Identifier(schema, table),
                        cols=SQL(", ").join(map(Identifier, cols)),
                    )
                )


@contextlib.contextmanager
def connect(env: Mapping[str, str]) -> Iterator[psycopg.Connection[Any]]:
    """A connection of its own (autocommit) to the database ``env`` names.

    Raises:
        StoreUnavailableError: It cannot be reached.
    """
    kwargs = {
        "conninfo": make_conninfo(**postgres_params(env)),
        "host": env["POSTGRES_HOST"],
        "port": env["POSTGRES_PORT"],
        "dbname": env["POSTGRES_DBNAME"],
        "user": env["POSTGRES_USER"] or None,
        "password": env["POSTGRES_PASSWORD"] or None,
        "connect_timeout": int(env["POSTGRES_CONNECT_TIMEOUT"]),
    }
    with connected(kwargs) as conn:
        yield conn


@contextlib.contextmanager
def connected(kwargs: Mapping[str, Any]) -> Iterator[psycopg.Connection[Any]]:
    """A connection of its own (autocommit), made with ``kwargs``.

    Raises:
        StoreUnavailableError: It cannot be reached, or was lost, or refused a
            statement (a ``statement_timeout`` of the URL's options, say).
    """
    where = f"{kwargs.get('host')}:{kwargs.get('port')}"
    try:
        conn = psycopg.connect(**kwargs, autocommit=True)
    except psycopg.Error as exc:
        msg = f"cannot connect to PostgreSQL at {where}: {exc}"
        raise StoreUnavailableError(msg) from exc
    with conn:
        try:
            yield conn
        except psycopg.Error as exc:  # the server shut down, ended the session, or refused
            msg = f"the connection to PostgreSQL at {where} failed: {exc}"
            raise StoreUnavailableError(msg) from exc


@contextlib.contextmanager
def made_by_the_owner(shown: str, missing: Sequence[str]) -> Iterator[None]:
    """Refuse, typed, an open that was to make ``missing`` (what the catalog check found
    yet to be made) and that the database refused for lack of privilege: the DDL that
    makes a store's tables, indexes and insert function needs their owner (ADR 0117).

    Raises:
        StoreOwnerRequiredError: A statement of the block failed so (SQLSTATE 42501,
            under whatever errors wrapped it).
    """
    try:
        yield
    except Exception as exc:
        if sqlstate(exc) != NO_PRIVILEGE:
            raise
        msg = (
            f"store {shown}: this store's {', '.join(missing)} is missing or of another "
            "version, and this role may not make it: open the store once as the owner of "
            "its tables (docs/operations.md, 'PostgreSQL roles'); nothing was written"
        )
        raise StoreOwnerRequiredError(msg) from exc


@contextlib.contextmanager
def schema_lock(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """Hold the lock under which processes make a database's tables, on ``conn``.

    Raises:
        StoreLockedError: Another session held it for :data:`SCHEMA_LOCK_WAIT_S`.
    """
    try:
        conn.execute(f"SET lock_timeout = '{SCHEMA_LOCK_WAIT_S}s'")
        conn.execute("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK_KEY,))
    except psycopg.errors.LockNotAvailable as exc:
        msg = (
            f"another session held the lock under which a store's tables are made "
            f"(advisory lock {SCHEMA_LOCK_KEY}) for {SCHEMA_LOCK_WAIT_S} s; nothing was "
            "written: try again, or end that session (pg_locks gives its pid)"
        )
        raise StoreLockedError(msg) from exc
    try:
        yield
    finally:
        if not conn.broken:  # a connection lost took its session's locks with it
            conn.execute("SELECT pg_advisory_unlock(%s)", (SCHEMA_LOCK_KEY,))
