"""What a store does to one thread on PostgreSQL reads the rows it needs by their keys,
however many other threads the store holds: its cost follows its own thread, not the
store's size.

The store's insert function checked each fenced stream's lease and that each new stream
had no events yet with a join of the call's JSON rows with those tables. The planner took
the JSON for a hundred rows and read the whole lease table at every save, so creating
threads slowed down as the store grew (3.6 ms a thread at the start of a run of 10,000
threads, 8.6 ms at its end). The test fills the tables with other streams' rows, has the
planner know their sizes, runs each command on one thread in a store of its own (a save
more than five times in a session, so that PostgreSQL may settle on a generic plan), and
counts the rows the database server reports read in order, not by key, once the store's
sessions ended.

Not here, by design: listings and projections, whose work is every thread or the log,
and the tree of forks under a thread, which reads the log's forks once a process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import closing
from typing import Any

import psycopg
import pytest

from covonaut_es import Store, open_store
from covonaut_es.service import ThreadService
from support import agent_on, answer, call, conversation

pytestmark = pytest.mark.postgres

OTHERS = 30_000
"""Rows of other streams in each table: enough that reading one whole costs more than
any lookup by key, so that a plan reading it shows."""

STRAY = OTHERS // 100
"""At most this many rows of a table read in order, not by key: a command reads one row
of the head table, say, to learn whether it holds any."""

COMMANDS: dict[str, Callable[[Store], Any]] = {
    "run": lambda store: conversation(store, "new", 3),
    "load": lambda store: store.load("done"),
    "exists": lambda store: store.exists("done"),
    "head_version": lambda store: store.head_version("done"),
    "history": lambda store: store.history("done"),
    "events_after": lambda store: store.events_after("done", 2),
    "checkpoints": lambda store: store.checkpoints("done"),
    "state_at": lambda store: store.state_at("done", 3),
    "find": lambda store: store.find("done"),
    "replay_state": lambda store: store.replay_state("done"),
    "verify": lambda store: store.verify("done"),
    "parent": lambda store: store.parent("done"),
    "path_to_root": lambda store: store.path_to_root("done"),
    "fork": lambda store: store.fork("done", at_version=3),
    "label": lambda store: ThreadService(store).label("done", "seen"),
    "submit": lambda store: store.submit("done", "and then?"),
    "abandon": lambda store: ThreadService(store).abandon("paused", "no longer needed"),
}


def _scans(url: str) -> dict[str, int]:
    """The rows of each table read by sequential scans, as the server counts them once the other
    sessions on the database ended and their counts reached it (a session sends its
    counts when it ends, a moment after its client closed it)."""
    deadline = time.monotonic() + 15
    last: dict[str, int] | None = None
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            others = conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
            conn.execute("SELECT pg_stat_clear_snapshot()")
            found = dict(conn.execute("SELECT relname, seq_tup_read FROM pg_stat_user_tables"))
            if (others == (0,) and found == last) or time.monotonic() > deadline:
                return found
            last = found
            time.sleep(0.3)


def _fill(url: str) -> None:
    """Rows of other streams in every table a command on a thread reads by key."""
    with psycopg.connect(url, autocommit=True) as conn:
        stored = "(originator_id, originator_version, topic, state)"
        for table, rows in (
            ("covonaut_events_leases", "gen_random_uuid(), 1"),
            ("covonaut_events_heads", "gen_random_uuid(), 1, ''"),
            (f"covonaut_events {stored}", "gen_random_uuid(), 1, 'other', '\\x00'::bytea"),
            (f"covonaut_snapshots {stored}", "gen_random_uuid(), 1, 'other', '\\x00'::bytea"),
        ):
            conn.execute(
                f"INSERT INTO {table} SELECT {rows} FROM generate_series(1, %s)", (OTHERS,)
            )
        conn.execute("ANALYZE")


@pytest.fixture(scope="module")
def filled(postgres_url: str) -> Any:
    """A store with a finished thread ``done`` and a ``paused`` one, among many other
    streams' rows: a fresh database of it for each command."""
    import uuid

    made: list[str] = []

    def fresh() -> str:
        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        made.append(name)
        url = postgres_url.rsplit("/", 1)[0] + f"/{name}"
        with closing(open_store(url)) as store:
            conversation(store, "done", 2)
            agent_on(store, "paused", [call(("c1", "review", '{"x": 1}')), answer("ok")]).run("go")
        _fill(url)
        return url

    yield fresh
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for name in made:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_on_one_thread_reads_its_rows_by_key(filled: Any, command: str) -> None:
    url = filled()
    before = _scans(url)
    with closing(open_store(url)) as store:
        COMMANDS[command](store)
    after = _scans(url)
    read = {table: rows - before[table] for table, rows in after.items()}
    assert {table: rows for table, rows in read.items() if rows > STRAY} == {}
