"""Head anchors: each thread's newest version and chain hash, in a small table written
in the same transaction as its events (ADR 0013).

A hash chain shows an altered or removed event in the middle of a stream, but not
that the newest events were deleted: what is left still chains. The anchor says where
the stream ended when it was last written, so an audit finds a stream shorter than
its anchor. The table lives beside the events table of each back end; the store's
application recorder is given the writing of it (``ThreadsApplication`` passes the
heads of the threads it saves as a keyword of ``insert_events``, as eventsourcing's
process recorders receive their tracking record).

When the table is created in a store that already holds threads, every thread is
anchored at its present version (its chain is then not recorded: ``""``). From then on
every thread the library writes has an anchor, so in a store with any anchor a thread
without one is a finding (its row was deleted, or its events were written around the
library), not a return to the state before anchors.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.persistence import (
    ApplicationRecorder,
    IntegrityError,
    InterfaceError,
    OperationalError,
    StoredEvent,
)
from eventsourcing.popo import POPOApplicationRecorder
from eventsourcing.sqlite import SQLiteApplicationRecorder
from eventsourcing.utils import retry

from covonaut_es.errors import LeaseLostError
from covonaut_es.store._chain import UNCHAINED, chain_in
from covonaut_es.store._leases_postgres import lock_ids
from covonaut_es.store._postgres_rows import encode_json, rows_json, select_rows
from covonaut_es.store._sqlite_connections import SQLiteWriter

HEADS = "covonaut_thread_heads"
"""The ``insert_events`` keyword carrying ``(originator_id, version, chain)`` rows."""

Head = tuple[UUID, int, str]

FENCES = "covonaut_lease_fences"
"""The ``insert_events`` keyword carrying ``(originator_id, token, session)`` rows: each
stream's run lease must still stand at that token (and on PostgreSQL, its lock be held by
the backend ``session``, when not 0), checked in the insert's own transaction, or the
insert fails with :class:`~covonaut_es.errors.LeaseLostError` and writes nothing."""

Fence = tuple[UUID, int, int]

NEW_STREAMS = "covonaut_new_streams"
"""The ``insert_events`` keyword naming streams, each with its row in :data:`HEADS`,
that must hold no event but the ones inserted (a fork's new thread, whose first version
is not 1, so that the uniqueness of versions does not guard it): the insert fails with
``IntegrityError`` otherwise, checked in its own transaction where
:func:`guards_new_streams` holds."""


class HeadAnchor(msgspec.Struct, frozen=True):
    """What the head table says of one thread.

    Attributes:
        store_anchors: The store anchors every thread's head (it holds an anchor).
        version: The anchored version, or None when the thread has no anchor.
        chain: The anchored chain hash (``""``: anchored when the table was created).
    """

    store_anchors: bool
    version: int | None = None
    chain: str = UNCHAINED


def heads_of_records(records: Iterable[StoredEvent]) -> list[Head]:
    """The newest version and chain of each stream among records with plain payloads."""
    heads: dict[UUID, Head] = {}
    for record in records:
        stream = UUID(str(record.originator_id))
        heads[stream] = (stream, record.originator_version, chain_in(record.state))
    return list(heads.values())


def _table(recorder: Any) -> str:
    return f"{recorder.events_table_name}_heads"


def _lease_table(recorder: Any) -> str:
    return f"{recorder.events_table_name}_leases"


def _lease_lost(stream: UUID, token: int, problem: str) -> LeaseLostError:
    msg = (
        f"the run lease {token} of stream {stream} was lost: {problem}, so another runner "
        "may hold the thread; nothing was written"
    )
    return LeaseLostError(msg, token=token)


def _check_fences(
    fences: Iterable[Fence],
    token_of: Callable[[UUID], int | None],
    holds_lock: Callable[[UUID, int], bool] = lambda stream, session: True,
) -> None:
    """Raise unless each stream's lease stands at the fence's token, its lock held by
    the fence's session where the back end can tell."""
    for stream, token, session in fences:
        stored = token_of(stream)
        if stored != token:
            found = "none" if stored is None else f"lease {stored}"
            raise _lease_lost(stream, token, f"the store records {found}")
        if session and not holds_lock(stream, session):
            raise _lease_lost(stream, token, f"database session {session} holds its lock no more")


def _taken(stream: UUID) -> IntegrityError:
    return IntegrityError(f"stream {stream} already has events; it was to be a new one")


