"""Hostile values in a store's rows: every reading command, on the command line and
through the API, gives a typed one-line error or a finding, never a traceback.

A SQLite store holds a finished thread with a named state, a snapshotted thread (an event
after its snapshot), a fork and a pending review. One stored value (of any table, column
and row) becomes NULL, text, an integer, zero, a negative, a huge number, a real, a
blob, empty text, JSON, or the value of another row; then one reading command runs on it.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import io
import json
import logging
import re
import secrets
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from covonaut_es import (
    Agent,
    AgentApplication,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    CovonautError,
    HmacReviewerVerifier,
    ProviderRequest,
    ProviderResponse,
    ScriptedProvider,
    Store,
    Tool,
    ToolContext,
    open_store,
)
from covonaut_es.audit import check_store, export_thread
from covonaut_es.cli import main
from covonaut_es.domain import RunMode, thread_aggregate_id
from covonaut_es.errors import LeaseLostError, StoredRowError
from covonaut_es.inbox import create_app
from covonaut_es.messages import Message, Role
from covonaut_es.projections import ReviewQueue
from covonaut_es.projections._items import QUEUE_EVENT_TYPES
from covonaut_es.service import ThreadService, review_submission
from covonaut_es.store._writer import SNAPSHOT_MIN_VERSION
from covonaut_es.workers import NoticeSender, ReviewNotice, Worker
from covonaut_es.workers._notices import NOTICE_EVENTS
from inbox_support import current
from inbox_support import paused as paused_in_inbox
from support import answer, call, converse, ticking_clock
from test_abandoned_reviews import RITA, VERIFIER, paused, paying
from test_approvals import ALICE
from test_approvals import VERIFIER as INBOX_VERIFIER

RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""A character no command may print raw (a newline may end a line)."""

THREADS = ("a", "long", "a-fork", "w")
"""A finished thread (with a named state ``a``), a snapshotted one, a fork of the first
and one paused on a review."""

SHAPES: dict[str, Any] = {
    "NULL": None,
    "text": "x",
    "int": 7,
    "negative": -5,
    "zero": 0,
    "huge": 2**63 - 1,
    "beyond": "9223372036854775808e0",  # stored as a REAL past any integer
    "real": 1.5,
    "blob": b"\x00\xff\xfe",
    "empty": "",
    "JSON": '{"a": [1, null]}',
    "other row": "<the same column of another row>",
    # Bytes kept, type changed: a payload or a hash sqlite3 cannot decode as UTF-8.
    "as text": "<the value, CAST AS TEXT>",
    "text not UTF-8": "<CAST(x'ff28' AS TEXT)>",
}

CLI_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("threads",),
    ("threads", "--json"),
    ("show", "a"),
    ("show", "long"),
    ("history", "a"),
    ("history", "long", "--json"),
    ("replay", "a"),
    ("replay", "--verify", "a-fork"),
    ("replay", "--verify", "long"),
    ("tree", "a"),
    ("export", "a-fork"),
    ("reviews",),
    ("workers",),
    ("migrate", "--check"),
)


def _api(read: Callable[[Store], object]) -> Callable[[str], object]:
    def run(url: str) -> object:
        with open_store(url, create_tables=False) as store:
            return read(store)

    return run


API_READS: dict[str, Callable[[str], object]] = {
    "load": _api(lambda s: [s.load(t) for t in THREADS if s.exists(t)]),
    "state_at": _api(lambda s: [s.state_at(t, 3) for t in THREADS]),
    "history": _api(lambda s: s.history("long")),
    "verify": _api(lambda s: [s.verify(t) for t in THREADS]),
    "replay": _api(lambda s: list(s.replay("a-fork"))),
    "thread_ids": _api(lambda s: list(s.thread_ids())),
    "forks": _api(lambda s: (s.forks(), s.parent("a-fork"))),
    "checkpoints": _api(lambda s: s.checkpoints("a")),
    "read_state": _api(lambda s: s.read_state("a")),
    "export": _api(lambda s: list(export_thread(s, "a-fork", with_ancestors=True))),
    "check": _api(lambda s: check_store(s)),
}


def write_threads(url: str) -> None:
    """Write the four threads into the store at ``url``."""
    with open_store(url) as store:
        converse(store, "a")
        store.fork("a", new_thread_id="a-fork", at_version=4)
        long = AgentThread.start("long", now=ticking_clock()())
        for n in range(SNAPSHOT_MIN_VERSION + 4):
            long.append_message(Message(Role.USER, f"message {n}"), now=ticking_clock()())
        store.save(long)
        assert store.snapshot_if_due(long)
        long.append_message(Message(Role.USER, "after the snapshot"), now=ticking_clock()())
        store.save(long)  # a load reads the snapshot and the events after it
        assert paying(store, "w").run("Pay bob 40.") == ""


def _store_in(directory: Path) -> Path:
    """A store with the four threads, as one file (its log checkpointed)."""
    path = directory / "threads.db"
    write_threads(f"sqlite:///{path}")
    pristine = directory / "pristine.db"
    with (
        contextlib.closing(sqlite3.connect(path)) as source,
        contextlib.closing(sqlite3.connect(pristine)) as target,
    ):
        source.backup(target)
    return pristine


@functools.cache
def _pristine() -> Path:
    directory = tempfile.mkdtemp(prefix="hostile-rows-")
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return _store_in(Path(directory))


def _cells(pristine: Path) -> list[tuple[str, str]]:
    """Every (table, column) of the store."""
    with contextlib.closing(sqlite3.connect(pristine)) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return [
            (table, column[1])
            for table in sorted(tables)
            for column in conn.execute(f"PRAGMA table_info({table})")
        ]


CELLS = _cells(_pristine())


def _mutate(path: Path, table: str, column: str, row: int, shape: str) -> bool:
    """Change one value of ``path``'s store; False when the table has no row or its
    constraints refuse the value."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        keys = [c[1] for c in conn.execute(f"PRAGMA table_info({table})") if c[5]] or ["rowid"]
        found = conn.execute(f"SELECT {', '.join(keys)} FROM {table} ORDER BY 1").fetchall()
        if not found:
            return False
        where = " AND ".join(f"{key} IS ?" for key in keys)
        target = found[row % len(found)]
        if shape == "other row":
            other = found[(row + 1) % len(found)]
            value, params = f"(SELECT {column} FROM {table} WHERE {where})", (*other, *target)
        elif shape == "beyond":
            value, params = "9223372036854775808", target
        elif shape == "as text":
            value, params = f"CAST({column} AS TEXT)", target
        elif shape == "text not UTF-8":
            value, params = "CAST(x'ff28' AS TEXT)", target
        else:
            value, params = "?", (SHAPES[shape], *target)
        try:
            conn.execute(f"UPDATE {table} SET {column} = {value} WHERE {where}", params)
        except sqlite3.IntegrityError:  # a key taken, a NOT NULL column
            return False
        conn.commit()
    return True


@contextlib.contextmanager
def mutated(table: str, column: str, row: int, shape: str) -> Iterator[str | None]:
    """A copy of the store with one value changed; its URL, or None when the value
    cannot be changed so."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "threads.db"
        shutil.copyfile(_pristine(), path)
        yield f"sqlite:///{path}" if _mutate(path, table, column, row, shape) else None


def run_cli(url: str, command: tuple[str, ...]) -> tuple[int, str, str]:
    """Run a command in this process; its status, stdout and stderr (without the
    library's log lines, such as a snapshot passed over)."""
    out, err = io.StringIO(), io.StringIO()
    logs = logging.getLogger("covonaut_es")
    handler = logging.NullHandler()
    logs.addHandler(handler)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main([command[0], "--store", url, *command[1:]])
    finally:
        logs.removeHandler(handler)
    return status, out.getvalue(), err.getvalue()


def check_case(table: str, column: str, row: int, shape: str, reader: str) -> None:
    """Run one reader on one mutated store; fail on anything but a result, a finding
    or a typed one-line error."""
    with mutated(table, column, row, shape) as url:
        if url is None:
            return
        if reader in API_READS:
            with contextlib.suppress(CovonautError):
                API_READS[reader](url)
            return
        status, _, err = run_cli(url, tuple(reader.split(" ")))
        assert status in (0, 1, 2), (status, err)
        assert "Traceback" not in err, err
        assert err.count("\n") <= 1, err


READERS = sorted([" ".join(c) for c in CLI_COMMANDS] + list(API_READS))


@settings(max_examples=300, deadline=None)
@given(
    cell=st.sampled_from(CELLS),
    row=st.integers(0, 10_000),  # any row of the table, taken modulo its size
    shape=st.sampled_from(sorted(SHAPES)),
    reader=st.sampled_from(READERS),
)
def test_no_hostile_stored_value_makes_a_reading_command_crash(
    cell: tuple[str, str], row: int, shape: str, reader: str
) -> None:
    """Whatever single stored value is made hostile, every reading command (command line
    and API) gives a result, a finding or a typed one-line error: never a traceback."""
    check_case(*cell, row, shape, reader)


