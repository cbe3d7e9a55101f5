"""The review index: finding the threads that hold a review is a lookup by key that
reads only the review requests and forks written since the last lookup, gives what the
log read whole gives, seals an encrypted store's rows, and gives nothing else whatever
another writer does to its rows (a generated test): at worst the lookup reads the log.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from covonaut_es import Store, create_cipher_key, open_store
from covonaut_es.errors import StoreLockedError
from covonaut_es.store import _urls
from test_workers import agent, pause

TABLE = "stored_events_reviews"


def _reviews(store: Store, thread_id: str) -> list[str]:
    return [review.review_id for review in agent(store, thread_id).pending_reviews]


def _scene(store: Store) -> dict[str, str]:
    """Threads ``asked`` and ``other`` paused on a review each, and ``branch``, a fork
    of ``asked`` that inherits its review; their review ids by thread."""
    pause(store, "asked", "other")
    store.fork("asked", new_thread_id="branch")
    return {thread_id: _reviews(store, thread_id)[0] for thread_id in ("asked", "other")}


def _counting(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of log records each lookup reads from now on, appended per call."""
    read: list[int] = []
    records = store._records
    original = records.notifications

    def notifications(*types: Any, after: int | None = None, **options: bool) -> Any:
        for notification in original(*types, after=after, **options):
            read.append(notification.id)
            yield notification

    monkeypatch.setattr(records, "notifications", notifications)
    return read


