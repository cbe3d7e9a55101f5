"""Listings of threads made at once, from threads of one process, as a web app's pool
makes them: a listing that read the log before another and writes its summaries after
it never leaves a thread listed as it was (the table's summaries are late until the
next listing, never wrong after it), and on PostgreSQL listings writing the same
summaries never deadlock one another."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import open_store
from covonaut_es.domain import AgentThread, thread_aggregate_id
from covonaut_es.messages import Message, Role
from covonaut_es.store import Store

NOW = datetime(2026, 12, 1, tzinfo=UTC)
THREADS = ("x", "y", "z")


def _grow(store: Store, thread_id: str) -> None:
    thread = store.load(thread_id)
    thread.append_message(Message(Role.USER, f"more of {thread_id}"), now=NOW)
    store.save(thread)


def _versions(store: Store) -> dict[str, int]:
    return {s.thread_id: s.version for s in store.list_threads(limit=100).threads}


@pytest.fixture
def listed(shared_url: str) -> Iterator[Store]:
    with open_store(shared_url) as store:
        for thread_id in THREADS:
            store.save(AgentThread.start(thread_id, now=NOW))
        store.list_threads()
        yield store


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    before=st.lists(st.sampled_from(THREADS), max_size=3),
    meanwhile=st.lists(st.sampled_from(THREADS), min_size=1, max_size=4),
)
def test_a_listing_that_writes_last_never_leaves_a_thread_as_it_was(
    listed: Store, before: list[str], meanwhile: list[str]
) -> None:
    """Listing A reads the log, then stops before it writes its summaries; the threads
    are written and listing B is made whole; A then writes. Every listing after both
    shows each thread at its head."""
    store = listed
    for thread_id in before:
        _grow(store, thread_id)
    table = store._listing._summaries()  # where A is held, before its write
    assert table is not None
    original = table.write
    loaded, done = threading.Event(), threading.Event()

    def held(rows: object) -> None:
        if threading.current_thread().name == "A":
            loaded.set()
            done.wait(10)
        original(rows)  # type: ignore[arg-type]  # as given

    table.write = held  # type: ignore[method-assign]  # the interleaving, held open
    try:
        a = threading.Thread(target=store.list_threads, name="A")
        a.start()
        loaded.wait(10)
        for thread_id in meanwhile:
            _grow(store, thread_id)
        store.list_threads()  # B
        done.set()
        a.join(10)
    finally:
        done.set()
        table.write = original  # type: ignore[method-assign]
    heads = {thread_id: store.head_version(thread_id) for thread_id in THREADS}
    assert _versions(store) == heads
    assert _versions(store) == heads  # and it stays so


class _Pausing:
    """A cursor that, after its first INSERT, says so and waits to go on."""

    def __init__(self, cursor: Any, inserted: threading.Event, go_on: threading.Event) -> None:
        self._cursor, self._inserted, self._go_on = cursor, inserted, go_on

    def execute(self, statement: str, *args: Any) -> Any:
        found = self._cursor.execute(statement, *args)
        if statement.startswith("INSERT") and not self._inserted.is_set():
            self._inserted.set()
            self._go_on.wait(5)
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


@pytest.mark.postgres
def test_listings_writing_the_same_summaries_in_two_orders_never_deadlock(
    postgres_database: str,
) -> None:
    """Two listings write the summaries of the same two threads in opposite orders (as
    two listings that read the log from different positions do), the first holding
    its transaction open after its first row: both write, neither is failed by a
    deadlock the database broke."""
    with open_store(postgres_database) as store:
        for thread_id in ("x", "y"):
            store.save(AgentThread.start(thread_id, now=NOW))
        store.list_threads()
        table = store._listing._summaries()  # what both listings write through
        assert table is not None
        rows = {
            t: row
            for t in ("x", "y")
            if (row := store._listing._row(thread_aggregate_id(t), table.seen())) is not None
        }
        writing = table._writing
        first_row, go_on = threading.Event(), threading.Event()

        @contextlib.contextmanager
        def held_open() -> Iterator[Any]:
            with writing() as cursor:
                if threading.current_thread().name != "A":
                    yield cursor
                    return
                yield _Pausing(cursor, first_row, go_on)

        deadlocks_before = _deadlocks(postgres_database)
        table._writing = held_open  # type: ignore[method-assign]  # the interleaving
        errors: list[BaseException] = []

        def write(order: tuple[str, str]) -> None:
            try:
                table.write([rows[t] for t in order])
            except BaseException as exc:  # reported below
                errors.append(exc)

        a = threading.Thread(target=write, args=(("x", "y"),), name="A")
        a.start()
        first_row.wait(5)
        b = threading.Thread(target=write, args=(("y", "x"),), name="B")
        b.start()
        time.sleep(0.5)  # B waits: on the table's lock, or on A's first row
        go_on.set()
        a.join(30)
        b.join(30)
        table._writing = writing  # type: ignore[method-assign]
        assert not errors, errors[:1]
        # One the database broke and a retry hid is a failed transaction all the same.
        assert _deadlocks(postgres_database) == deadlocks_before


def _deadlocks(url: str) -> int:
    """The deadlocks the server detected in ``url``'s database so far (a session
    reports its counts at most once a second, so this waits as long first)."""
    import psycopg

    time.sleep(1.1)
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert found is not None
    return int(found[0])