@settings(max_examples=40, deadline=None)
@given(
    column=st.sampled_from(["version", "chain"]),
    row=st.integers(0, 10_000),
    shape=st.sampled_from(sorted(set(SHAPES) - {"other row"})),
)
def test_a_damaged_head_anchor_is_its_own_threads_finding_only(
    column: str, row: int, shape: str
) -> None:
    """One value of one thread's head anchor made hostile: that thread's verify reports
    it (a finding, never an error), and every other thread still verifies intact."""
    with mutated("stored_events_heads", column, row, shape) as url:
        if url is None:
            return
        with open_store(url) as store:
            reports = {t: store.verify(t) for t in THREADS}
    damaged = [t for t, report in reports.items() if not report.ok]
    assert len(damaged) <= 1, reports


# Writing commands read two stored values besides the events: a thread's head anchor (every
# save checks it follows it) and its run lease's token (a run's take, and every fenced save).
# A writer around the library leaves one of them hostile in every row (NULL once it rebuilt
# the table without NOT NULL); the command gives a typed refusal and records nothing.

SAVE_READ_SHAPES: dict[str, Any] = {
    "text": "abc",
    "blob": b"\x01",
    "real": 1.5,
    "NULL": None,
    "negative": -5,
    "huge": 2**63 - 1,
    "beyond": 2.0**63,  # a REAL past any integer
}

SAVING_COMMANDS: dict[str, tuple[str, ...]] = {
    # A decision and a fork take no lease (they commute with a run): they read no token.
    "stored_events_leases.token": ("run", "run, hostile during it"),
    "stored_events_heads.version": ("run", "run, hostile during it", "decision", "fork"),
}


def _charging(store: Store, during: Callable[[], None]) -> Agent:
    """An agent on thread ``r`` whose model calls ``charge`` once per run, and whose
    ``charge`` calls ``during`` first."""

    def model(request: ProviderRequest) -> ProviderResponse:
        if request.messages[-1].role is Role.TOOL:
            return answer("done")
        return call(("c1", "charge", "{}"))

    def charge(ctx: ToolContext, args: dict[str, Any]) -> str:
        during()
        return "charged"

    return Agent(
        AgentConfig(
            provider=ScriptedProvider(respond=model),
            tools=[Tool("charge", "Charge", {"type": "object"}, charge)],
            checkpoint=CheckpointSettings(store=store, thread_id="r"),
            clock=ticking_clock(),
        )
    )


class _HostileWriter:
    """A writer around the library, on the store's file: it gives ``column`` of every
    row of ``table`` a hostile value, then tells what it left."""

    def __init__(self, path: Path, cell: str, shape: str) -> None:
        self.path, self.value = path, SAVE_READ_SHAPES[shape]
        self.table, self.column = cell.split(".")
        self.events_then: int | None = None

    def _query(self, statement: str, *params: object) -> list[tuple[Any, ...]]:
        with contextlib.closing(sqlite3.connect(self.path)) as conn, conn:
            return conn.execute(statement, params).fetchall()

    def write(self, *, row_for: str | None = None) -> None:
        """Give every row the value (and first add a row for thread ``row_for``, its
        stream keyed as the table keys the others')."""
        if self.value is None:
            self._nullable()
        if row_for is not None:
            (kind,) = self._query(f"SELECT typeof(originator_id) FROM {self.table} LIMIT 1")[0]
            stream = thread_aggregate_id(row_for)
            key = stream.bytes if kind == "blob" else stream.hex
            self._query(
                f"INSERT INTO {self.table} SELECT ?, {self.column}, chain "
                f"FROM {self.table} LIMIT 1",
                key,
            )
        self._query(f"UPDATE {self.table} SET {self.column} = ?", self.value)
        self.events_then = self._events()

    def _nullable(self) -> None:
        """Rebuild the table with its column allowing NULL."""
        ((made,),) = self._query("SELECT sql FROM sqlite_master WHERE name = ?", self.table)
        with contextlib.closing(sqlite3.connect(self.path)) as conn, conn:
            conn.execute(f"ALTER TABLE {self.table} RENAME TO hostile_old")
            conn.execute(made.replace(f"{self.column} INTEGER NOT NULL", f"{self.column} INTEGER"))
            conn.execute(f"INSERT INTO {self.table} SELECT * FROM hostile_old")
            conn.execute("DROP TABLE hostile_old")

    def _events(self) -> int:
        return int(self._query("SELECT count(*) FROM stored_events")[0][0])

    def left_as_written(self) -> bool:
        """No event was recorded since, and every row still holds the value."""
        found = {row[0] for row in self._query(f"SELECT {self.column} FROM {self.table}")}
        return self._events() == self.events_then and found == {self.value}


def _run_with_hostile(store: Store, writer: _HostileWriter, *, during: bool) -> None:
    _charging(store, lambda: None).run("Charge.")  # its lease row and anchor, as left
    if not during:
        writer.write()
        _charging(store, lambda: None).run("Charge again.")
        return
    _charging(store, writer.write).run("Charge again.")


def _decide_with_hostile(store: Store, writer: _HostileWriter) -> None:
    review_id = paused(store, "w")
    writer.write()
    commands = ThreadService(store, verifier=VERIFIER)
    reviewer = commands.reviewer(RITA)
    commands.decide(review_id, review_submission("approve", text="ok"), reviewer=reviewer)


def _fork_with_hostile(store: Store, writer: _HostileWriter) -> None:
    converse(store, "a")
    writer.write(row_for="a-fork")  # an anchor left for the thread the fork makes
    store.fork("a", new_thread_id="a-fork", at_version=4)


SAVES: dict[str, Callable[[Store, _HostileWriter], None]] = {
    "run": functools.partial(_run_with_hostile, during=False),
    "run, hostile during it": functools.partial(_run_with_hostile, during=True),
    "decision": _decide_with_hostile,
    "fork": _fork_with_hostile,
}


@pytest.mark.parametrize("shape", sorted(SAVE_READ_SHAPES))
@pytest.mark.parametrize(
    ("cell", "command"),
    [(cell, command) for cell, commands in SAVING_COMMANDS.items() for command in commands],
)
def test_a_hostile_anchor_version_or_lease_token_refuses_a_save_typed(
    tmp_path: Path, cell: str, command: str, shape: str
) -> None:
    """A head anchor's version or a lease's token made text, a blob, a real, NULL, a
    negative or past any version (before a run takes its lease, while it holds it, before
    a decision or a fork): the command is refused with a StoredRowError naming the column
    (or, for an integer past the version saved or the lease held, as a head ahead of its
    events or a lease lost), records nothing, and leaves the row as the writer left it
    (a token 'abc' is not advanced to 1)."""
    path = tmp_path / "threads.db"
    writer = _HostileWriter(path, cell, shape)
    with open_store(f"sqlite:///{path}") as store, pytest.raises(CovonautError) as raised:
        SAVES[command](store, writer)
    assert isinstance(raised.value, (StoredRowError, LeaseLostError)), repr(raised.value)
    if isinstance(raised.value, StoredRowError):
        assert writer.column in str(raised.value), raised.value  # names the column
    assert writer.left_as_written()


@pytest.mark.parametrize(
    ("table", "column", "shape", "reader"),
    [
        ("stored_events", "state", "as text", "history long --json"),
        ("stored_events", "state", "as text", "threads"),
        ("stored_snapshots", "state", "as text", "replay --verify long"),
        ("stored_events", "topic", "text not UTF-8", "verify"),
        ("stored_events_heads", "chain", "text not UTF-8", "replay --verify a"),
        ("stored_events", "state", "NULL", "history long --json"),
        ("stored_events", "originator_id", "blob", "history a"),
        ("stored_events", "originator_id", "text", "migrate --check"),
        ("stored_events", "originator_version", "text", "replay --verify a-fork"),
        ("stored_events_heads", "version", "text", "verify"),
        ("stored_snapshots", "state", "int", "load"),
        ("stored_snapshots", "originator_version", "JSON", "replay --verify long"),
        ("stored_events_heads", "originator_id", "negative", "verify"),
        # The queue's reader failed before its subscription could be stopped: the
        # listing then waited its whole timeout instead of saying why.
        ("stored_events", "state", "real", "reviews"),
        ("stored_events", "topic", "int", "reviews --json"),
        # A fork's first event moved into a named state's stream: an AssertionError.
        ("stored_events", "originator_id", "other row", "read_state"),
    ],
)
def test_the_hostile_values_found_before_give_typed_errors(
    table: str, column: str, shape: str, reader: str
) -> None:
    """The pairs that printed a traceback before each give a typed error or a finding."""
    for row in range(3):
        check_case(table, column, row, shape, reader)


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("table", "column"),
    [
        ("covonaut_events", "topic"),
        ("covonaut_events", "state"),
        ("covonaut_snapshots", "topic"),
        ("covonaut_snapshots", "state"),
    ],
)
@pytest.mark.parametrize("reader", ["history long", "migrate --check"])
def test_a_null_in_a_postgresql_row_gives_a_typed_error(
    postgres_database: str, table: str, column: str, reader: str
) -> None:
    """PostgreSQL's columns allow NULL topics and payloads: its recorders check rows as
    SQLite's do, and a reading command says which row in one line."""
    import psycopg

    write_threads(postgres_database)
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        conn.execute(f"UPDATE {table} SET {column} = NULL")
    status, _, err = run_cli(postgres_database, tuple(reader.split(" ")))
    assert status in (0, 1, 2), err
    assert "Traceback" not in err and err.count("\n") <= 1, err