def _refuse_taken_streams(
    kwargs: dict[str, Any],
    stored_events: Sequence[StoredEvent],
    count: Callable[[UUID], int],
) -> None:
    """Raise unless each stream in :data:`NEW_STREAMS` holds only the events inserted,
    ``count`` giving how many a stream holds now (after the insert, under its lock)."""
    for stream in kwargs.get(NEW_STREAMS, ()):
        inserted = sum(1 for e in stored_events if UUID(str(e.originator_id)) == stream)
        if count(stream) != inserted:
            raise _taken(stream)


class _SQLiteHeads(SQLiteApplicationRecorder):
    writer: SQLiteWriter  # the saves' own connection (ADR 0024)

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        with self.writer.transaction() as c:
            return self._insert_events(c, stored_events, **kwargs)

    def _insert_events(self, c: Any, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        ids = super()._insert_events(c, stored_events, **kwargs)

        def count(stream: UUID) -> int:  # after the insert took the write lock
            c.execute(
                f"SELECT COUNT(*) FROM {self.events_table_name} WHERE originator_id = ?",
                (stream.hex,),
            )
            return int(c.fetchone()[0])

        _refuse_taken_streams(kwargs, stored_events, count)
        _check_fences(kwargs.get(FENCES, ()), lambda stream: self._lease_token(c, stream))
        rows = [(h[0].hex, h[1], h[2]) for h in kwargs.get(HEADS, ())]
        c.executemany(
            f"INSERT INTO {_table(self)} (originator_id, version, chain) VALUES (?, ?, ?) "
            "ON CONFLICT (originator_id) DO UPDATE SET version = excluded.version, "
            "chain = excluded.chain",
            rows,
        )
        return ids

    def advance_lease_token(self, stream: UUID) -> int:
        """Record a new run lease of ``stream``: its token, one more than the last."""
        with self.writer.transaction() as c:
            c.execute(
                f"INSERT INTO {_lease_table(self)} (originator_id, token) VALUES (?, 1) "
                "ON CONFLICT (originator_id) DO UPDATE SET token = token + 1 RETURNING token",
                (stream.hex,),
            )
            return int(c.fetchone()[0])

    def lease_token(self, stream: UUID) -> int | None:
        """The token of ``stream``'s newest run lease; None before its first."""
        with self.datastore.transaction(commit=False) as c:
            return self._lease_token(c, stream)

    def _lease_token(self, c: Any, stream: UUID) -> int | None:
        c.execute(f"SELECT token FROM {_lease_table(self)} WHERE originator_id = ?", (stream.hex,))
        row = c.fetchone()
        return None if row is None else int(row[0])


class _PostgresHeads:
    """Mixed into the PostgreSQL recorder's class (imported only where psycopg is).

    Where the store's insert function exists (:func:`_postgres_function`), events and
    heads are written by one call of it, in autocommit: it takes the table lock that
    keeps notification ids in commit order, writes, and commits within one statement,
    so the lock is never held across a round trip to the client (eventsourcing's
    recorder holds it from its ``LOCK TABLE`` until the client's ``COMMIT``). Else the
    heads ride along eventsourcing's own insert.
    """

    datastore: Any
    events_table_name: str
    insert_function: str | None = None  # the call of the store's insert function, if any

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        try:
            if self.insert_function is None or not stored_events:
                return super().insert_events(stored_events, **kwargs)  # type: ignore[misc]
            return _insert_in_one_statement(
                self,
                stored_events,
                kwargs.get(HEADS, ()),
                kwargs.get(NEW_STREAMS, ()),
                kwargs.get(FENCES, ()),
            )
        except Exception as exc:
            raise _lease_lost_in(exc, kwargs.get(FENCES, ())) from exc

    def _insert_events(
        self, curs: Any, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> None:
        super()._insert_events(curs, stored_events, **kwargs)  # type: ignore[misc]
        events = f'"{self.datastore.schema}"."{self.events_table_name}"'

        def count(stream: UUID) -> int:  # under the table lock the insert took
            curs.execute(f"SELECT COUNT(*) AS n FROM {events} WHERE originator_id = %s", (stream,))
            return int(curs.fetchone()["n"])

        _refuse_taken_streams(kwargs, stored_events, count)
        leases = f'"{self.datastore.schema}"."{_lease_table(self)}"'

        def token_of(stream: UUID) -> int | None:  # read under the lease row's share lock
            curs.execute(
                f"SELECT token FROM {leases} WHERE originator_id = %s FOR SHARE", (stream,)
            )
            row = curs.fetchone()
            return None if row is None else int(row["token"])

        def holds_lock(stream: UUID, session: int) -> bool:
            curs.execute(_SESSION_HOLDS_LOCK, (session, *lock_ids(stream)))
            return curs.fetchone() is not None

        _check_fences(kwargs.get(FENCES, ()), token_of, holds_lock)
        table = f'"{self.datastore.schema}"."{_table(self)}"'
        for stream, version, chain in kwargs.get(HEADS, ()):
            curs.execute(
                f"INSERT INTO {table} (originator_id, version, chain) VALUES (%s, %s, %s) "
                "ON CONFLICT (originator_id) DO UPDATE SET version = EXCLUDED.version, "
                "chain = EXCLUDED.chain",
                (stream, version, chain),
            )

    # Retried as eventsourcing's reads and writes are, so that a session the pool lost
    # (a restart) is not the lease's error; a repeated advance only skips a token.
    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def advance_lease_token(self, stream: UUID) -> int:
        """Record a new run lease of ``stream``: its token, one more than the last."""
        table = f'"{self.datastore.schema}"."{_lease_table(self)}"'
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(
                f"INSERT INTO {table} AS l (originator_id, token) VALUES (%s, 1) "
                "ON CONFLICT (originator_id) DO UPDATE SET token = l.token + 1 RETURNING token",
                (stream,),
            )
            return int(curs.fetchone()["token"])

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def lease_token(self, stream: UUID) -> int | None:
        """The token of ``stream``'s newest run lease; None before its first."""
        table = f'"{self.datastore.schema}"."{_lease_table(self)}"'
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(f"SELECT token FROM {table} WHERE originator_id = %s", (stream,))
            row = curs.fetchone()
            return None if row is None else int(row["token"])


_SESSION_HOLDS_LOCK = (
    "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = %s "
    "AND classid = %s AND objid = %s AND objsubid = 1"
)

_LEASE_LOST = "covonaut lease lost"
"""Starts the message the insert function raises for a fence that no longer stands."""


def _lease_lost_in(exc: Exception, fences: Sequence[Fence]) -> Exception:
    """A :class:`LeaseLostError` for the insert function's refusal; else ``exc``."""
    if isinstance(exc, LeaseLostError) or _LEASE_LOST not in str(exc):
        return exc
    problem = str(exc).partition(_LEASE_LOST + ": ")[2].splitlines()[0]
    stream, token = fences[0][:2] if fences else (UUID(int=0), 0)
    for fenced_stream, fenced_token, _ in fences:
        if str(fenced_stream) in problem:
            stream, token = fenced_stream, fenced_token
    return _lease_lost(stream, token, problem.removeprefix(f"stream {stream}: "))


@retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)  # as eventsourcing's
def _insert_in_one_statement(
    recorder: Any,
    stored_events: Sequence[StoredEvent],
    heads: Sequence[Head],
    new_streams: Collection[UUID],
    fences: Sequence[Fence],
) -> list[int]:
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


class _MemoryHeads(POPOApplicationRecorder):
    thread_heads: dict[UUID, tuple[int, str]]
    lease_tokens: dict[UUID, int]

    def _assert_uniqueness(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> None:
        super()._assert_uniqueness(stored_events, **kwargs)  # under the database lock
        for stream in kwargs.get(NEW_STREAMS, ()):
            if self._stored_events_index.get(str(stream)):
                raise _taken(stream)
        _check_fences(kwargs.get(FENCES, ()), self.lease_tokens.get)

    def advance_lease_token(self, stream: UUID) -> int:
        """Record a new run lease of ``stream``: its token, one more than the last."""
        with self._database_lock:
            token = self.lease_tokens.get(stream, 0) + 1
            self.lease_tokens[stream] = token
            return token

    def lease_token(self, stream: UUID) -> int | None:
        """The token of ``stream``'s newest run lease; None before its first."""
        with self._database_lock:
            return self.lease_tokens.get(stream)

    def _update_table(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        ids = super()._update_table(stored_events, **kwargs)  # under the database lock
        for stream, version, chain in kwargs.get(HEADS, ()):
            self.thread_heads[stream] = (version, chain)
        return ids


def anchor_heads(recorder: ApplicationRecorder, *, create: bool) -> None:
    """Have ``recorder`` write head anchors, creating their table if ``create`` (and
    anchoring the threads already stored); leave it as it is when the table is absent
    and may not be created."""
    if isinstance(recorder, _SQLiteHeads | _PostgresHeads | _MemoryHeads):
        return
    if isinstance(recorder, POPOApplicationRecorder):
        recorder.__class__ = type("MemoryHeads", (_MemoryHeads, type(recorder)), {})
        recorder.thread_heads = {}  # type: ignore[attr-defined]
        recorder.lease_tokens = {}  # type: ignore[attr-defined]
    elif isinstance(recorder, SQLiteApplicationRecorder):
        if _sqlite_table(recorder, create=create):
            recorder.__class__ = type("SQLiteHeads", (_SQLiteHeads, type(recorder)), {})
            recorder.writer = SQLiteWriter(recorder.datastore)  # type: ignore[attr-defined]
    elif _is_postgres(recorder) and _postgres_table(recorder, create=create):
        recorder.__class__ = type("PostgresHeads", (_PostgresHeads, type(recorder)), {})
        recorder.insert_function = _postgres_function(recorder, create=create)  # type: ignore[attr-defined]


def close_writer(recorder: ApplicationRecorder) -> None:
    """Close the connection ``recorder`` writes through, where it has one of its own."""
    if isinstance(recorder, _SQLiteHeads):
        recorder.writer.close()


def guards_new_streams(recorder: ApplicationRecorder) -> bool:
    """Whether ``recorder`` honours :data:`NEW_STREAMS` (it writes head anchors)."""
    return isinstance(recorder, _SQLiteHeads | _PostgresHeads | _MemoryHeads)


def _is_postgres(recorder: ApplicationRecorder) -> bool:
    module = sys.modules.get("eventsourcing.postgres")  # loaded if the store is PostgreSQL
    return module is not None and isinstance(recorder, module.PostgresApplicationRecorder)


def _sqlite_table(recorder: SQLiteApplicationRecorder, *, create: bool) -> bool:
    table, events = _table(recorder), recorder.events_table_name
    with recorder.datastore.transaction(commit=True) as c:
        if create:
            c.execute(
                f"CREATE TABLE IF NOT EXISTS {_lease_table(recorder)} (originator_id TEXT "
                "PRIMARY KEY, token INTEGER NOT NULL) WITHOUT ROWID"
            )
        c.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
        if c.fetchone() is not None:
            return True
        if not create:
            return False
        c.execute(
            f"CREATE TABLE {table} (originator_id TEXT PRIMARY KEY, "
            "version INTEGER NOT NULL, chain TEXT NOT NULL) WITHOUT ROWID"
        )
        c.execute(
            f"INSERT INTO {table} SELECT originator_id, MAX(originator_version), '' "
            f"FROM {events} GROUP BY originator_id"
        )
    return True


def _postgres_table(recorder: Any, *, create: bool) -> bool:
    schema = recorder.datastore.schema
    table = f'"{schema}"."{_table(recorder)}"'
    events = f'"{schema}"."{recorder.events_table_name}"'
    with recorder.datastore.transaction(commit=True) as curs:
        if create:
            curs.execute(
                f'CREATE TABLE IF NOT EXISTS "{schema}"."{_lease_table(recorder)}" '
                "(originator_id uuid PRIMARY KEY, token bigint NOT NULL)"
            )
        curs.execute("SELECT to_regclass(%s) AS found", (table,))
        row = curs.fetchone()
        if row is not None and row["found"] is not None:
            return True
        if not create:
            return False
        curs.execute(
            f"CREATE TABLE {table} (originator_id uuid PRIMARY KEY, "
            "version bigint NOT NULL, chain text NOT NULL)"
        )
        curs.execute(
            f"INSERT INTO {table} SELECT originator_id, MAX(originator_version), '' "
            f"FROM {events} GROUP BY originator_id"
        )
    return True


def _postgres_function(recorder: Any, *, create: bool) -> str | None:
    """The call of the store's insert function, creating it if ``create``; None when it
    is absent and may not be created."""
    from psycopg.sql import SQL, Identifier

    schema = Identifier(recorder.datastore.schema)
    name = f"{recorder.events_table_name}_insert"
    function = SQL("{schema}.{name}").format(schema=schema, name=Identifier(name))
    with recorder.datastore.transaction(commit=True) as curs:
        if create:
            curs.execute(
                SQL(_INSERT_FUNCTION).format(
                    function=function,
                    schema=schema,
                    events=Identifier(recorder.events_table_name),
                    heads=Identifier(_table(recorder)),
                    leases=Identifier(_lease_table(recorder)),
                    rows=select_rows(SQL("events"), recorder.datastore.originator_id_type),
                    channel=Identifier(recorder.channel_name),
                )
            )
        else:
            curs.execute(
                "SELECT to_regprocedure(%s) AS found",
                (f'"{recorder.datastore.schema}"."{name}"(json, json, json, text)',),
            )
            row = curs.fetchone()
            if row is None or row["found"] is None:
                return None
        # Rendered once: a composed query is rendered again on every execution.
        return (
            SQL(
                "SELECT notification_id FROM {function}(%s::json, %s::json, %s::json, %s) "
                "AS notification_id"
            )
            .format(function=function)
            .as_string(curs)
        )


_INSERT_FUNCTION = """
CREATE OR REPLACE FUNCTION {function}(events json, heads json, fences json, timeout text)
RETURNS SETOF bigint LANGUAGE plpgsql AS $body$
DECLARE
    lost record;
BEGIN
    PERFORM set_config('lock_timeout', timeout, true);
    LOCK TABLE {schema}.{events} IN EXCLUSIVE MODE;
    -- A new lease of a fenced stream waits for this insert to commit, or wins first.
    PERFORM FROM {schema}.{leases} WHERE originator_id IN (
        SELECT f.originator_id FROM json_to_recordset(fences) AS f(originator_id uuid)
    ) FOR SHARE;
    SELECT f.originator_id, l.token INTO lost
        FROM json_to_recordset(fences) AS f(originator_id uuid, token bigint)
        LEFT JOIN {schema}.{leases} AS l ON l.originator_id = f.originator_id
        WHERE l.token IS DISTINCT FROM f.token
        LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'covonaut lease lost: stream %: the store records lease %',
            lost.originator_id, coalesce(lost.token::text, 'none');
    END IF;
    SELECT f.originator_id, f.session AS token INTO lost
        FROM json_to_recordset(fences)
            AS f(originator_id uuid, session integer, classid oid, objid oid)
        WHERE f.session <> 0 AND NOT EXISTS (
            SELECT FROM pg_locks AS k WHERE k.locktype = 'advisory' AND k.granted
            AND k.pid = f.session AND k.classid = f.classid AND k.objid = f.objid
            AND k.objsubid = 1
        )
        LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'covonaut lease lost: stream %: database session % holds its lock no more',
            lost.originator_id, lost.token;
    END IF;
    IF EXISTS (
        SELECT FROM json_to_recordset(heads) AS h(originator_id uuid, new boolean)
        JOIN {schema}.{events} AS e ON e.originator_id = h.originator_id WHERE h.new
    ) THEN
        RAISE unique_violation USING MESSAGE = 'a new stream already has events';
    END IF;
    NOTIFY {channel};
    INSERT INTO {schema}.{heads} (originator_id, version, chain)
        SELECT * FROM json_to_recordset(heads)
            AS h(originator_id uuid, version bigint, chain text)
        ON CONFLICT (originator_id) DO UPDATE
        SET version = EXCLUDED.version, chain = EXCLUDED.chain;
    RETURN QUERY INSERT INTO {schema}.{events}
        (originator_id, originator_version, topic, state)
        {rows}
        RETURNING notification_id;
END;
$body$
"""


def read_head(recorder: ApplicationRecorder, stream: UUID) -> HeadAnchor:
    """What the head table says of ``stream``."""
    if isinstance(recorder, _MemoryHeads):
        rows = dict(recorder.thread_heads)
    elif isinstance(recorder, _SQLiteHeads):
        with recorder.datastore.transaction(commit=False) as c:
            c.execute(
                f"SELECT originator_id, version, chain FROM {_table(recorder)} "
                "WHERE originator_id = ? OR originator_id = (SELECT originator_id "
                f"FROM {_table(recorder)} LIMIT 1)",
                (stream.hex,),
            )
            rows = {UUID(r[0]): (r[1], r[2]) for r in c.fetchall()}
    elif isinstance(recorder, _PostgresHeads):
        table = f'"{recorder.datastore.schema}"."{_table(recorder)}"'
        with recorder.datastore.transaction(commit=False) as curs:
            curs.execute(
                f"SELECT originator_id, version, chain FROM {table} "
                "WHERE originator_id = %s OR originator_id = (SELECT originator_id "
                f"FROM {table} LIMIT 1)",
                (stream,),
            )
            rows = {UUID(str(r["originator_id"])): (r["version"], r["chain"]) for r in curs}
    else:
        return HeadAnchor(store_anchors=False)
    if stream not in rows:
        return HeadAnchor(store_anchors=bool(rows))
    version, chain = rows[stream]
    return HeadAnchor(store_anchors=True, version=version, chain=chain)