def test_a_lookup_reads_only_the_review_requests_written_since_the_last(
    shared_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKER_TEST_LEDGER", str(tmp_path / "ledger"))
    with open_store(shared_url) as store:
        reviews = _scene(store)
        read = _counting(store, monkeypatch)
        assert store.threads_with_review(reviews["asked"]) == ("asked", "branch")
        assert len(read) == 3  # two requests and a fork, once
        assert store.threads_with_review(reviews["other"]) == ("other",)
        assert store.threads_with_review("0" * 32) == ()
        assert store.threads_with_review("\ud800") == ()  # no stored id holds a surrogate
        pause(store, "later")
        (later,) = _reviews(store, "later")
        read.clear()
        assert store.threads_with_review(later) == ("later",)
        assert len(read) == 1
        store.submit("walk-in", "Pay 5.")  # events of other types after the last request
        assert store.threads_with_review(later) == ("later",)
        index = store._review_index
        assert index is not None  # its position passed them: the next lookup reads none
        assert index._table.position() == store._records.log_position()
        assert store.threads_with_review(reviews["asked"]) == store._reader.threads_with_review(
            reviews["asked"]
        )
    with open_store(shared_url) as store:  # another process's lookup uses the index as made
        read = _counting(store, monkeypatch)
        assert store.threads_with_review(later) == ("later",)
        assert read == []


def test_an_encrypted_stores_index_names_no_review_nor_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKER_TEST_LEDGER", str(tmp_path / "ledger"))
    path = tmp_path / "threads.db"
    with open_store(f"sqlite:///{path}", cipher_key=create_cipher_key()) as store:
        reviews = _scene(store)
        assert store.threads_with_review(reviews["asked"]) == ("asked", "branch")
    with sqlite3.connect(path) as database:
        rows = database.execute(f"SELECT review, state FROM {TABLE}").fetchall()
    database.close()
    assert len(rows) == 4  # the position, two requests, the fork's inherited review
    for key, state in rows:
        for secret in (*reviews.values(), "asked", "other", "branch"):
            assert secret not in key and secret.encode() not in state


MUTATIONS = st.one_of(
    st.tuples(st.just("delete"), st.integers(0, 8)),
    st.tuples(st.just("garble"), st.integers(0, 8), st.binary(max_size=24)),
    st.tuples(st.just("copy"), st.integers(0, 8), st.integers(0, 8)),
    st.tuples(st.just("move"), st.integers(0, 8), st.integers(0, 8)),
    st.tuples(
        st.just("position"), st.integers(0, 8), st.one_of(st.integers(-5, 10**12), st.just("p"))
    ),
    st.tuples(
        st.just("forge"),
        st.integers(0, 8),
        st.sampled_from(["asked", "other", "branch", "ghost"]),
        st.none() | st.sampled_from(["asked", "other", "ghost"]),
    ),
)
"""Changes of another writer of the database: a row removed, its state garbled or
copied from another row, moved under another row's key, its position changed (the
tracking row's too), or a well-formed row forged under a row's key naming any thread."""


def _mutate(database: sqlite3.Connection, mutation: tuple[Any, ...]) -> None:
    rows = database.execute(f"SELECT review, position, state FROM {TABLE} ORDER BY 1, 2").fetchall()

    def row(index: int) -> tuple[Any, ...]:
        return rows[index % len(rows)]

    match mutation:
        case ("delete", i):
            database.execute(f"DELETE FROM {TABLE} WHERE review = ? AND position = ?", row(i)[:2])
        case ("garble", i, state):
            database.execute(
                f"UPDATE {TABLE} SET state = ? WHERE review = ? AND position = ?",
                (state, *row(i)[:2]),
            )
        case ("copy", i, j):
            database.execute(
                f"UPDATE {TABLE} SET state = ? WHERE review = ? AND position = ?",
                (row(j)[2], *row(i)[:2]),
            )
        case ("move", i, j):
            database.execute(
                f"UPDATE OR IGNORE {TABLE} SET review = ? WHERE review = ? AND position = ?",
                (row(j)[0], *row(i)[:2]),
            )
        case ("position", i, position):
            database.execute(
                f"UPDATE OR IGNORE {TABLE} SET position = ? WHERE review = ? AND position = ?",
                (position, *row(i)[:2]),
            )
        case ("forge", i, thread_id, parent):
            state = msgspec.msgpack.encode([thread_id, parent])
            database.execute(
                f"INSERT OR REPLACE INTO {TABLE} (review, position, state) VALUES (?, ?, ?)",
                (row(i)[0], 1_000 + i, state),
            )


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@example(mutations=[("delete", 2), ("forge", 2, "branch", None)])  # the fork as the asker
@given(mutations=st.lists(MUTATIONS, min_size=1, max_size=4))
def test_no_change_to_the_index_makes_a_lookup_name_a_thread_the_log_does_not(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    mutations: list[tuple[Any, ...]],
) -> None:
    """Whatever another writer does to the rows and the position, a lookup names only
    threads that hold the review, the one that asked for it first; it fails on nothing.
    (A removed row of a fork can leave the fork out: the index is not an audit.)"""
    directory = tmp_path_factory.mktemp("reviews")
    monkeypatch.setenv("WORKER_TEST_LEDGER", str(directory / "ledger"))
    path = directory / "threads.db"
    with open_store(f"sqlite:///{path}") as store:
        reviews = _scene(store)
        for review in reviews.values():
            store.threads_with_review(review)  # the index made
    with sqlite3.connect(path) as database:
        for mutation in mutations:
            _mutate(database, mutation)
    database.close()
    with open_store(f"sqlite:///{path}") as store:
        for review in (*reviews.values(), "0" * 32):
            scanned = store._reader.threads_with_review(review)
            for _ in range(2):  # as found, then as the lookup left the index
                found = store.threads_with_review(review)
                assert set(found) <= set(scanned), (review, found, scanned)
                assert found[:1] == scanned[:1], (review, found, scanned)


@pytest.mark.postgres
def test_processes_making_the_index_at_once_on_postgresql_all_succeed(
    postgres_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that makes the index's tracking row while another one's insert of it
    is not yet committed waits for it and keeps it, rather than failing."""
    import threading

    import psycopg

    monkeypatch.setenv("WORKER_TEST_LEDGER", str(tmp_path / "ledger"))
    with open_store(postgres_database) as store:
        reviews = _scene(store)
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        conn.execute("DROP TABLE covonaut_events_reviews")  # an open makes it (ADR 0117)
    with contextlib.ExitStack() as stack:
        first = stack.enter_context(psycopg.connect(postgres_database))
        first.execute(
            "CREATE TABLE covonaut_events_reviews (review text NOT NULL, position BIGINT NOT "
            "NULL, state BYTEA NOT NULL, PRIMARY KEY (review, position))"
        )
        first.commit()
        first.execute("INSERT INTO covonaut_events_reviews VALUES ('', 0, '')")  # uncommitted
        store = stack.enter_context(open_store(postgres_database))
        found: list[Any] = []
        second = threading.Thread(
            target=lambda: found.append(store.threads_with_review(reviews["asked"]))
        )
        second.start()
        with psycopg.connect(postgres_database, autocommit=True) as watch:
            for _ in range(200):  # until the second waits for the first's row
                waiting = watch.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'"
                ).fetchone()
                if waiting and waiting[0]:
                    break
                second.join(0.02)
        first.commit()
        second.join(30)
        assert found == [("asked", "branch")]


def test_a_lookup_that_must_make_the_index_while_another_writer_holds_the_lock_is_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index is made at its first lookup: if another connection holds SQLite's
    write lock then, the lookup raises StoreLockedError (an inbox answers 503), not the
    driver's error; once the lock is gone it is made and read."""
    monkeypatch.setenv("WORKER_TEST_LEDGER", str(tmp_path / "ledger"))
    monkeypatch.setattr(_urls, "SQLITE_LOCK_WAIT_S", 1)
    path = tmp_path / "threads.db"
    with open_store(f"sqlite:///{path}") as store:
        reviews = _scene(store)
    with open_store(f"sqlite:///{path}") as store:
        assert TABLE not in _tables(path)  # no lookup yet: the index is not made
        lock = sqlite3.connect(path, isolation_level=None)
        lock.execute("BEGIN EXCLUSIVE")
        try:
            with pytest.raises(StoreLockedError, match="locked by another writer"):
                store.threads_with_review(reviews["asked"])
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        assert store.threads_with_review(reviews["asked"]) == ("asked", "branch")


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