@pytest.fixture(scope="module")
def pristine_postgres(postgres_url: str) -> Iterator[str]:
    """The name of a PostgreSQL database holding the four threads, to copy from."""
    import psycopg

    name = f"hostile_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    write_threads(postgres_url.rsplit("/", 1)[0] + f"/{name}")
    yield name
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


PG_SHAPES: dict[str, Any] = {
    **{k: v for k, v in SHAPES.items() if k not in ("beyond", "other row")},
    "control": "\x1b]0;owned\x07\x1b[2J\u202e",
    "a stream": "6f1d2a8e-5b7c-4c39-9a51-2f0e8c4d7b13",
}
"""What a PostgreSQL column may be set to (its type refuses the rest): NULL once the
writer dropped the column's NOT NULL."""


@pytest.mark.postgres
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), row=st.integers(0, 10_000), reader=st.sampled_from(READERS))
def test_no_hostile_postgresql_value_makes_a_reading_command_crash(
    postgres_url: str, pristine_postgres: str, data: st.DataObject, row: int, reader: str
) -> None:
    """On PostgreSQL as on SQLite: whatever single value its column types let a writer
    store (NULL, a negative or huge number, text with escape sequences, a blob, another
    stream's id), every reading command gives a result, a finding or a typed one-line
    error, and prints no raw control character."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {pristine_postgres}")
    url = postgres_url.rsplit("/", 1)[0] + f"/{name}"
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            cells = conn.execute(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = 'public' ORDER BY 1, 2"
            ).fetchall()
            table, column = data.draw(st.sampled_from(cells))
            shape = data.draw(st.sampled_from(sorted(PG_SHAPES)))
            rows = conn.execute(f"SELECT ctid FROM {table} ORDER BY ctid").fetchall()
            if not rows:
                return
            target = rows[row % len(rows)][0]
            try:
                if shape == "NULL":
                    conn.execute(f"ALTER TABLE {table} ALTER COLUMN {column} DROP NOT NULL")
                conn.execute(
                    f"UPDATE {table} SET {column} = %s WHERE ctid = %s",
                    (PG_SHAPES[shape], target),
                )
            except psycopg.Error:  # the column's type or a key refuses it
                return
        if reader in API_READS:
            with contextlib.suppress(CovonautError):
                API_READS[reader](url)
            return
        status, out, err = run_cli(url, tuple(reader.split(" ")))
        assert status in (0, 1, 2), (status, err)
        assert "Traceback" not in err, err
        assert not RAW_CONTROL.search(out + err), (out + err)[:2000]
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


_RETYPED = "ALTER TABLE {table} ALTER COLUMN {column} DROP DEFAULT, ALTER COLUMN {column} TYPE "
COLUMN_CHANGES: dict[str, str] = {
    "text": _RETYPED + "text USING {column}::text",
    "varchar": _RETYPED + "varchar(100) USING {column}::varchar(100)",
    "bytea": _RETYPED + "bytea USING convert_to({column}::text, 'UTF8')",
    "jsonb": _RETYPED + "jsonb USING to_jsonb({column})",
    "text[]": _RETYPED + "text[] USING ARRAY[{column}::text]",
    "numeric": _RETYPED + "numeric USING {column}::text::numeric",
    "real": _RETYPED + "double precision USING {column}::text::double precision",
    "uuid": _RETYPED + "uuid USING {column}::text::uuid",
    "nullable": "ALTER TABLE {table} ALTER COLUMN {column} DROP NOT NULL",
    "a NULL": (
        "ALTER TABLE {table} ALTER COLUMN {column} DROP NOT NULL; "
        "UPDATE {table} SET {column} = NULL WHERE ctid = (SELECT ctid FROM {table} LIMIT 1)"
    ),
    "dropped": "ALTER TABLE {table} DROP COLUMN {column} CASCADE",
}
"""What a writer may do to a column of a store's table: give it another type, with the
expression that converts its values (where PostgreSQL can: else the change is passed
over), let it hold NULL (and give a row one), or drop it."""

_REPLACED = (
    "ALTER TABLE {table} RENAME TO {table}_kept; "
    "CREATE {kind} {table} AS SELECT * FROM {table}_kept"
)
TABLE_CHANGES: dict[str, str] = {
    "view": _REPLACED.replace("{kind}", "VIEW"),
    "materialized view": _REPLACED.replace("{kind}", "MATERIALIZED VIEW"),
    "every column dropped": (
        # One statement: ";" without a space does not end it for changed().
        "DO $$ DECLARE c text;BEGIN FOR c IN SELECT attname FROM pg_attribute WHERE "
        "attrelid = '{table}'::regclass AND attnum > 0 AND NOT attisdropped LOOP "
        "EXECUTE format('ALTER TABLE {table} DROP COLUMN %I CASCADE', c);END LOOP;END $$"
    ),
}
"""What a writer may do to a store's table as a whole: put a view in its place (of the
same rows), or drop every column."""

STORE_TABLES: dict[str, tuple[str, ...]] = {
    "covonaut_events": ("originator_id", "originator_version", "topic", "state", "notification_id"),
    "covonaut_snapshots": ("originator_id", "originator_version", "topic", "state"),
    "covonaut_events_heads": ("originator_id", "version", "chain"),
    "covonaut_events_leases": ("originator_id", "token"),
    "covonaut_events_summaries": ("originator_id", "version", "seen", "summary"),
    "covonaut_settings": ("name", "value"),
}
"""A PostgreSQL store's tables and their columns (the summaries' once a listing made them)."""

STORE_COLUMNS = tuple(
    (table, column) for table, columns in STORE_TABLES.items() for column in columns
)

AUDITS = {"verify", "check"}
"""The reads that report what is wrong with a store rather than raise it."""

LOG_READS: dict[str, Callable[[str], object]] = {
    **API_READS,
    "log": _api(lambda s: (s.last_log_position(), s.tree("a"))),
}
"""The API's reads, and those that read the store's log by position."""


def _digest(result: object) -> str:
    return hashlib.sha256(repr(result).encode()).hexdigest()[:16]


def _database_url(postgres_url: str, name: str) -> str:
    return postgres_url.rsplit("/", 1)[0] + f"/{name}"


@contextlib.contextmanager
def copied_store(postgres_url: str, pristine: str) -> Iterator[str]:
    """The URL of a copy of the database ``pristine``, dropped afterwards."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {pristine}")
    try:
        yield _database_url(postgres_url, name)
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def changed(url: str, statements: str) -> bool:
    """Whether PostgreSQL made the changes ``statements`` (``; ``-separated) at ``url``."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        try:
            for statement in statements.split("; "):
                conn.execute(statement)
        except psycopg.Error:  # the values do not convert, or the table is not made yet
            return False
    return True


def reads_as_it_was_or_not_at_all(url: str, reader: str, pristine_reads: dict[str, str]) -> None:
    """An API read gives what it gave on the pristine store or a typed error (an audit
    may report the damage instead); a command gives its output or a typed one-line
    error, never a traceback."""
    if reader in LOG_READS:
        with contextlib.suppress(CovonautError):
            result = LOG_READS[reader](url)
            reports = result if isinstance(result, list) else [result]
            if reader in AUDITS and not all(report.ok for report in reports):
                return  # the damage found, as an audit is for
            assert _digest(result) == pristine_reads[reader], reader
        return
    status, _, err = run_cli(url, tuple(reader.split(" ")))
    assert status in (0, 1, 2), (status, err)
    assert "Traceback" not in err and err.count("\n") <= 1, err


@pytest.fixture(scope="module")
def pristine_reads(postgres_url: str, pristine_postgres: str) -> dict[str, str]:
    """What each of the API's reads gives on a copy of the pristine store (a digest of its
    repr: Hypothesis shows its test's arguments)."""
    with copied_store(postgres_url, pristine_postgres) as url:
        return {reader: _digest(read(url)) for reader, read in LOG_READS.items()}


