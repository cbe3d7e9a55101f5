"""The PostgreSQL back end: a store in a PostgreSQL database (ADR 0028).

Selected with ``PERSISTENCE_MODULE=covonaut_es.store._backends.postgres``: eventsourcing's
PostgreSQL persistence, with an application recorder that anchors heads and checks
lease fences in the saves' transaction, through an insert function of the store's own
(ADR 0013, ADR 0016, :mod:`._postgres_heads`), snapshots sent as JSON
(:mod:`._postgres_rows`, ADR 0015) that replace their thread's older ones (ADR 0014),
the URL's further parameters given to every connection, and leases held as advisory
locks (:mod:`._postgres_leases`); an open checks the store's tables against the catalog
and makes what is missing (:mod:`._postgres_schema`). Its recorders store stream ids as
the store records (:mod:`covonaut_es.store._stream_ids`). Imported only for a PostgreSQL
store: it needs psycopg.

Private names of eventsourcing used here (``_insert_events`` and ``_lock_table`` of the
PostgreSQL application recorder, ``_insert_stored_events`` of its aggregate recorder)
were checked against eventsourcing 9.5.6.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing import postgres
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    InfrastructureFactory,
    Notification,
    StoredEvent,
)
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Identifier

from covonaut_es.domain import ThreadSnapshot
from covonaut_es.errors import NotAStoreError
from covonaut_es.store._backend import TABLES_MADE, BackendName
from covonaut_es.store._backends._postgres_heads import (
    RETRIED,
    heads_tables,
    insert_function_call,
    insert_in_one_statement,
    refusal_in,
)
from covonaut_es.store._backends._postgres_leases import (
    SESSION_HOLDS_LOCK,
    WORKERS_TABLE,
    PostgresLeases,
    lock_ids,
    make_workers_table,
)
from covonaut_es.store._backends._postgres_reads import KeptReads, log_end_sql
from covonaut_es.store._backends._postgres_rows import rows_json, select_rows
from covonaut_es.store._backends._postgres_schema import (
    OUTSTANDING,
    REVIEWS,
    STORE_EVENTS,
    SUMMARIES,
    TRACKING_TABLE,
    check_tables,
    connect,
    connected,
    made_by_the_owner,
    make_indexes,
    schema_lock,
)
from covonaut_es.store._heads import (
    FENCES,
    HEADS,
    NEW_STREAMS,
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
from covonaut_es.store._openings import Openings, opening_records, openings_sql
from covonaut_es.store._outstanding import OutstandingTable, SQLOutstanding
from covonaut_es.store._review_index_table import ReviewIndexTable, SQLReviewIndex
from covonaut_es.store._rows import (
    CheckedLog,
    building_records,
    checked_anchored_version,
    checked_lease_token,
    checked_records,
    log_sql,
)
from covonaut_es.store._settings_tables import SettingsTable, SQLSettings, column
from covonaut_es.store._side_tables import SQLSideTable
from covonaut_es.store._snapshot_cache import SnapshotCache
from covonaut_es.store._stream_ids import KeyedEvents, KeyedLog, stored_stream
from covonaut_es.store._summaries import SQLSummaries, SummaryTable
from covonaut_es.store._thread_rows import ThreadRows, thread_rows, thread_rows_sql
from covonaut_es.store._urls import postgres_params
from covonaut_es.store._write_errors import require_stored

NO_TOPIC = "topic IS NULL OR topic = ''"
"""The condition on a row whose topic names no event type."""

NO_VERSION = ("originator_version < 1",)
"""The condition on a row whose version no thread's event is stored at (a stream begins
at 1; a ``bigint``, and a column let hold NULL is refused when the store opens)."""


class _CheckedRows(postgres.PostgresAggregateRecorder):
    """eventsourcing's PostgreSQL recorder, checking each row it reads."""

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
        reading = f"stream {originator_id}"
        with building_records(reading):
            found = super().select_events(originator_id, gt=gt, lte=lte, desc=desc, limit=limit)
        return checked_records(found, reading=reading)


