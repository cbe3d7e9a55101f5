"""The SQLite back end: a store in one file (ADR 0028).

Selected with ``PERSISTENCE_MODULE=covonaut_es.store._backends.sqlite``: eventsourcing's
SQLite persistence, with connections that keep their statements parsed and saves
written through a connection of their own (ADR 0024, :mod:`._sqlite_connections`), an
application recorder that anchors heads and checks lease fences in the saves'
transaction (ADR 0013, ADR 0016) and that projections can follow by polling
(:mod:`._sqlite_polling`), snapshots that replace their thread's older ones, and leases
taken with ``flock`` beside the file (:mod:`._sqlite_leases`). Its recorders store stream
ids as the store records (:mod:`covonaut_es.store._stream_ids`), keyed in its tables as
their events table declares (:mod:`._sqlite_keys`).

Private names of eventsourcing used here (``_insert_events`` and ``_create_table`` of
the SQLite recorders), and the text of its statements making tables (``originator_id
TEXT``, which :func:`._sqlite_keys.declaring` replaces), were checked against
eventsourcing 9.5.6.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing import sqlite
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    InfrastructureFactory,
    Notification,
    StoredEvent,
)

from covonaut_es.domain import ThreadSnapshot
from covonaut_es.errors import ForeignSchemaError
from covonaut_es.store._backend import BackendName, names_stock_module
from covonaut_es.store._backends._memory_leases import MemoryLeases
from covonaut_es.store._backends._sqlite_connections import (
    SQLiteWriter,
    StatementKeepingPool,
    sqlite_file,
)
from covonaut_es.store._backends._sqlite_keys import (
    NEW_TABLES,
    KeyType,
    StreamKey,
    declared_key_type,
    declaring,
    key_column,
    stream_key,
)
from covonaut_es.store._backends._sqlite_leases import FileLeases
from covonaut_es.store._backends._sqlite_polling import PollingSQLiteApplicationRecorder
from covonaut_es.store._heads import (
    FENCES,
    HEADS,
    HeadAnchor,
    RecorderAnchors,
    check_fences,
    check_heads_follow,
    head_in_row,
    head_sql,
    heads_table,
    lease_table,
    refuse_taken_streams,
)
from covonaut_es.store._leases import LeaseBackend
from covonaut_es.store._openings import Openings, in_chunks, opening_records, openings_sql
from covonaut_es.store._outstanding import OutstandingTable, SQLOutstanding
from covonaut_es.store._review_index_table import ReviewIndexTable, SQLReviewIndex
from covonaut_es.store._rows import (
    LAST_VERSION,
    CheckedLog,
    checked_anchored_version,
    checked_id,
    checked_lease_token,
    checked_records,
    log_sql,
    next_lease_token,
)
from covonaut_es.store._settings import check_sqlite_database, check_sqlite_file
from covonaut_es.store._settings_tables import SettingsTable, SQLSettings
from covonaut_es.store._side_tables import SQLSideTable
from covonaut_es.store._snapshot_cache import SnapshotCache
from covonaut_es.store._stream_ids import KeyedEvents, KeyedLog, mapped_ids, stored_stream
from covonaut_es.store._summaries import SQLSummaries, SummaryTable
from covonaut_es.store._thread_rows import ThreadRows, thread_rows, thread_rows_sql
from covonaut_es.store._urls import SQLITE_PATH
from covonaut_es.store._write_errors import require_stored

NO_TOPIC = "typeof(topic) <> 'text' OR topic = ''"
"""The condition on a row whose topic names no event type: NULL, empty, or no text (a
column of SQLite holds any value)."""

NO_VERSION = (
    "originator_version IS NULL OR originator_version < 1",
    f"originator_version > {LAST_VERSION}",
)
"""The conditions on a row whose version no thread's event is stored at: NULL or below 1
(a stream begins at 1); or, as SQLite orders values of other types after every number,
text, a blob or a real past any integer. Two conditions, each a search of the stream's
index: SQLite plans an OR of three as a scan of the whole stream."""


class SQLiteAggregateRecorder(sqlite.SQLiteAggregateRecorder):
    """eventsourcing's SQLite recorder (of snapshots, and the base of the store's
    application recorder) that keys streams as its table declares and checks each row
    it reads."""

    key_type: KeyType
    """How this recorder's table keys its streams, and the store's other tables with it."""

    stream_key: StreamKey

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        with self.datastore.transaction(commit=False) as c:
            self._settle_keys(c)

    def _create_table(self, c: Any) -> None:
        super()._create_table(c)
        # In the creating transaction: another process may have made the table first,
        # and its declaration is the one that stands.
        self._settle_keys(c)

    def _settle_keys(self, c: Any) -> None:
        """Key streams as this recorder's table declares (read with ``c``), or as a table
        not made yet will be."""
        self.key_type = declared_key_type(c, self.events_table_name, absent=self._new_tables())
        self.stream_key = stream_key(self.key_type)

    def _new_tables(self) -> KeyType:
        pool = self.datastore.pool
        return pool.tables_key if isinstance(pool, StatementKeepingPool) else "TEXT"

    def construct_create_table_statements(self) -> list[str]:
        made = super().construct_create_table_statements()
        return [declaring(statement, self._new_tables()) for statement in made]

    def convert_originator_id(self, originator_id: str) -> UUID | str:
        """The row's stream id, checked, parsed once per id (a restore reads hundreds
        of rows of one stream)."""
        if self.datastore.originator_id_type != "uuid":
            return originator_id
        return checked_id(originator_id, kept=self._kept)

    @property
    def _kept(self) -> type[bytes | str]:
        """What this recorder's table keeps a stream id as: a row holding another is
        damaged, even where its value would parse (a table that mixes the two)."""
        return bytes if self.key_type == "BLOB" else str

    def _keyed(self, originator_id: UUID | str) -> Any:
        return self.stream_key(originator_id) if isinstance(originator_id, UUID) else originator_id

    def _insert_events(self, c: Any, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        if self.key_type != "TEXT":  # eventsourcing writes a UUID as hex, anything else as is
            stored_events = mapped_ids(stored_events, self.stream_key)
        checked = _CheckedInserts(
            c.sqlite_cursor, self.insert_events_statement, self.events_table_name
        )
        return super()._insert_events(checked, stored_events, **kwargs)

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        """As eventsourcing's, each row checked (:mod:`covonaut_es.store._rows`)."""
        key = self._keyed(originator_id)
        found = super().select_events(key, gt=gt, lte=lte, desc=desc, limit=limit)
        return checked_records(found, reading=f"stream {originator_id}")