@pytest.mark.postgres
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    changes=st.lists(
        st.tuples(st.sampled_from(STORE_COLUMNS), st.sampled_from(sorted(COLUMN_CHANGES))),
        min_size=1,
        max_size=3,
    ),
    reader=st.sampled_from(sorted({*READERS, *LOG_READS})),
)
# Every payload made text: the audit reports it, which the test took for a changed read.
@example(changes=[(("covonaut_events", "state"), "bytea")], reader="check")
def test_a_table_changed_around_the_library_reads_as_it_was_or_not_at_all(
    postgres_url: str,
    pristine_postgres: str,
    pristine_reads: dict[str, str],
    changes: list[tuple[tuple[str, str], str]],
    reader: str,
) -> None:
    """A writer may change columns of the store's tables (give a stream id the type text,
    a position numeric, a topic an array; let one hold NULL; drop it): every read then
    gives exactly what it gave before, or a typed error; a command gives a one-line
    error, never a traceback."""
    with copied_store(postgres_url, pristine_postgres) as url:
        made = [
            changed(url, COLUMN_CHANGES[change].format(table=table, column=column))
            for (table, column), change in changes
        ]
        if any(made):
            reads_as_it_was_or_not_at_all(url, reader, pristine_reads)


@pytest.mark.postgres
@pytest.mark.parametrize("change", sorted(TABLE_CHANGES))
@pytest.mark.parametrize("table", sorted(STORE_TABLES))
def test_a_table_replaced_around_the_library_reads_as_it_was_or_not_at_all(
    postgres_url: str,
    pristine_postgres: str,
    pristine_reads: dict[str, str],
    table: str,
    change: str,
) -> None:
    """Each of the store's tables replaced by a view of its rows, or stripped of every
    column: every API read gives exactly what it gave before, or a typed error, and
    the listing, the queue and a thread's history say so in one line."""
    with copied_store(postgres_url, pristine_postgres) as url:
        if not changed(url, TABLE_CHANGES[change].format(table=table)):
            assert table.endswith("_summaries"), "made by a listing: not in the pristine store"
            return
        for reader in (*LOG_READS, "threads", "reviews", "history long"):
            reads_as_it_was_or_not_at_all(url, reader, pristine_reads)


LAYOUT_EVENTS = {"sqlite": "stored_events", "postgres": "covonaut_events"}

_MOVED = {
    "sqlite": (
        "UPDATE stored_events SET rowid = ? "
        "WHERE rowid = (SELECT rowid FROM stored_events ORDER BY rowid LIMIT 1 OFFSET ?)"
    ),
    "postgres": (
        "UPDATE covonaut_events SET notification_id = %s WHERE notification_id = "
        "(SELECT notification_id FROM covonaut_events ORDER BY 1 LIMIT 1 OFFSET %s)"
    ),
}
"""A row of the log (the ``OFFSET``-th) given another position, on each back end."""


@contextlib.contextmanager
def _store_copy(request: pytest.FixtureRequest, backend: str) -> Iterator[tuple[str, Any]]:
    """A copy of the pristine store on ``backend``: its URL, and a connection to it."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "threads.db"
            shutil.copy(_pristine(), path)
            with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
                yield f"sqlite:///{path}", conn
        return
    import psycopg

    server = request.getfixturevalue("postgres_url")
    with (
        copied_store(server, request.getfixturevalue("pristine_postgres")) as url,
        psycopg.connect(url, autocommit=True) as conn,
    ):
        yield url, conn


_QUEUE_AS_PRISTINE: dict[str, str] = {}

ON_EACH_BACKEND = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
COPIED_PER_EXAMPLE = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
"""The health checks a test that copies a store per example passes over."""


@ON_EACH_BACKEND
@settings(max_examples=15, deadline=None, suppress_health_check=COPIED_PER_EXAMPLE)
@given(
    row=st.integers(0, 10_000),
    among_the_newest=st.booleans(),  # the paused thread's, which the queue lists, are last
    position=st.sampled_from([0, -1, -(2**40)]),
)
def test_a_row_moved_before_the_logs_start_is_read_or_refused(
    request: pytest.FixtureRequest, backend: str, row: int, among_the_newest: bool, position: int
) -> None:
    """A writer may give a row of the log a position before 1, which a read from a position
    passes over: the reviewer queue then lists what it listed before or refuses the row
    by name, and a check of the store reports it, on both back ends."""
    if backend not in _QUEUE_AS_PRISTINE:
        with _store_copy(request, backend) as (url, _):
            _QUEUE_AS_PRISTINE[backend] = run_cli(url, ("reviews", "--json"))[1]
    with _store_copy(request, backend) as (url, conn):
        rows = conn.execute("SELECT COUNT(*) FROM " + LAYOUT_EVENTS[backend]).fetchone()[0]
        offset = rows - 1 - row % 8 if among_the_newest else row % rows
        conn.execute(_MOVED[backend], (position, offset))
        status, out, err = run_cli(url, ("reviews", "--json"))
        assert (status, out) == (0, _QUEUE_AS_PRISTINE[backend]) or (
            status == 2 and "notification_id" in err and err.count("\n") == 1
        ), (status, out, err)
        with pytest.raises(StoredRowError, match="notification_id"):
            API_READS["check"](url)


def _worker_runs_the_approved(store: Store, moved: Callable[[], None]) -> None:
    """A worker, having run before and after ``moved``, runs ``w`` once it is approved."""
    worker = Worker(store, lambda thread_id: paying(store, thread_id).config)
    worker.run(once=True)
    moved()
    worker.run(once=True)
    [request] = paying(store, "w").pending_reviews
    commands = ThreadService(store, verifier=VERIFIER)
    submission = review_submission("approve")
    reviewer = commands.reviewer(RITA)
    commands.decide(request.review_id, submission, reviewer=reviewer, thread_id="w")
    worker.run(once=True)
    assert paying(store, "w").pending_reviews == ()


def _queue_lists_the_new(store: Store, moved: Callable[[], None]) -> None:
    """The review queue, caught up before and after ``moved``, lists a review asked
    afterwards."""
    with ReviewQueue(store.url) as queue, queue.follow() as runner:
        queue.wait_until_current(store, runner=runner)
        moved()
        queue.wait_until_current(store, runner=runner)
        review_id = paused(store, "v")
        queue.wait_until_current(store, runner=runner)
        assert review_id in {item.review_id for item in queue.pending()}
        assert queue.threads_with_review(review_id, store) == ("v",)


def _index_finds_the_new(store: Store, moved: Callable[[], None]) -> None:
    """The store's index of review ids, caught up before and after ``moved``, finds a
    review asked afterwards."""
    store.threads_with_review("no such review")
    moved()
    store.threads_with_review("no such review")
    assert store.threads_with_review(paused(store, "v")) == ("v",)


def _listing_lists_the_new(store: Store, moved: Callable[[], None]) -> None:
    """The listing of threads, brought up to date before and after ``moved``, lists a
    thread begun afterwards."""
    store.list_threads()
    moved()
    store.list_threads()
    paused(store, "v")
    assert "v" in {summary.thread_id for summary in store.list_threads().threads}


def _sender_notifies_the_new(store: Store, moved: Callable[[], None]) -> None:
    """The review-notice sender, having sent before and after ``moved``, sends the notice
    of a review asked afterwards."""
    sent: list[ReviewNotice] = []
    sender = NoticeSender(store, sent.append)
    sender.send_pending()
    moved()
    sender.send_pending()
    review_id = paused(store, "v")
    sender.send_pending()
    assert review_id in {notice.review_id for notice in sent}


FOLLOWERS: dict[str, Callable[[Store, Callable[[], None]], None]] = {
    "listing": _listing_lists_the_new,
    "worker": _worker_runs_the_approved,
    "review queue": _queue_lists_the_new,
    "review index": _index_finds_the_new,
    "notice sender": _sender_notifies_the_new,
}
"""Each follower of the log, catching up before and after its second argument moves
the row, then reading what was written afterwards."""

_LAST_NUMBERED = {
    "sqlite": "SELECT max(rowid) FROM stored_events",
    "postgres": "SELECT last_value FROM covonaut_events_notification_id_seq",
}
"""The position a new event is numbered after, on each back end."""

_NEWEST_MOVED = {
    "sqlite": (
        "UPDATE stored_events SET rowid = ? WHERE rowid = (SELECT max(rowid) FROM stored_events)"
    ),
    "postgres": (
        "UPDATE covonaut_events SET notification_id = %s "
        "WHERE notification_id = (SELECT max(notification_id) FROM covonaut_events)"
    ),
}


@pytest.mark.parametrize("follower", sorted(FOLLOWERS))
@ON_EACH_BACKEND
@settings(max_examples=6, deadline=None, suppress_health_check=COPIED_PER_EXAMPLE)
@given(
    past=st.one_of(st.integers(1, 2**20), st.sampled_from([2**62, 2**63 - 1])),
    before_it_caught_up=st.booleans(),
)
@example(past=1, before_it_caught_up=True)
# Found by CI: a worker's step wrote two events past the move, the second onto the row.
@example(past=2, before_it_caught_up=False)
@example(past=2**62, before_it_caught_up=False)
@example(past=2**63 - 1, before_it_caught_up=False)
def test_a_row_moved_past_where_new_events_are_numbered_is_followed_or_refused(
    request: pytest.FixtureRequest,
    backend: str,
    follower: str,
    past: int,
    before_it_caught_up: bool,
) -> None:
    """A writer may give the newest row of the log a position past the one new events are
    numbered after (by ``past``, or 2**62 and 2**63-1 outright): on PostgreSQL, past the
    last its sequence issued; on SQLite, 2**63-1, past which it numbers rows at random.
    New events are then numbered before it, and a follower whose position reached it
    would pass over them without a word: each follower, the row moved before it caught
    up or after, sees what was written afterwards, or refuses with a typed error naming
    the events table."""
    moved_to: list[int] = []

    def move(conn: Any) -> None:
        [(last,)] = conn.execute(_LAST_NUMBERED[backend]).fetchall()
        moved_to.append(past if past >= 2**62 else last + past)
        conn.execute(_NEWEST_MOVED[backend], (moved_to[-1],))

    with (
        _store_copy(request, backend) as (url, conn),
        open_store(url) as store,  # open before: a worker running on (the tracking table made)
    ):
        if before_it_caught_up:
            move(conn)
        nothing: Callable[[], None] = lambda: None  # noqa: E731
        try:
            FOLLOWERS[follower](store, nothing if before_it_caught_up else lambda: move(conn))
        except StoredRowError as exc:
            [position] = moved_to
            if "where the log holds a row already" in str(exc):  # the sequence reached it
                # within the events the follower writes after the move (a worker's step
                # writes several), so a small move only
                assert backend == "postgres" and past < 2**62 and not before_it_caught_up
                assert f"(notification_id)=({position})" in str(exc)
            else:
                assert f"({LAYOUT_EVENTS[backend]!r}) is at notification_id {position}" in str(exc)
                assert backend == "postgres" or position == 2**63 - 1, exc
    with _store_copy(request, backend) as (url, conn):  # opened afterwards
        move(conn)
        if backend == "postgres" or moved_to[-1] == 2**63 - 1:
            with pytest.raises(StoredRowError, match="notification_id"):
                open_store(url, create_tables=False)


FOLLOWED_ONLY: dict[str, tuple[type[AgentThread.Event], ...]] = {
    "notice sender": NOTICE_EVENTS,
    "review queue": QUEUE_EVENT_TYPES,
}
"""The followers whose position passes only the events of these types; the others' passes
every event up to the log's end."""

