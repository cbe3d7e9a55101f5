"""``Store.ping``: whether the store's database answers a statement, tried once within a
deadline of its own, as a health check needs. A read of the store goes through the
back end's retries (on PostgreSQL, eventsourcing's: ten attempts, each waiting for a
connection from the pool), which take tens of seconds to give up on a database that
is gone; the inbox's ``/healthz`` asks ``ping``."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from covonaut_es import Store, open_store
from covonaut_es.errors import ConfigurationError, StoreFileReplacedError, StoreUnavailableError
from inbox_support import inbox_client
from support import converse


def test_a_store_that_answers_pings(store: Store) -> None:
    converse(store, "t")
    store.ping()
    store.ping(timeout=0.5)


def test_a_sqlite_store_whose_file_is_gone_does_not_answer(tmp_path: Path) -> None:
    path = tmp_path / "gone.db"
    with open_store(f"sqlite:///{path}") as store:
        store.ping()
        path.unlink()
        with pytest.raises(StoreFileReplacedError):
            store.ping()


def _lose_the_log(url: str, rename: Callable[[], None]) -> None:
    """A database that answers but no longer holds the store's log (``rename`` moves
    its table behind the library) is a store that does not answer."""
    with open_store(url) as store:
        converse(store, "t")
        store.ping()
        rename()
        with pytest.raises(StoreUnavailableError, match=r"did not answer|does not exist"):
            store.ping()


def test_a_sqlite_store_whose_log_table_is_gone_does_not_answer(tmp_path: Path) -> None:
    path = tmp_path / "t.db"

    def rename() -> None:
        with sqlite3.connect(path) as conn:
            conn.execute("ALTER TABLE stored_events RENAME TO elsewhere")

    _lose_the_log(f"sqlite:///{path}", rename)


@pytest.mark.postgres
def test_a_postgres_store_whose_log_table_is_gone_does_not_answer(postgres_database: str) -> None:
    def rename() -> None:
        with psycopg.connect(postgres_database, autocommit=True) as conn:
            conn.execute("ALTER TABLE covonaut_events RENAME TO elsewhere")

    _lose_the_log(postgres_database, rename)


def _refuse_the_pool(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every connection taken from the store's pool fail the test: ``ping`` must
    not wait for one."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("ping took a connection from the store's pool")

    pool = store._app.recorder.datastore.pool  # type: ignore[attr-defined]
    monkeypatch.setattr(pool, "getconn", refused)
    monkeypatch.setattr(pool, "connection", refused)


@pytest.mark.postgres
def test_a_postgres_store_answers_after_its_sessions_end_and_not_once_its_database_is_gone(
    postgres_url: str, postgres_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = postgres_database.rsplit("/", 1)[1]
    with open_store(postgres_database) as store:
        converse(store, "t")
        _refuse_the_pool(store, monkeypatch)
        store.ping()
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )
        store.ping()  # a connection of its own: the pool's ended sessions do not count
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
        with pytest.raises(StoreUnavailableError, match=f'database "{name}" does not exist'):
            store.ping(timeout=1)
        monkeypatch.undo()


@pytest.mark.postgres
def test_healthz_asks_postgres_once_without_the_pool(
    postgres_url: str, postgres_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/healthz`` answers 503 as soon as the database is gone, not after the store's
    retries (found by helper-87: 42 s with the reads' retries)."""
    name = postgres_database.rsplit("/", 1)[1]
    answers = []
    # The queue's follower finds the database gone too, and says so, typed, as it stops.
    with (
        open_store(postgres_database) as store,
        contextlib.suppress(StoreUnavailableError),
        inbox_client(store) as client,
    ):
        answers.append(client.get("/healthz").status_code)
        _refuse_the_pool(store, monkeypatch)
        answers.append(client.get("/healthz").status_code)
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
        answers.append(client.get("/healthz").status_code)
        monkeypatch.undo()
    assert answers == [200, 200, 503]


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), float("inf"), 3601, True, "2", None])
def test_a_timeout_that_is_not_a_number_of_seconds_is_refused(timeout: Any) -> None:
    with open_store("memory://") as store, pytest.raises(ConfigurationError, match="timeout"):
        store.ping(timeout=timeout)


@pytest.mark.parametrize(
    "kind", ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_closed_store_does_not_answer(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = {
        "memory": lambda: "memory://",
        "sqlite": lambda: f"sqlite:///{tmp_path / 't.db'}",
        "postgres": lambda: request.getfixturevalue("postgres_database"),
    }[kind]()
    store = open_store(url)
    store.ping()
    store.close()
    with pytest.raises(StoreUnavailableError, match="is closed"):
        store.ping()


@pytest.mark.postgres
def test_a_postgres_ping_waits_for_a_locked_log_no_longer_than_its_timeout(
    postgres_database: str,
) -> None:
    """A lock on the log's table (a migration's, ``VACUUM FULL``) holds the ping's read
    no longer than its timeout; and one ping runs at a time, so probes that pile up on
    it open no more sessions than one: another ping waits for it within its own."""
    with open_store(postgres_database) as store, psycopg.connect(postgres_database) as locker:
        converse(store, "t")
        locker.execute("LOCK TABLE covonaut_events IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(StoreUnavailableError, match="statement timeout"):
            store.ping(timeout=1)
        first: list[BaseException] = []

        def ping() -> None:
            try:
                store.ping(timeout=3)
            except StoreUnavailableError as exc:
                first.append(exc)

        running = threading.Thread(target=ping)
        running.start()
        time.sleep(0.5)  # the first ping holds its turn, waiting on the lock
        with pytest.raises(StoreUnavailableError, match=r"within 0\.5 s"):
            store.ping(timeout=0.5)
        running.join()
        assert len(first) == 1
        locker.rollback()
        store.ping()