class _CheckedInserts(sqlite.SQLiteCursor):
    """A cursor that refuses an insert of a recorder's rows that stored other than the
    rows it was given (a trigger's ``RAISE(IGNORE)`` drops a row silently)."""

    def __init__(self, cursor: Any, insert: str, table: str) -> None:
        super().__init__(cursor)
        self._insert = insert
        self._table = table

    def execute(self, *args: Any, **kwargs: Any) -> None:
        super().execute(*args, **kwargs)
        if args[0] == self._insert:
            require_stored(self._table, self.sqlite_cursor.rowcount, 1)

    def executemany(self, statement: str, rows: Sequence[Any]) -> None:
        super().executemany(statement, rows)
        if statement == self._insert:
            require_stored(self._table, self.sqlite_cursor.rowcount, len(rows))


class _AnchoringRecorder(SQLiteAggregateRecorder, PollingSQLiteApplicationRecorder):
    """eventsourcing's SQLite application recorder: once :meth:`anchor_heads` found or made its
    tables, saves go through the store's own writer and write head anchors, check lease
    fences and refuse events in streams said to be new, in the insert's transaction."""

    anchoring = False
    keeps_summaries = False  # a store's recorder; not an application's of the user's own
    writer: SQLiteWriter  # the saves' own connection, while anchoring (ADR 0024)

    def _settle_keys(self, c: Any) -> None:
        super()._settle_keys(c)
        pool = self.datastore.pool
        if isinstance(pool, StatementKeepingPool):  # the events table decides for the store
            pool.tables_key = self.key_type  # the snapshots' table, made after it, follows

    def anchor_heads(self, *, create: bool) -> None:
        """Write head anchors from now on, creating their table (and the lease table)
        if ``create``; stay as eventsourcing's recorder when the table is absent and
        may not be created."""
        if self.anchoring or not self._heads_table(create=create):
            return
        self.writer = SQLiteWriter(self.datastore)
        self.anchoring = True

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        if not self.anchoring:
            return super().insert_events(stored_events, **kwargs)
        with self.writer.transaction() as c:
            return self._insert_events(c, stored_events, **kwargs)

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
        topicless: bool = False,
    ) -> Sequence[Notification]:
        """As eventsourcing's; ``topicless``: a read of some topics also reads the rows
        that hold no topic (:func:`~covonaut_es.store._rows.log_sql`)."""
        statement = log_sql(
            self.events_table_name,
            "rowid",
            start=None if start is None else "?",
            stop=None if stop is None else "?",
            topics=f"IN ({', '.join('?' * len(topics))})" if topics else None,
            no_topic=NO_TOPIC if topicless else None,
            limit="?",
            inclusive_of_start=inclusive_of_start,
        )
        params = [p for p in (start, stop) if p is not None]
        with self.datastore.transaction(commit=False) as c:
            c.execute(statement, [*params, *topics, limit])
            return [
                Notification(
                    id=position,
                    originator_id=self.convert_originator_id(stream),
                    originator_version=version,
                    topic=topic,
                    state=state,
                )
                for position, stream, version, topic, state in c.fetchall()
            ]

    def _insert_events(self, c: Any, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        ids = super()._insert_events(c, stored_events, **kwargs)
        if not self.anchoring:
            return ids

        def count(stream: UUID) -> int:  # after the insert took the write lock
            c.execute(
                f"SELECT COUNT(*) FROM {self.events_table_name} WHERE originator_id = ?",
                (self.stream_key(stream),),
            )
            return int(c.fetchone()[0])

        refuse_taken_streams(kwargs, stored_events, count)
        check_fences(kwargs.get(FENCES, ()), lambda stream: self._lease_token(c, stream))

        def anchored(stream: UUID) -> int | None:
            c.execute(self._anchored_version, (self.stream_key(stream),))
            row = c.fetchone()
            return None if row is None else checked_anchored_version(stream, row[0])

        check_heads_follow(kwargs.get(HEADS, ()), stored_events, anchored)
        rows = [(self.stream_key(h[0]), h[1], h[2]) for h in kwargs.get(HEADS, ())]
        upsert = self._upsert_head
        if len(rows) == 1:  # a save of one thread: one statement, as for the others
            c.execute(upsert, rows[0])
        else:
            c.executemany(upsert, rows)
        require_stored(heads_table(self), c.sqlite_cursor.rowcount, len(rows))
        return ids

    @functools.cached_property
    def _anchored_version(self) -> str:
        return f"SELECT version FROM {heads_table(self)} WHERE originator_id = ?"

    @functools.cached_property
    def _upsert_head(self) -> str:
        return (
            f"INSERT INTO {heads_table(self)} (originator_id, version, chain) VALUES (?, ?, ?) "
            "ON CONFLICT (originator_id) DO UPDATE SET version = excluded.version, "
            "chain = excluded.chain"
        )

    def advance_lease_token(self, stream: UUID, *, synced: bool = True) -> int:
        """Record a new run lease of ``stream``: its token, one more than the last;
        ``synced``: wait for the disk before returning it (else see
        :meth:`sync_lease_token`).

        Raises:
            StoredRowError: The stored token is none a lease was given, or none follows it
                (:func:`~covonaut_es.store._rows.next_lease_token`); nothing is written.
        """
        table, key = lease_table(self), self.stream_key(stream)
        with self.writer.transaction(synced=synced) as c:
            # The first lease's row is inserted first, as a write takes the file's write
            # lock: the token read next cannot change before it is written (a read first
            # would fail the write as busy once another connection committed in between).
            c.execute(
                f"INSERT INTO {table} (originator_id, token) VALUES (?, 1) "
                "ON CONFLICT (originator_id) DO NOTHING RETURNING token",
                (key,),
            )
            if c.fetchone() is not None:
                return 1
            token = next_lease_token(table, stream, self._lease_token(c, stream))
            c.execute(  # an insert, as the first lease's: what refuses one refuses both
                f"INSERT INTO {table} (originator_id, token) VALUES (?, ?) "
                "ON CONFLICT (originator_id) DO UPDATE SET token = excluded.token "
                "RETURNING token",
                (key, token),
            )
            require_stored(table, 0 if c.fetchone() is None else 1, 1)
            return token

    def sync_lease_token(self, stream: UUID) -> None:
        """Make the tokens recorded without waiting for the disk durable: a synced
        commit (rewriting ``stream``'s token as it is) syncs the write-ahead log they
        were appended to."""
        with self.writer.transaction() as c:
            c.execute(
                f"UPDATE {lease_table(self)} SET token = token WHERE originator_id = ?",
                (self.stream_key(stream),),
            )

    def lease_token(self, stream: UUID) -> int | None:
        """The token of ``stream``'s newest run lease; None before its first. Read on
        the saves' connection, which wrote the token and the run's saves, in one
        statement: a pooled connection would first read again the pages those saves
        changed, and begin and roll back a transaction around it."""
        with self.writer.statement() as c:
            return self._lease_token(c, stream)

    def _lease_token(self, c: Any, stream: UUID) -> int | None:
        c.execute(
            f"SELECT token FROM {lease_table(self)} WHERE originator_id = ?",
            (self.stream_key(stream),),
        )
        row = c.fetchone()
        return None if row is None else checked_lease_token(lease_table(self), stream, row[0])

    def read_head(self, stream: UUID) -> HeadAnchor:
        """What the head table says of ``stream``."""
        if not self.anchoring:
            return HeadAnchor(store_anchors=False)
        with self.datastore.transaction(commit=False) as c:
            c.execute(head_sql(heads_table(self), "?"), (self.stream_key(stream),))
            return head_in_row(c.fetchone(), kept=self._kept)

    def close_writer(self) -> None:
        """Close the connection the saves are written through."""
        if self.anchoring:
            self.writer.close()

    def _heads_table(self, *, create: bool) -> bool:
        table, events, key = heads_table(self), self.events_table_name, self.key_type
        with self.datastore.transaction(commit=True) as c:
            if create:
                c.execute(
                    f"CREATE TABLE IF NOT EXISTS {lease_table(self)} ({key_column(key)} "
                    "PRIMARY KEY, token INTEGER NOT NULL) WITHOUT ROWID"
                )
            c.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
            found = c.fetchone() is not None
            if not found and create:
                c.execute(
                    f"CREATE TABLE {table} ({key_column(key)} PRIMARY KEY, "
                    "version INTEGER NOT NULL, chain TEXT NOT NULL) WITHOUT ROWID"
                )
                c.execute(
                    f"INSERT INTO {table} SELECT originator_id, MAX(originator_version), '' "
                    f"FROM {events} GROUP BY originator_id"
                )
            self._check_keyed_alike(c)
        return found or create

    def _check_keyed_alike(self, c: Any) -> None:
        """Refuse a store whose head or lease table keys streams otherwise than its
        events table: a write would fail on one of them, a read miss rows of the other.

        Raises:
            ForeignSchemaError: The file's schema was altered.
        """
        for table in (heads_table(self), lease_table(self)):
            found = declared_key_type(c, table, absent=self.key_type)
            if found != self.key_type:
                msg = (
                    f"the store's table {table!r} keys streams as {found}, its events table "
                    f"{self.events_table_name!r} as {self.key_type}: the file's schema was "
                    "altered; restore it from a backup or an export (nothing was written)"
                )
                raise ForeignSchemaError(msg)


# eventsourcing 9.5.6 annotates SQLite's max_notification_id as int; it is None while the
# log is empty, as CheckedLog's says.
class SQLiteApplicationRecorder(KeyedLog, CheckedLog, _AnchoringRecorder):  # type: ignore[misc]
    """The store's application recorder, storing stream ids as the store records."""


class SQLiteProcessRecorder(  # type: ignore[misc]  # as SQLiteApplicationRecorder
    KeyedLog, CheckedLog, _AnchoringRecorder, sqlite.SQLiteProcessRecorder
):
    """eventsourcing's process recorder (a process application's, following others in a
    ``System``), anchoring the heads of the threads its policy saves as the store's
    recorder does, in the transaction that records its position (ADR 0052)."""


class SQLiteSnapshotRecorder(KeyedEvents, SQLiteAggregateRecorder):
    """The snapshots' recorder, storing stream ids as the store records."""


# eventsourcing looks for exactly one factory class in a persistence module.
class Factory(sqlite.SQLiteFactory):
    """eventsourcing's SQLite factory, with the store's recorder and a pool whose
    connections keep their statements parsed, and which make tables keying streams as
    :meth:`_tables_key` says."""

    aggregate_recorder_class = SQLiteSnapshotRecorder
    application_recorder_class = SQLiteApplicationRecorder
    process_recorder_class = SQLiteProcessRecorder

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        pool = self.datastore.pool  # eventsourcing's: it has opened no connection yet
        self.datastore.pool = StatementKeepingPool(
            db_name=pool.db_name,
            lock_timeout=pool.lock_timeout,
            file=None if pool.is_sqlite_memory_mode else sqlite_file(pool.db_name),
            tables_key=self._tables_key(),
        )

    def _tables_key(self) -> KeyType:
        """16 bytes, but for an application that names eventsourcing's own module or
        keeps ids that are no UUIDs (``ORIGINATOR_ID_TYPE=text``)."""
        if names_stock_module(self.env) or self.datastore.originator_id_type != "uuid":
            return "TEXT"
        return NEW_TABLES


class _SQLiteBackend(RecorderAnchors):
    """The port of the SQLite back end (see :class:`~covonaut_es.store._backend.Backend`)."""

    name: BackendName = "sqlite"
    keeps_one_snapshot = True
    anchoring_recorder = _AnchoringRecorder

    def owns(self, factory: InfrastructureFactory[Any]) -> bool:
        return isinstance(factory, sqlite.SQLiteFactory)

    def check_file(self, env: Mapping[str, str], shown: str) -> None:
        sqlite_file = env.get(SQLITE_PATH, env.get("SQLITE_DBNAME"))
        if sqlite_file:
            check_sqlite_file(sqlite_file, shown, writable=env.get("CREATE_TABLE") != "n")

    def check_projection_file(self, env: Mapping[str, str], where: str) -> None:
        sqlite_file = env.get(SQLITE_PATH, env.get("SQLITE_DBNAME"))
        if sqlite_file:
            check_sqlite_database(sqlite_file, where, writable=env.get("CREATE_TABLE") != "n")

    def opening(
        self, env: Mapping[str, str], shown: str
    ) -> contextlib.AbstractContextManager[Mapping[str, str]]:
        self.check_file(env, shown)
        return contextlib.nullcontext(env)  # SQLite creates tables under its file lock

    def tables_lock(
        self, factory: InfrastructureFactory[Any]
    ) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def canonical_url(self, url: str, env: Mapping[str, str]) -> str:
        return url

    def close_connections(self, recorder: ApplicationRecorder) -> None:
        if isinstance(recorder, _AnchoringRecorder):
            recorder.close_writer()

    def ping(self, recorder: ApplicationRecorder, timeout: float) -> None:
        # A file of this machine: a read fails at once when it is gone or replaced.
        recorder.max_notification_id()

    def database_now(self, recorder: ApplicationRecorder) -> datetime | None:
        # SQLite reads the clock of the machine the file is on (a file its locks work on
        # is local), past any clock a process was given.
        pool = getattr(getattr(recorder, "datastore", None), "pool", None)
        if not isinstance(pool, StatementKeepingPool):
            return None
        ((now,),) = pool.read("SELECT strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')", ())
        return datetime.fromisoformat(now)

    def select_thread(
        self,
        events: ApplicationRecorder,
        snapshots: AggregateRecorder,
        stream: UUID,
        lte: int,
    ) -> ThreadRows | None:
        if not (
            isinstance(events, SQLiteApplicationRecorder)
            and isinstance(snapshots, SQLiteSnapshotRecorder)
            and events.datastore is snapshots.datastore
            and isinstance(pool := events.datastore.pool, StatementKeepingPool)
        ):
            return None
        statement = thread_rows_sql(
            snapshots.events_table_name, events.events_table_name, ":stream", ":lte", NO_VERSION
        )
        stored = stored_stream(events, stream)  # the snapshots' recorder keys ids alike
        params = {"stream": events.stream_key(stored), "lte": lte}
        rows = pool.read(statement, params)
        return thread_rows(rows, stream, reading=f"stream {stored}", state=_same)

    def select_openings(
        self, events: ApplicationRecorder, streams: Sequence[UUID], topics: Sequence[str]
    ) -> Openings | None:
        if not (
            isinstance(events, SQLiteAggregateRecorder)
            and events.datastore.originator_id_type == "uuid"
            and isinstance(pool := events.datastore.pool, StatementKeepingPool)
        ):
            return None
        domain_of = {events.stream_key(stored_stream(events, s)): s for s in streams}
        records: list[StoredEvent] = []
        passed_over = 0
        for chunk in in_chunks(list(domain_of)):
            statement = openings_sql(
                events.events_table_name,
                f"IN ({', '.join('?' * len(chunk))})",
                f"IN ({', '.join('?' * len(topics))})",
                NO_TOPIC,
            )
            rows = pool.read(statement, (*chunk, *topics))
            read = opening_records(rows, domain_of, state=_same)
            records += read.records
            passed_over += read.passed_over
        return Openings(records, passed_over)

    def settings_table(
        self, factory: InfrastructureFactory[Any], recorder: ApplicationRecorder, table: str
    ) -> SettingsTable:
        def exists(cursor: Any) -> bool:
            cursor.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
            )
            return cursor.fetchone() is not None

        return SQLSettings(getattr(recorder, "datastore", None), table, "?", exists)

    def replace_snapshot(self, snapshots: SnapshotCache, snapshot: ThreadSnapshot) -> None:
        """Store ``snapshot`` and delete its thread's older snapshots in one transaction,
        before the insert, so that the new one reuses their pages instead of growing the
        file (ADR 0014).

        Raises:
            IntegrityError: The thread already has a snapshot at that version.
        """
        recorder = snapshots.recorder
        assert isinstance(recorder, SQLiteAggregateRecorder)
        thread = stored_stream(recorder, snapshot.originator_id)
        sealed = snapshots.stored(snapshot)  # sealed (ADR 0030)
        record = dataclasses.replace(sealed, originator_id=thread)
        version = snapshot.originator_version
        with recorder.datastore.transaction(commit=True) as c:
            c.execute(
                f"DELETE FROM {recorder.events_table_name} "
                "WHERE originator_id = ? AND originator_version < ?",
                (recorder.stream_key(thread), version),
            )
            recorder._insert_events(c, [record])

    def lease_backend(
        self, factory: InfrastructureFactory[Any], recorder: ApplicationRecorder, holder: str
    ) -> LeaseBackend:
        tokens = recorder if self.guards_new_streams(recorder) else None
        assert isinstance(factory, sqlite.SQLiteFactory)
        pool = factory.datastore.pool
        path = None if pool.is_sqlite_memory_mode else sqlite_file(pool.db_name)
        if path is not None:
            stored = lambda stream: stored_stream(recorder, stream)  # noqa: E731
            return FileLeases(holder, path, tokens, stored)  # type: ignore[arg-type]
        return MemoryLeases(holder, recorder, tokens)  # type: ignore[arg-type]

    def summary_table(self, recorder: ApplicationRecorder) -> SummaryTable | None:
        if not (isinstance(recorder, SQLiteApplicationRecorder) and recorder.keeps_summaries):
            return None
        return _side_table(
            recorder,
            SQLSummaries,
            "summaries",
            "position INTEGER PRIMARY KEY, originator_id TEXT NOT NULL UNIQUE, "
            "version INTEGER NOT NULL, seen INTEGER NOT NULL, summary BLOB NOT NULL",
            indexed="seen",
        )

    def outstanding_table(self, recorder: ApplicationRecorder) -> OutstandingTable | None:
        return _side_table(
            recorder,
            SQLOutstanding,
            "outstanding_v2",  # ADR 0077: the rows of ADR 0054 meant more
            "originator_id TEXT PRIMARY KEY, position INTEGER NOT NULL, state BLOB NOT NULL",
        )

    def review_index_table(self, recorder: ApplicationRecorder) -> ReviewIndexTable | None:
        return _side_table(
            recorder,
            SQLReviewIndex,
            "reviews",
            "review TEXT NOT NULL, position INTEGER NOT NULL, state BLOB NOT NULL, "
            "PRIMARY KEY (review, position)",
        )

    def make_tables(self, recorder: ApplicationRecorder) -> None:
        return  # made on first use: the file's writer may make them


_Table = TypeVar("_Table", bound=SQLSideTable)


def _side_table(
    recorder: ApplicationRecorder,
    kind: type[_Table],
    suffix: str,
    columns: str,
    *,
    indexed: str = "",
    **options: Any,
) -> _Table | None:
    """A table of ``kind`` (made with ``options`` too) beside ``recorder``'s head
    anchors, named after its events table and ``suffix``, with an index on the column
    ``indexed`` if given; None where it keeps none."""
    if not (isinstance(recorder, SQLiteApplicationRecorder) and recorder.anchoring):
        return None
    table = f"{recorder.events_table_name}_{suffix}"
    create = [f"CREATE TABLE IF NOT EXISTS {table} ({columns})"]
    if indexed:
        create.append(f"CREATE INDEX IF NOT EXISTS {table}_{indexed} ON {table} ({indexed})")
    return kind(
        recorder.datastore,
        recorder.writer.transaction,
        table=table,
        create=create,
        placeholder="?",
        stored=lambda stream: stream.hex,
        **options,
    )


def _same(value: Any) -> Any:
    return value


BACKEND = _SQLiteBackend()
"""This back end's port."""