_SEQUENCE_SET = {
    "sqlite": None,  # SQLite numbers a new row past the newest rowid
    "postgres": "SELECT setval('covonaut_events_notification_id_seq', %s)",
}
"""The position new events are numbered after set, on each back end that keeps one."""


@pytest.mark.parametrize("follower", sorted(FOLLOWERS))
@ON_EACH_BACKEND
@settings(max_examples=4, deadline=None, suppress_health_check=COPIED_PER_EXAMPLE)
@given(past=st.one_of(st.integers(1, 2**20), st.just(2**62)))
@example(past=2**62)
def test_a_row_moved_back_after_a_follower_passed_it_is_followed_or_refused(
    request: pytest.FixtureRequest, backend: str, follower: str, past: int
) -> None:
    """A writer may give the newest row of the log a position past the others where new
    events are then numbered after it (moving PostgreSQL's sequence with it), and give
    it back its own (and the sequence its own) once a follower passed it: the follower's
    durable position is then past the log's end, and new events are numbered before it.
    Each follower that keeps a position (the worker's table, the index of review ids, the
    listing's summaries, the review queue, the notice sender) sees what was written
    afterwards, or refuses with a typed error naming the position it recorded."""
    with (
        _store_copy(request, backend) as (url, conn),
        open_store(url) as store,  # the notice sender's tracking table made
    ):
        [(last,)] = conn.execute(_LAST_NUMBERED[backend]).fetchall()
        column = "rowid" if backend == "sqlite" else "notification_id"
        # The newest row the follower acts on: its position passes no other.
        *_, newest = store._records.notifications(*FOLLOWED_ONLY.get(follower, ()))

        def renumbered(old: int, new: int, numbered_after: int) -> None:
            p = "?" if backend == "sqlite" else "%s"
            conn.execute(
                f"UPDATE {LAYOUT_EVENTS[backend]} SET {column} = {p} WHERE {column} = {p}",
                (new, old),
            )
            if _SEQUENCE_SET[backend] is not None:
                conn.execute(_SEQUENCE_SET[backend], (numbered_after,))

        moved_to = past if past >= 2**62 else last + past
        renumbered(newest.id, moved_to, moved_to)
        try:
            FOLLOWERS[follower](store, lambda: renumbered(moved_to, newest.id, last))
        except StoredRowError as exc:
            if "where the log holds a row already" in str(exc):  # numbered onto the moved row
                assert backend == "postgres" and past < 2**62
            else:
                assert f"recorded log position {moved_to}, past the end" in str(exc), exc
                assert follower in {"review queue", "notice sender"}, exc


NO_TOPIC: dict[str, dict[str, Any]] = {
    "sqlite": {"NULL": None, "empty": "", "blob": b"\x00\xff\xfe"},
    "postgres": {"NULL": None, "empty": ""},
}
"""What a writer may put in a row's topic that names no event type, on each back end
(PostgreSQL's column is text, and allows NULL)."""

_TOPIC_SET = {
    "sqlite": (
        "UPDATE stored_events SET topic = ? "
        "WHERE rowid = (SELECT rowid FROM stored_events ORDER BY rowid LIMIT 1 OFFSET ?)"
    ),
    "postgres": (
        "UPDATE covonaut_events SET topic = %s WHERE notification_id = "
        "(SELECT notification_id FROM covonaut_events ORDER BY 1 LIMIT 1 OFFSET %s)"
    ),
}
"""The topic of a row of the log (the ``OFFSET``-th) set to a value, on each back end."""

TOPIC_READERS = (*sorted(LOG_READS), "reviews --json", "threads --json", "workers")
"""Every read of the API, and the commands that read the log by the type of its rows."""

_TOPIC_READS_AS_PRISTINE: dict[str, dict[str, str]] = {}


def _read(url: str, reader: str) -> str:
    """What ``reader`` gives on the store at ``url``: a digest of an API read's result, a
    command's output."""
    if reader in LOG_READS:
        return _digest(LOG_READS[reader](url))
    status, out, err = run_cli(url, tuple(reader.split(" ")))
    assert status == 0, err
    return out


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(row=st.integers(0, 10_000), data=st.data())
def test_a_row_whose_topic_names_no_event_type_is_never_passed_over(
    request: pytest.FixtureRequest, backend: str, row: int, data: st.DataObject
) -> None:
    """A writer may empty any row's topic (NULL, empty, a blob), which a read of the log
    filtered by type would pass over: every read of the API and every command that
    reads the log by type (the thread ids, the forks, the listing, the workers' table)
    then gives what it gave before or a typed error naming the row, and the reviewer
    queue lists every pause it listed of every thread that still loads as it was, and
    none of any other that does, on both back ends."""
    if backend not in _TOPIC_READS_AS_PRISTINE:
        with _store_copy(request, backend) as (url, _):
            _TOPIC_READS_AS_PRISTINE[backend] = {r: _read(url, r) for r in TOPIC_READERS}
    pristine = _TOPIC_READS_AS_PRISTINE[backend]
    value = NO_TOPIC[backend][data.draw(st.sampled_from(sorted(NO_TOPIC[backend])))]
    with _store_copy(request, backend) as (url, conn):
        order = "rowid" if backend == "sqlite" else "notification_id"
        streams = [
            s
            for (s,) in conn.execute(
                f"SELECT originator_id FROM {LAYOUT_EVENTS[backend]} ORDER BY {order}"
            )
        ]
        firsts = sorted({streams.index(s) for s in streams})  # where each stream opens
        offset = (
            data.draw(st.sampled_from(firsts)) if data.draw(st.booleans()) else row % len(streams)
        )
        conn.execute(_TOPIC_SET[backend], (value, offset))
        if _as_uuid(streams[offset]) not in _TREE_OF_A:
            # Another thread's damage leaves the tree of `a` (the inbox's thread page) whole.
            assert _read(url, "log") == pristine["log"]
        for reader in TOPIC_READERS:
            if reader in LOG_READS:
                with contextlib.suppress(CovonautError):
                    found = _read(url, reader)
                    # An audit reports the damage: check finds it wherever the row is.
                    if reader == "check":
                        assert found != pristine[reader], "check found nothing"
                    elif reader == "log" and found != pristine[reader]:
                        # A thread's tree, as the inbox shows it, lists every fork that
                        # loads: the damaged one is left out, the others read on.
                        assert _tree_without_a_fork_that_does_not_load(url)
                    elif reader != "verify":  # the row may be outside the threads verified
                        assert found == pristine[reader], reader
                continue
            status, out, err = run_cli(url, tuple(reader.split(" ")))
            if reader == "reviews --json" and status == 0:
                # Every pause of every thread that loads as it was, none it did not list.
                listed, before = json.loads(out), json.loads(pristine[reader])
                assert all(i in before or not _loads(url, i["thread_id"]) for i in listed)
                assert all(i in listed for i in before if _loads(url, i["thread_id"])), listed
                continue
            assert (status, out) == (0, pristine[reader]) or (
                status == 2 and "topic" in err and err.count("\n") == 1
            ), (reader, status, out, err)