class _AnchoringRecorder(_CheckedRows, postgres.PostgresApplicationRecorder):
    """eventsourcing's PostgreSQL application recorder: once :meth:`anchor_heads` found or made its
    tables, saves write head anchors, check lease fences and refuse events in streams
    said to be new, in the insert's transaction.

    Where the store's insert function exists (:mod:`._postgres_heads`), events and heads
    are written by one call of it, in autocommit: it takes the table lock that
    keeps notification ids in commit order, writes, and commits within one statement,
    so the lock is never held across a round trip to the client (eventsourcing's
    recorder holds it from its ``LOCK TABLE`` until the client's ``COMMIT``). Else the
    heads ride along eventsourcing's own insert.
    """

    anchoring = False
    keeps_summaries = False  # a store's recorder; not an application's of the user's own
    insert_function: str | None = None  # the call of the store's insert function, if any

    def __init__(self, datastore: postgres.PostgresDatastore, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        self.reads = KeptReads(datastore)
        """The connections a restore reads its thread's rows through."""

    # Retried as eventsourcing's reads are.
    @RETRIED
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
        """As eventsourcing's, a row it cannot build a record of refused
        (:func:`~covonaut_es.store._rows.building_records`); ``topicless``: a read of
        some topics also reads the rows that hold no topic
        (:func:`~covonaut_es.store._rows.log_sql`). :class:`CheckedLog` checks the
        records."""
        datastore = self.datastore
        statement = log_sql(
            f'"{datastore.schema}"."{self.events_table_name}"',
            "notification_id",
            start=None if start is None else "%s",
            stop=None if stop is None else "%s",
            topics="= ANY(%s)" if topics else None,
            no_topic=NO_TOPIC if topicless else None,
            limit="%s",
            inclusive_of_start=inclusive_of_start,
        )
        params: list[Any] = [p for p in (start, stop) if p is not None]
        if topics:
            params.append(list(topics))
        with datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as curs:
            curs.execute(statement, [*params, limit], prepare=True)
            with building_records():  # a NULL payload fails bytes()
                return [
                    Notification(
                        id=position,
                        originator_id=stream,
                        originator_version=version,
                        topic=topic,
                        state=bytes(state),
                    )
                    for position, stream, version, topic, state in curs.fetchall()
                ]

    def anchor_heads(self, *, create: bool) -> None:
        """Write head anchors from now on, creating their table, the lease table and
        the insert function if ``create``; stay as eventsourcing's recorder when the
        table is absent and may not be created."""
        if self.anchoring or not heads_tables(self, create=create):
            return
        self.insert_function = insert_function_call(self, create=create)
        self.anchoring = True

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        if not self.anchoring:
            return super().insert_events(stored_events, **kwargs)
        try:
            # A process recorder's position is recorded by eventsourcing's insert, in
            # its transaction (the insert function writes events and heads alone).
            if self.insert_function is None or not stored_events or kwargs.get("tracking"):
                return super().insert_events(stored_events, **kwargs)
            return insert_in_one_statement(
                self,
                stored_events,
                kwargs.get(HEADS, ()),
                kwargs.get(NEW_STREAMS, ()),
                kwargs.get(FENCES, ()),
            )
        except Exception as exc:
            refusal = refusal_in(exc, kwargs.get(FENCES, ()))
            if refusal is exc:
                raise  # its cause, the driver's error, kept for is_conflict
            raise refusal from exc

    def _insert_events(
        self, curs: Any, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> None:
        super()._insert_events(curs, stored_events, **kwargs)  # a process's tracking
        if not self.anchoring:
            return
        events = f'"{self.datastore.schema}"."{self.events_table_name}"'
        # eventsourcing 9.5.6: PostgresApplicationRecorder.insert_events calls
        # _insert_events before it inserts the events, and takes the table lock only
        # then (_insert_stored_events); taken now, the count below sees every committed
        # event, and a failed insert rolls the heads written here back with it.
        self._lock_table(curs)

        def count(stream: UUID) -> int:  # before the insert, under the table lock
            curs.execute(f"SELECT COUNT(*) AS n FROM {events} WHERE originator_id = %s", (stream,))
            return int(curs.fetchone()["n"])

        refuse_taken_streams(kwargs, (), count)  # a new stream holds nothing yet
        leases = f'"{self.datastore.schema}"."{lease_table(self)}"'

        def token_of(stream: UUID) -> int | None:  # read under the lease row's share lock
            curs.execute(
                f"SELECT token FROM {leases} WHERE originator_id = %s FOR SHARE", (stream,)
            )
            row = curs.fetchone()
            if row is None:
                return None
            return checked_lease_token(lease_table(self), stream, row["token"])

        def holds_lock(stream: UUID, session: int) -> bool:
            curs.execute(SESSION_HOLDS_LOCK, (session, *lock_ids(stream)))
            return curs.fetchone() is not None

        check_fences(kwargs.get(FENCES, ()), token_of, holds_lock)
        table = f'"{self.datastore.schema}"."{heads_table(self)}"'

        def anchored_past_its_events(stream: UUID) -> int | None:
            # Asked before the events' insert: an anchor at the stream's last event is a
            # conflict with another writer's save, which that insert reports.
            curs.execute(
                f"SELECT a.version FROM {table} AS a WHERE a.originator_id = %s AND "
                f"a.version > (SELECT coalesce(max(e.originator_version), 0) FROM {events} "
                "AS e WHERE e.originator_id = a.originator_id)",
                (stream,),
            )
            row = curs.fetchone()
            return None if row is None else checked_anchored_version(stream, row["version"])

        check_heads_follow(kwargs.get(HEADS, ()), stored_events, anchored_past_its_events)
        for stream, version, chain in kwargs.get(HEADS, ()):
            # RETURNING, as the count of an upsert in eventsourcing's pipeline of a
            # process's tracking is unknown (-1) until the pipeline syncs.
            curs.execute(
                f"INSERT INTO {table} (originator_id, version, chain) VALUES (%s, %s, %s) "
                "ON CONFLICT (originator_id) DO UPDATE SET version = EXCLUDED.version, "
                "chain = EXCLUDED.chain RETURNING 1",
                (stream, version, chain),
            )
            require_stored(heads_table(self), len(curs.fetchall()), 1)

    def _fetch_ids_after_insert_events(
        self, curs: Any, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        ids = super()._fetch_ids_after_insert_events(curs, stored_events, **kwargs)
        found = ids or ()
        require_stored(self.events_table_name, len(found), len(stored_events), found)
        return ids

    # The run leases record new tokens on their own connection (``PostgresLeases``).
    @RETRIED
    def lease_token(self, stream: UUID) -> int | None:
        """The token of ``stream``'s newest run lease; None before its first."""
        table = f'"{self.datastore.schema}"."{lease_table(self)}"'
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(f"SELECT token FROM {table} WHERE originator_id = %s", (stream,))
            row = curs.fetchone()
            if row is None:
                return None
            return checked_lease_token(lease_table(self), stream, row["token"])

    @RETRIED
    def read_head(self, stream: UUID) -> HeadAnchor:
        """What the head table says of ``stream``."""
        if not self.anchoring:
            return HeadAnchor(store_anchors=False)
        table = f'"{self.datastore.schema}"."{heads_table(self)}"'
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(head_sql(table, "%s"), (stream,))
            (row,) = curs.fetchall()
            return head_in_row(tuple(row.values()))


class _SequencedLog(CheckedLog, _AnchoringRecorder):
    """A log whose end is read with the last position its sequence issued."""

    # Retried as eventsourcing's reads are.
    @RETRIED
    def log_end(self) -> tuple[Any, int | None]:
        events = f'"{self.datastore.schema}"."{self.events_table_name}"'
        with self.datastore.get_connection() as conn, conn.cursor() as cursor:
            cursor.execute(log_end_sql(events), (events,))
            found = cursor.fetchone()
        assert found is not None  # an aggregate gives one row
        return found["newest"], found["issued"]


class PostgresApplicationRecorder(KeyedLog, _SequencedLog):
    """The store's application recorder, storing stream ids as the store records."""


class PostgresProcessRecorder(KeyedLog, _SequencedLog, postgres.PostgresProcessRecorder):
    """eventsourcing's process recorder (a process application's, following others in a
    ``System``), anchoring the heads of the threads its policy saves as the store's
    recorder does, in the transaction that records its position (ADR 0052)."""


class _JSONRecorder(_CheckedRows):
    """eventsourcing's aggregate recorder, rows sent as one JSON document (ADR 0015)."""

    def __init__(self, datastore: postgres.PostgresDatastore, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        insert = SQL(
            "INSERT INTO {schema}.{table} (originator_id, originator_version, topic, state) "
        )
        self.json_insert = insert.format(
            schema=Identifier(datastore.schema), table=Identifier(self.events_table_name)
        ) + select_rows(SQL("%s::json"), datastore.originator_id_type)

    def _insert_stored_events(
        self, curs: Any, stored_events: Sequence[StoredEvent], **_: Any
    ) -> None:
        curs.execute(self.json_insert, (rows_json(stored_events),))
        require_stored(self.events_table_name, curs.rowcount, len(stored_events))


class PostgresAggregateRecorder(KeyedEvents, _JSONRecorder):
    """The snapshots' recorder, storing stream ids as the store records."""


# eventsourcing looks for exactly one factory class in a persistence module.
class Factory(postgres.PostgresFactory):
    """eventsourcing's PostgreSQL factory, with the store's recorders, and the URL's
    further parameters (``sslmode`` and the like) given to every connection of its pool,
    which opens only on first use."""

    aggregate_recorder_class = PostgresAggregateRecorder
    application_recorder_class = PostgresApplicationRecorder
    process_recorder_class = PostgresProcessRecorder

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        kwargs = self.datastore.pool.kwargs
        assert isinstance(kwargs, dict)  # eventsourcing's pool passes its keywords as one
        kwargs.update(postgres_params(self.env))

    def env_create_table(self) -> bool:
        """As eventsourcing's, but never where the open found every table made
        (:data:`TABLES_MADE`): its statements are DDL, even those that would change
        nothing, and only the tables' owner may send them (ADR 0117)."""
        return super().env_create_table() and self.env.get(TABLES_MADE) != "y"


class _PostgresBackend(RecorderAnchors):
    """The port of the PostgreSQL back end (see
    :class:`~covonaut_es.store._backend.Backend`)."""

    name: BackendName = "postgres"
    keeps_one_snapshot = True
    anchoring_recorder = _AnchoringRecorder

    def owns(self, factory: InfrastructureFactory[Any]) -> bool:
        return isinstance(factory, postgres.PostgresFactory)

    def check_file(self, env: Mapping[str, str], shown: str) -> None:
        """Refuse a database that holds an eventsourcing application's event tables
        and no store's (ADR 0052): the store's tables would be created beside them;
        and a store whose tables were changed around the library (a column dropped,
        or given another type), which its statements would misread or fail on.

        Raises:
            ForeignSchemaError: It does, or they were.
            StoreUnavailableError: The database cannot be reached.
        """
        with connect(env) as conn:
            check_tables(conn, env, shown)

    def check_projection_file(self, env: Mapping[str, str], where: str) -> None:
        return  # a server's database: its failure to connect is typed as the view opens

    @contextlib.contextmanager
    def opening(self, env: Mapping[str, str], shown: str) -> Iterator[Mapping[str, str]]:
        """Check the database as :meth:`check_file` does; where a table is yet to be
        made, hold an advisory lock while eventsourcing creates its tables (processes
        opening a new database at the same moment otherwise fail with "tuple
        concurrently updated"), on one connection: each costs the open milliseconds.
        Where every table, index, column and the insert function is made, give ``env``
        with :data:`TABLES_MADE`: the open sends no DDL, which a role that does not own
        the tables may not send.

        Raises:
            StoreOwnerRequiredError: Something is yet to be made, and the role may not
                make it (ADR 0117).
        """
        with connect(env) as conn:
            missing = check_tables(conn, env, shown)
            if not missing:
                yield {**env, TABLES_MADE: "y"}  # no lock: nothing is made
                return
            if env.get("CREATE_TABLE") == "n" and f"table {STORE_EVENTS!r}" in missing:
                schema = env.get("POSTGRES_SCHEMA") or "public"
                msg = (
                    f"{shown}: the database holds no store (no table {STORE_EVENTS!r} in "
                    f"schema {schema!r}); check the database and schema the URL names, or "
                    "make the store by writing to it first"
                )
                raise NotAStoreError(msg)
            with schema_lock(conn):
                missing = check_tables(conn, env, shown)
                if not missing:  # another session made them meanwhile
                    yield {**env, TABLES_MADE: "y"}
                    return
                with made_by_the_owner(shown, missing):
                    yield env

    @contextlib.contextmanager
    def tables_lock(self, factory: InfrastructureFactory[Any]) -> Iterator[None]:
        # The factory's settings, not an environment's: an application of the user's
        # own leaves to eventsourcing's defaults what a store's URL spells out.
        assert isinstance(factory, postgres.PostgresFactory)
        kwargs = dict(factory.datastore.pool.kwargs)  # type: ignore[arg-type]
        with connected(kwargs) as conn, schema_lock(conn):
            yield

    def canonical_url(self, url: str, env: Mapping[str, str]) -> str:
        return url

    def close_connections(self, recorder: ApplicationRecorder) -> None:
        if isinstance(recorder, _AnchoringRecorder):  # its restores'; saves use the pool
            recorder.reads.close()

    def ping(self, recorder: ApplicationRecorder, timeout: float) -> None:
        # A connection of its own, outside the pool, whose reads eventsourcing retries
        # (9.5.6: ten times, each waiting up to the pool's timeout for a connection);
        # its statement may wait no longer than the ping (a lock on the table, say).
        if not isinstance(recorder, postgres.PostgresApplicationRecorder):
            recorder.max_notification_id()
            return
        datastore = recorder.datastore
        kwargs = dict(datastore.pool.kwargs)  # type: ignore[arg-type]
        kwargs["connect_timeout"] = math.ceil(timeout)
        waited = f"-c statement_timeout={math.ceil(timeout * 1000)}"
        kwargs["options"] = f"{kwargs.get('options') or ''} {waited}".strip()
        events = f'"{datastore.schema}"."{recorder.events_table_name}"'
        with connected(kwargs) as conn:
            conn.execute(f"SELECT max(notification_id) FROM {events}")

    # Retried as eventsourcing's reads are.
    @RETRIED
    def database_now(self, recorder: ApplicationRecorder) -> datetime | None:
        if not isinstance(recorder, postgres.PostgresApplicationRecorder):
            return None
        datastore = recorder.datastore
        with datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as curs:
            curs.execute("SELECT clock_timestamp()")
            row = curs.fetchone()
        assert row is not None
        now: datetime = row[0]
        return now

    # Retried as eventsourcing's reads are.
    @RETRIED
    def select_thread(
        self,
        events: ApplicationRecorder,
        snapshots: AggregateRecorder,
        stream: UUID,
        lte: int,
    ) -> ThreadRows | None:
        if not (
            isinstance(events, PostgresApplicationRecorder)
            and isinstance(snapshots, PostgresAggregateRecorder)
            and events.datastore is snapshots.datastore
        ):
            return None
        schema = events.datastore.schema
        statement = thread_rows_sql(
            f'"{schema}"."{snapshots.events_table_name}"',
            f'"{schema}"."{events.events_table_name}"',
            "%(stream)s",
            "%(lte)s",
            NO_VERSION,
        )
        stored = stored_stream(events, stream)  # the snapshots' recorder keys ids alike
        reading = f"stream {stored}"
        rows = events.reads.rows(statement, {"stream": stored, "lte": lte}, binary=True)
        with building_records(reading):  # a NULL payload fails bytes()
            return thread_rows(rows, stream, reading=reading, state=bytes)

    # Retried as eventsourcing's reads are.
    @RETRIED
    def select_openings(
        self, events: ApplicationRecorder, streams: Sequence[UUID], topics: Sequence[str]
    ) -> Openings | None:
        if not (isinstance(events, _CheckedRows) and events.datastore.originator_id_type == "uuid"):
            return None
        domain_of = {stored_stream(events, s): s for s in streams}
        table = f'"{events.datastore.schema}"."{events.events_table_name}"'
        statement = openings_sql(table, "= ANY(%s)", "= ANY(%s)", NO_TOPIC)
        with events.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as curs:
            curs.execute(statement, (list(domain_of), list(topics)), binary=True)
            rows = curs.fetchall()
        return opening_records(rows, domain_of, state=bytes)

    def settings_table(
        self, factory: InfrastructureFactory[Any], recorder: ApplicationRecorder, table: str
    ) -> SettingsTable:
        datastore: Any = getattr(recorder, "datastore", None)
        name = f'"{datastore.schema}".{table}'

        def exists(cursor: Any) -> bool:
            cursor.execute("SELECT to_regclass(%s) AS found", (name,))
            row = cursor.fetchone()
            return row is not None and column(row, 0, "found") is not None

        return SQLSettings(datastore, name, "%s", exists, retried=RETRIED)

    def replace_snapshot(self, snapshots: SnapshotCache, snapshot: ThreadSnapshot) -> None:
        """Store ``snapshot``, then delete its thread's older snapshots (a reader in
        between finds either) and vacuum the table, so that the next one reuses their
        space (ADR 0014).

        Raises:
            IntegrityError: The thread already has a snapshot at that version.
        """
        snapshots.put([snapshot])  # sealed (ADR 0030)
        recorder = snapshots.recorder
        assert isinstance(recorder, postgres.PostgresAggregateRecorder)
        table = f'"{recorder.datastore.schema}"."{recorder.events_table_name}"'
        thread = stored_stream(recorder, snapshot.originator_id)
        version = snapshot.originator_version
        with recorder.datastore.transaction(commit=True) as curs:
            curs.execute(
                f"DELETE FROM {table} WHERE originator_id = %s AND originator_version < %s",
                (thread, version),
            )
        # eventsourcing's tables are created with autovacuum all but off, so the deleted
        # snapshots' space would never be reused: free it now (outside a transaction).
        with recorder.datastore.get_connection() as conn:
            conn.execute(f"VACUUM {table}")

    def lease_backend(
        self, factory: InfrastructureFactory[Any], recorder: ApplicationRecorder, holder: str
    ) -> LeaseBackend:
        assert isinstance(factory, postgres.PostgresFactory)
        token_table = None
        if self.guards_new_streams(recorder):
            token_table = f'"{factory.datastore.schema}"."{lease_table(recorder)}"'
        stored = lambda stream: stored_stream(recorder, stream)  # noqa: E731
        kwargs = dict(factory.datastore.pool.kwargs)  # type: ignore[arg-type]
        workers = f'"{factory.datastore.schema}".{WORKERS_TABLE}'
        events = recorder.events_table_name  # type: ignore[attr-defined]
        tables = f"{factory.datastore.schema}.{events}"
        return PostgresLeases(holder, kwargs, token_table, stored, workers, tables)

    def summary_table(self, recorder: ApplicationRecorder) -> SummaryTable | None:
        if not (isinstance(recorder, PostgresApplicationRecorder) and recorder.keeps_summaries):
            return None
        return _side_table(
            recorder,
            SQLSummaries,
            SUMMARIES,
            "position BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, originator_id uuid "
            "NOT NULL UNIQUE, version BIGINT NOT NULL, seen BIGINT NOT NULL, "
            "summary BYTEA NOT NULL",
            indexed="seen",
        )

    def outstanding_table(self, recorder: ApplicationRecorder) -> OutstandingTable | None:
        return _side_table(
            recorder,
            SQLOutstanding,
            OUTSTANDING,  # ADR 0077: the rows of ADR 0054 meant more
            "originator_id uuid PRIMARY KEY, position BIGINT NOT NULL, state BYTEA NOT NULL",
        )

    def review_index_table(self, recorder: ApplicationRecorder) -> ReviewIndexTable | None:
        return _side_table(
            recorder,
            SQLReviewIndex,
            REVIEWS,
            "review text NOT NULL, position BIGINT NOT NULL, state BYTEA NOT NULL, "
            "PRIMARY KEY (review, position)",
        )

    def make_tables(self, recorder: ApplicationRecorder) -> None:
        if isinstance(recorder, PostgresApplicationRecorder):
            # First: the side tables' first writes need their keys (ON CONFLICT).
            make_indexes(recorder.datastore)
        for table in (
            self.summary_table(recorder),
            self.outstanding_table(recorder),
            self.review_index_table(recorder),
        ):
            if isinstance(table, SQLSideTable):
                table.make()
        if isinstance(recorder, PostgresApplicationRecorder):
            with recorder.datastore.transaction(commit=True) as curs:
                make_workers_table(curs, f'"{recorder.datastore.schema}".{WORKERS_TABLE}')
            # Made by eventsourcing's factory on first use, which an open that found
            # every table made tells to send no DDL (ADR 0117).
            postgres.PostgresTrackingRecorder(
                recorder.datastore, tracking_table_name=TRACKING_TABLE
            ).create_table()


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
    if not (isinstance(recorder, PostgresApplicationRecorder) and recorder.anchoring):
        return None
    schema = recorder.datastore.schema
    name = f"{recorder.events_table_name}_{suffix}"
    table = f'"{schema}"."{name}"'
    create = [
        # Processes using it on a store for the first time at once create it once.
        f"SELECT pg_advisory_xact_lock(hashtext({_literal(f'{schema}.{name}')}))",
        f"CREATE TABLE IF NOT EXISTS {table} ({columns})",
    ]
    made = [table]
    if indexed:
        create.append(f'CREATE INDEX IF NOT EXISTS "{name}_{indexed}" ON {table} ({indexed})')
        made.append(f'"{schema}"."{name}_{indexed}"')
    found = " AND ".join(f"to_regclass({_literal(each)}) IS NOT NULL" for each in made)
    return kind(
        recorder.datastore,
        lambda: recorder.datastore.transaction(commit=True),
        table=table,
        create=create,
        found=f"SELECT {found} AS found",
        placeholder="%s",
        stored=lambda stream: stream,
        reading=lambda: _reading(recorder.datastore),
        retried=RETRIED,
        serialized=create[0],  # the lock its creation takes, held to the commit
        **options,
    )


@contextlib.contextmanager
def _reading(datastore: Any) -> Iterator[Any]:
    """A cursor for reads, outside a transaction (a read of one statement needs none:
    the begin and rollback were most of a short read's cost), giving rows as tuples
    sent in binary: the datastore's mappings, and bytes sent as text, would cost as
    much again as the select (a listing reads thousands of summaries)."""
    with datastore.get_connection() as connection:
        yield connection.cursor(row_factory=tuple_row, binary=True)


def _literal(text: str) -> str:
    """``text`` as a SQL string literal (a name of ours, its parts quoted or not)."""
    return "'" + text.replace("'", "''") + "'"


BACKEND = _PostgresBackend()
"""This back end's port."""