_TREE_OF_A = {thread_aggregate_id("a"), thread_aggregate_id("a-fork")}


def _as_uuid(stored: Any) -> uuid.UUID:
    """A stream id as a store's table holds it (16 bytes, or PostgreSQL's uuid)."""
    return uuid.UUID(bytes=stored) if isinstance(stored, bytes) else uuid.UUID(str(stored))


def _tree_without_a_fork_that_does_not_load(url: str) -> bool:
    """Whether the tree of thread ``a`` is the pristine store's without its fork, which
    does not load (its first event damaged)."""
    with open_store(url, create_tables=False) as store:
        tree = store.tree("a")
    return tree.children == () and not _loads(url, "a-fork")


def _loads(url: str, thread_id: str) -> bool:
    with open_store(url, create_tables=False) as store:
        try:
            store.load(thread_id)
        except CovonautError:
            return False
        return True


RENAMING = {
    "text", "int", "zero", "negative", "huge", "beyond", "real", "JSON", "other row",
    "text not UTF-8",
}  # fmt: skip
"""The shapes that give a SQLite topic a name (SQLite keeps a number or JSON in a text
column as text): a row renamed so is read as that name (the log holds an application's
own events under names the library does not know), and found by the chain; one that is
no UTF-8 is a name too, to a listing that selects the topics it knows (a read of the row
itself refuses it)."""

AS_IT_WAS: dict[str, Callable[[str], object]] = {
    **{name: read for name, read in API_READS.items() if name not in ("load", "verify", "check")},
    "load": _api(lambda s: [s.load(t).state for t in THREADS if s.exists(t)]),
}
"""The API's reads that give what they gave or fail (an audit reports damage as
findings), a load compared by the state it gives (a thread loaded from its events, a
snapshot passed over, is the same thread in another representation)."""


def _ends_of_streams() -> list[int]:
    """The places (in the order ``_mutate`` takes the log's rows) of each stream's first,
    third and newest rows: where a read's bounds fall."""
    with contextlib.closing(sqlite3.connect(_pristine())) as conn:
        rows = conn.execute(
            "SELECT originator_id, originator_version FROM stored_events ORDER BY 1, 2"
        ).fetchall()
    streams = [s for s, _ in rows]
    firsts = {streams.index(s) for s in streams}
    newest = {len(streams) - 1 - streams[::-1].index(s) for s in streams}
    return sorted(firsts | newest | {i for i, (_, v) in enumerate(rows) if v == 3})


@functools.cache
def _pristine_reads() -> dict[str, str]:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "threads.db"
        shutil.copyfile(_pristine(), path)
        return {name: _digest(read(f"sqlite:///{path}")) for name, read in AS_IT_WAS.items()}


BENEATH_A_SNAPSHOT = "real"
"""The shape that gives a version between two others (SQLite keeps 1.5 as a real, which
sorts among the integers): an event after a thread's snapshot given it lies beneath the
snapshot, where a load does not read, and `verify` finds it through the head anchor."""


@pytest.mark.parametrize("shape", sorted(set(SHAPES) - {BENEATH_A_SNAPSHOT}))
@pytest.mark.parametrize("row", _ends_of_streams())
def test_each_streams_first_third_and_newest_version_made_hostile_reads_as_it_was_or_not_at_all(
    row: int, shape: str
) -> None:
    """Every value a writer may give the version of each stream's first, third and newest
    row (but one beneath a snapshot): each read of the API that is no audit gives what it
    gave, or a typed error."""
    with mutated("stored_events", "originator_version", row, shape) as url:
        if url is None:
            return
        for name, read in AS_IT_WAS.items():
            with contextlib.suppress(CovonautError):
                assert _digest(read(url)) == _pristine_reads()[name], name


@settings(max_examples=60, deadline=None)
@given(
    column=st.sampled_from(["originator_version", "topic"]),
    row=st.sampled_from(_ends_of_streams()) | st.integers(0, 10_000),
    shape=st.sampled_from(sorted(SHAPES)),
)
def test_a_version_or_topic_made_hostile_reads_as_it_was_or_not_at_all(
    column: str, row: int, shape: str
) -> None:
    """Whatever a writer makes of a row's version (NULL, negative, text, a blob, a real,
    past any integer, another row's, another number) or its topic (NULL, empty, a blob),
    each read of the API that is no audit gives exactly what it gave before, or a typed
    error: a read up to a version never ends before it, a thread's newest event is never
    left out, and no thread, fork or state is listed that is not there, nor one left
    out. (A row's payload or stream changed loads as it reads, and `verify` finds it.)"""
    if (column, shape) == ("originator_version", BENEATH_A_SNAPSHOT) or (
        column == "topic" and shape in RENAMING
    ):
        return
    with mutated("stored_events", column, row, shape) as url:
        if url is None:
            return
        for name, read in AS_IT_WAS.items():
            with contextlib.suppress(CovonautError):
                assert _digest(read(url)) == _pristine_reads()[name], name


@pytest.mark.parametrize("snapshotting", ["y", "n"])
@pytest.mark.parametrize("shape", ["NULL", "text", "zero", "negative", "blob"])
def test_an_applications_own_thread_whose_newest_version_is_hostile_reads_whole_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str, snapshotting: str
) -> None:
    """In an application of the user's own (eventsourcing's SQLite module, read through
    its repository when it keeps no snapshots), a thread whose newest event a writer
    gave a version no event is stored at loads whole or not at all: at the head, and up
    to the head's version."""
    from shop_app import NOW, Shop

    path = tmp_path / "shop.db"
    monkeypatch.setenv("PERSISTENCE_MODULE", "eventsourcing.sqlite")
    monkeypatch.setenv("SQLITE_DBNAME", str(path))
    monkeypatch.setenv("IS_SNAPSHOTTING_ENABLED", snapshotting)
    with Shop() as app:
        thread = AgentThread.start("t", now=NOW)
        for n in range(4):
            thread.steer(Message(Role.USER, f"message {n}"), now=NOW)
        app.save(thread)
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        changed = conn.execute(
            "UPDATE stored_events SET originator_version = ? WHERE originator_version = 5",
            (SHAPES[shape],),
        ).rowcount
    assert changed == 1
    with Shop() as app, Store.from_application(app) as store:
        for read in (lambda: store.load("t"), lambda: store.load("t", version=5)):
            with contextlib.suppress(CovonautError):
                assert read().version == 5


@pytest.mark.parametrize(("thread", "listings"), [("a", 1), ("a-fork", 2)])
def test_a_first_event_copied_later_in_its_stream_is_refused_by_the_listings(
    thread: str, listings: int
) -> None:
    """A thread's first row copied past its head (a row inserted, which no single value
    change makes): the listings of threads and forks refuse it with a typed error
    rather than name the thread twice."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "threads.db"
        shutil.copyfile(_pristine(), path)
        stream = thread_aggregate_id(thread).bytes
        with contextlib.closing(sqlite3.connect(path)) as conn, conn:
            ((head,),) = conn.execute(
                "SELECT max(originator_version) FROM stored_events WHERE originator_id = ?",
                (stream,),
            )
            conn.execute(
                "INSERT INTO stored_events SELECT originator_id, ?, topic, state FROM "
                "stored_events WHERE originator_id = ? ORDER BY originator_version LIMIT 1",
                (head + 1, stream),
            )
        with open_store(f"sqlite:///{path}") as store:
            reads = [lambda: list(store.thread_ids()), store.forks][:listings]
            for read in reads:
                with pytest.raises(CovonautError):
                    read()


SNAPSHOTTED = ("long", "w")
"""The threads of the store of snapshots: one with an event after its snapshot, one
paused on a review at its snapshot."""
SNAPSHOT_CHAIN_KEY = "chain-key-0123456789abcdef"
DECIDED_AT = datetime.now(UTC)
"""When the review of ``w`` is decided: the reviewer's token is valid then."""

SNAPSHOT_VALUES: dict[str, Any] = {
    "NULL": None,
    "empty": "",
    "negative": -1,
    "zero": 0,
    "real": 1.5,
    "huge": 2**63 - 1,
    "other row": "<the same column of the other snapshot>",
    "unknown topic": "covonaut.thread.NoSuchSnapshot",
    "bytes": b"\x00\xff\xfe",
}
"""What a writer may give one column of a snapshot's row."""


class _CachingApplication(AgentApplication):
    """An application of the user's own that caches its aggregates, sealing with the
    chain key of the store of snapshots."""

    @property
    def chain_key(self) -> bytes:
        return SNAPSHOT_CHAIN_KEY.encode()


SNAPSHOT_OPENERS = ("open_store", "embedded")
"""How the store of snapshots is opened: by ``open_store``, or through an embedded
application that caches its aggregates (``AGGREGATE_CACHE_MAXSIZE``), whose loads of a
thread missing from its cache read its snapshot through eventsourcing's repository."""


@contextlib.contextmanager
def _snapshot_store(url: str, opener: str) -> Iterator[Store]:
    """The store of snapshots at ``url`` (a SQLite one for ``embedded``), opened as
    ``opener`` (one of ``SNAPSHOT_OPENERS``) says."""
    if opener == "open_store":
        with open_store(url, chain_key=SNAPSHOT_CHAIN_KEY) as store:
            yield store
        return
    app = _CachingApplication(env=_caching_env(url.removeprefix("sqlite:///")))
    try:
        with Store.from_application(app) as store:
            yield store
    finally:
        app.close()


def _caching_env(path: str, **settings: str) -> dict[str, str]:
    """The settings of an embedded application on the SQLite file ``path`` that caches
    its aggregates and snapshots them, with more ``settings``."""
    return {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": path,
        "AGGREGATE_CACHE_MAXSIZE": "10",
        "IS_SNAPSHOTTING_ENABLED": "y",
        **settings,
    }


def write_snapshotted_threads(url: str, opener: str = "open_store") -> str:
    """Write the threads of ``SNAPSHOTTED``, each snapshotted, into a store with a chain
    key at ``url`` opened as ``opener`` says; the id of the review ``w`` waits on."""
    clock = ticking_clock()
    with _snapshot_store(url, opener) as store:
        for thread_id in SNAPSHOTTED:
            thread = AgentThread.start(thread_id, now=clock())
            for n in range(SNAPSHOT_MIN_VERSION + 4):
                thread.append_message(Message(Role.USER, f"message {n}"), now=clock())
            store.save(thread)
        agent = paying(store, "w")
        assert agent.run("Pay bob 40.") == ""
        [request] = agent.pending_reviews
        store.snapshot_if_due(store.load("long"))  # ``w``'s run ended with one
        long = store.load("long")
        long.append_message(Message(Role.USER, "after the snapshot"), now=clock())
        store.save(long)
    return request.review_id


def _decided(store: Store, review_id: str) -> object:
    commands = ThreadService(store, verifier=VERIFIER, clock=lambda: DECIDED_AT)
    submission = review_submission("approve", text="a reason")
    decision = commands.decide(review_id, submission, reviewer=commands.reviewer(RITA))
    return decision, store.load("w").state


SNAPSHOT_READS: dict[str, Callable[[Store, str], object]] = {
    "load": lambda s, _: [s.load(t).state for t in SNAPSHOTTED],
    "history": lambda s, _: [s.history(t) for t in SNAPSHOTTED],
    "state_at": lambda s, _: [
        s.state_at(t, v) for t in SNAPSHOTTED for v in (3, SNAPSHOT_MIN_VERSION, None)
    ],
    "fork": lambda s, _: (
        s.fork("long", at_version=SNAPSHOT_MIN_VERSION + 2, new_thread_id="f", now=DECIDED_AT),
        s.load("f").state,
    ),
    "decision": _decided,
}
"""What a load of a snapshotted thread serves: each read's result, or its error."""


def _snapshot_read(url: str, review_id: str, name: str, opener: str = "open_store") -> object:
    """What read ``name`` of ``SNAPSHOT_READS`` gives on the store at ``url`` opened as
    ``opener`` says: its result (compared by value: a thread rebuilt from its events
    holds its mappings in another order than one restored from a snapshot), or the type
    of its error."""
    with _snapshot_store(url, opener) as store:
        try:
            return SNAPSHOT_READS[name](store, review_id)
        except CovonautError as exc:
            return type(exc)


@functools.cache
def _snapshots_pristine(opener: str = "open_store") -> tuple[Path, str, dict[str, object]]:
    """A SQLite store of ``SNAPSHOTTED`` opened as ``opener`` says, the review id, and
    what each read gives once its snapshots are gone."""
    directory = Path(tempfile.mkdtemp(prefix="hostile-snapshots-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    path = directory / "pristine.db"
    review_id = write_snapshotted_threads(f"sqlite:///{path}", opener)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM stored_snapshots").fetchone() == (2,)
    delete = "DELETE FROM stored_snapshots"
    return path, review_id, _sqlite_reads_after(path, review_id, delete, opener=opener)


def _sqlite_reads_after(
    pristine: Path, review_id: str, statement: str, *params: object, opener: str = "open_store"
) -> dict[str, object]:
    """What each read gives on copies of ``pristine`` changed by ``statement``, opened as
    ``opener`` says."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "threads.db"
        shutil.copyfile(pristine, path)
        with contextlib.closing(sqlite3.connect(path)) as conn, conn:
            conn.execute(statement, params)
        copies: dict[str, object] = {}
        for name in SNAPSHOT_READS:  # each read on a copy of the changed store
            each = Path(directory) / f"{name}.db"
            shutil.copyfile(path, each)
            copies[name] = _snapshot_read(f"sqlite:///{each}", review_id, name, opener)
        return copies


def _snapshot_update(
    table: str, column: str, shape: str, row: int, mark: str = "?"
) -> tuple[str, tuple[Any, ...]]:
    """The statement (and its parameters, each written ``mark``) giving ``column`` of the
    ``row``-th snapshot (by stream) of ``table`` the value ``shape`` names."""
    nth = f"(SELECT originator_id FROM {table} ORDER BY originator_id LIMIT 1 OFFSET {row})"
    if shape == "other row":
        other = (
            f"(SELECT originator_id FROM {table} ORDER BY originator_id LIMIT 1 OFFSET {1 - row})"
        )
        value: str = f"(SELECT {column} FROM {table} WHERE originator_id = {other})"
        return f"UPDATE {table} SET {column} = {value} WHERE originator_id = {nth}", ()
    statement = f"UPDATE {table} SET {column} = {mark} WHERE originator_id = {nth}"
    return statement, (SNAPSHOT_VALUES[shape],)


SNAPSHOT_COLUMNS = st.sampled_from(["originator_id", "originator_version", "topic", "state"])
SNAPSHOT_SHAPES = st.sampled_from(sorted(SNAPSHOT_VALUES))


@settings(max_examples=50, deadline=None)
@given(
    column=SNAPSHOT_COLUMNS,
    shape=SNAPSHOT_SHAPES,
    row=st.integers(0, 1),
    opener=st.sampled_from(SNAPSHOT_OPENERS),
)
def test_a_snapshot_row_made_hostile_in_any_column_serves_as_no_snapshot(
    column: str, shape: str, row: int, opener: str
) -> None:
    """A snapshot is a cache: one value of a snapshot's row made hostile (NULL, empty,
    a negative, zero, a real, a huge number, the other snapshot's, an unknown topic,
    bytes) in a store with a chain key, opened by open_store or through an embedded
    application that caches its aggregates, and a load, the history, a state at a
    version, a fork and a decision each give what they give with no snapshot at all:
    the snapshot is passed over and the thread rebuilt from its events."""
    pristine, review_id, without = _snapshots_pristine(opener)
    statement, params = _snapshot_update("stored_snapshots", column, shape, row)
    try:
        found = _sqlite_reads_after(pristine, review_id, statement, *params, opener=opener)
    except sqlite3.IntegrityError:  # the other snapshot's key
        return
    assert found == without, [name for name in found if found[name] != without[name]]


EVENT_VERSIONS = st.integers(1, SNAPSHOT_MIN_VERSION + 5)
"""A version every thread of ``SNAPSHOTTED`` has an event at."""


@settings(max_examples=30, deadline=None)
@given(
    source=st.sampled_from(SNAPSHOTTED),
    source_version=EVENT_VERSIONS,
    target=st.sampled_from(SNAPSHOTTED),
    target_version=EVENT_VERSIONS,
    edited=st.booleans(),
    opener=st.sampled_from(SNAPSHOT_OPENERS),
)
def test_an_event_row_copied_in_as_a_snapshot_serves_as_no_snapshot(
    source: str,
    source_version: int,
    target: str,
    target_version: int,
    edited: bool,
    opener: str,
) -> None:
    """An event's row (the thread's own or another's, at any version, its text edited
    or not) copied into the snapshots table as a thread's snapshot at any version, in a
    store opened by open_store or through an embedded application that caches its
    aggregates: each read gives what it gives with no snapshot at all; the row is never
    decoded as an event and used as the snapshot."""
    pristine, review_id, without = _snapshots_pristine(opener)
    state = "CAST(replace(state, 'message 1', 'message 9') AS BLOB)" if edited else "state"
    event = "FROM stored_events WHERE originator_id = ? AND originator_version = ?"
    statement = (
        f"UPDATE stored_snapshots SET originator_version = ?, topic = (SELECT topic {event}), "
        f"state = (SELECT {state} {event}) WHERE originator_id = ?"
    )
    copied = (thread_aggregate_id(source).hex, source_version)
    params = (target_version, *copied, *copied, thread_aggregate_id(target).hex)
    found = _sqlite_reads_after(pristine, review_id, statement, *params, opener=opener)
    assert found == without, [name for name in found if found[name] != without[name]]


@pytest.mark.parametrize("cached", [True, False])
def test_another_threads_encrypted_event_copied_in_as_a_snapshot_is_passed_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, cached: bool
) -> None:
    """In an encrypted store, the first event of thread t2 copied as t1's snapshot by a
    writer without the key: t1 loads as its own events make it, with or without the
    application's cache, and the row is passed over with a warning."""
    path = tmp_path / "threads.db"
    cipher = {"CIPHER_TOPIC": "eventsourcing.cipher:AESCipher", "CIPHER_KEY": "A" * 22 + "=="}
    env = _caching_env(str(path), **cipher)
    app = AgentApplication(env=env)
    with Store.from_application(app) as store:
        for thread_id in ("t1", "t2"):
            thread = AgentThread.start(thread_id, now=DECIDED_AT)
            thread.append_message(Message(Role.USER, f"to {thread_id}"), now=DECIDED_AT)
            store.save(thread)
    app.close()
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            "INSERT INTO stored_snapshots (originator_id, originator_version, topic, state) "
            "SELECT ?, 1, topic, state FROM stored_events "
            "WHERE originator_id = ? AND originator_version = 1",
            (thread_aggregate_id("t1").hex, thread_aggregate_id("t2").hex),
        )
    if not cached:
        del env["AGGREGATE_CACHE_MAXSIZE"]
    app = AgentApplication(env=env)
    with caplog.at_level(logging.WARNING), Store.from_application(app) as store:
        loaded = store.load("t1")
    app.close()
    assert [m.content for m in loaded.messages] == ["to t1"]
    assert "passed over" in caplog.text


@pytest.mark.parametrize("version", [1, 2])
def test_the_applications_repository_passes_over_an_event_row_copied_in_as_a_snapshot(
    tmp_path: Path, version: int
) -> None:
    """The thread's first event (its input) copied into the snapshots table at a
    version, its text edited: the application's own repository rebuilds the thread
    from its events, as a store's load does, and does not take the row for a snapshot."""
    app = AgentApplication(env=_caching_env(str(tmp_path / "threads.db")))
    thread = AgentThread.start("t1", now=DECIDED_AT)
    thread.start_run(RunMode.RUN, now=DECIDED_AT, given=Message(Role.USER, "hello"))
    thread.append_message(Message(Role.ASSISTANT, "ok"), now=DECIDED_AT)
    app.save(thread)
    app.close()
    with contextlib.closing(sqlite3.connect(tmp_path / "threads.db")) as conn, conn:
        conn.execute(
            "INSERT INTO stored_snapshots (originator_id, originator_version, topic, state) "
            "SELECT originator_id, ?, topic, CAST(replace(state, 'hello', 'EVILL') AS BLOB) "
            "FROM stored_events WHERE originator_version = 1",
            (version,),
        )
    app = AgentApplication(env=_caching_env(str(tmp_path / "threads.db")))
    try:
        loaded = app.repository.get(thread.id)
    finally:
        app.close()
    assert [m.content for m in loaded.messages] == ["hello", "ok"]


@pytest.fixture(scope="module")
def snapshots_postgres(postgres_url: str) -> Iterator[tuple[str, str]]:
    """A PostgreSQL database of ``SNAPSHOTTED`` to copy from, and the review id."""
    import psycopg

    name = f"snapshots_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield name, write_snapshotted_threads(_database_url(postgres_url, name))
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@functools.cache
def _postgres_reads_without_snapshots(
    postgres_url: str, pristine: str, review_id: str
) -> dict[str, object] | None:
    """What each read gives on copies of the database ``pristine`` with no snapshots
    (cached here, not in the fixture: Hypothesis shows its test's arguments)."""
    delete = "DELETE FROM covonaut_snapshots"
    return _postgres_reads_after(postgres_url, pristine, review_id, delete)


def _postgres_reads_after(
    postgres_url: str, pristine: str, review_id: str, *statements: str, params: tuple[Any, ...] = ()
) -> dict[str, object] | None:
    """What each read gives on copies of the database ``pristine`` changed by
    ``statements`` (the last one given ``params``); None when PostgreSQL refuses them."""
    import psycopg

    found: dict[str, object] = {}
    for name in SNAPSHOT_READS:
        with copied_store(postgres_url, pristine) as url:
            with psycopg.connect(url, autocommit=True) as conn:
                try:
                    for statement in statements[:-1]:
                        conn.execute(statement)
                    conn.execute(statements[-1], params)
                except psycopg.Error:  # the column's type or its key refuses the value
                    return None
            found[name] = _snapshot_read(url, review_id, name)
    return found


@pytest.mark.postgres
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(column=SNAPSHOT_COLUMNS, shape=SNAPSHOT_SHAPES, row=st.integers(0, 1))
def test_a_postgresql_snapshot_row_made_hostile_in_any_column_serves_as_no_snapshot(
    postgres_url: str,
    snapshots_postgres: tuple[str, str],
    column: str,
    shape: str,
    row: int,
) -> None:
    """On PostgreSQL as on SQLite: whatever value its column types let a writer give one
    column of a snapshot's row (NULL once the column allows it), a load, the history, a
    state at a version, a fork and a decision each give what they give with no
    snapshot at all."""
    pristine, review_id = snapshots_postgres
    without = _postgres_reads_without_snapshots(postgres_url, pristine, review_id)
    assert without is not None
    statement, params = _snapshot_update("covonaut_snapshots", column, shape, row, "%s")
    nullable = f"ALTER TABLE covonaut_snapshots ALTER COLUMN {column} DROP NOT NULL"
    statements = (nullable, statement) if shape == "NULL" else (statement,)
    found = _postgres_reads_after(postgres_url, pristine, review_id, *statements, params=params)
    if found is not None:
        assert found == without, [name for name in found if found[name] != without[name]]


@pytest.mark.parametrize("shape", sorted(SAVE_READ_SHAPES))
def test_a_decision_over_http_on_a_hostile_anchor_is_the_inboxs_typed_refusal(
    tmp_path: Path, shape: str
) -> None:
    """A reviewer's approval in the inbox, on a thread whose head anchor's version a
    writer made hostile: the inbox answers its typed error naming the column, not a bare
    500, and records nothing."""
    path = tmp_path / "threads.db"
    writer = _HostileWriter(path, "stored_events_heads.version", shape)
    auth = {"Authorization": f"Bearer {ALICE}"}
    with open_store(f"sqlite:///{path}") as store:
        paused_in_inbox(store, "t", [], [])
        app = create_app(store, INBOX_VERIFIER)
        with TestClient(app, base_url="http://inbox.test", raise_server_exceptions=False) as client:
            current(client)
            (review,) = client.get("/api/reviews", headers=auth).json()
            writer.write()
            response = client.post(
                f"/api/reviews/{review['review_id']}/approve", headers=auth, json={}
            )
    assert response.status_code != 500, response.text
    assert "version" in response.json()["error"], response.text
    assert writer.left_as_written()


@pytest.mark.parametrize("shape", sorted(SAVE_READ_SHAPES))
def test_approve_on_a_hostile_anchor_is_one_line_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], shape: str
) -> None:
    """``covonaut-es approve`` on a thread whose head anchor's version a writer made
    hostile: one line naming the column, a failing status, nothing recorded."""
    secret = secrets.token_hex(32)
    monkeypatch.setenv("COVONAUT_ES_REVIEWER_SECRET", secret)
    path = tmp_path / "threads.db"
    writer = _HostileWriter(path, "stored_events_heads.version", shape)
    url = f"sqlite:///{path}"
    with open_store(url) as store:
        paused_in_inbox(store, "t", [], [])
        (pending,) = store.state_at("t").pauses
        review_id = pending.interrupt.data["review_id"]
    writer.write()
    token = HmacReviewerVerifier(secret.encode()).issue_token("rita", ttl_seconds=600)
    capsys.readouterr()
    status = main(
        ["approve", review_id, "--thread", "t", "--reviewer-token", token, "--store", url]
    )
    err = capsys.readouterr().err
    assert status != 0 and len(err.strip().splitlines()) == 1 and "version" in err, err
    assert writer.left_as_written()
