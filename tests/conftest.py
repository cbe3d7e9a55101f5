"""Shared pytest fixtures."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from covonaut_es import Store, open_store
from postgres_server import URL_ENV, PostgresServer, start_or_unavailable
from provider_wire import VendorWire
from wire_server import WireServer


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a PostgreSQL database for the whole test session.

    Uses ``$COVONAUT_ES_TEST_POSTGRES_URL`` when set; otherwise starts a throwaway
    server (see ``postgres_server.py``) and removes it at the end of the session.
    Skips when no server can be had, or fails when ``$CI`` is set.
    """
    external = os.environ.get(URL_ENV, "").strip()
    if external:
        yield external
        return
    server = PostgresServer()
    url = start_or_unavailable(server)
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture
def postgres_database(postgres_url: str) -> Iterator[str]:
    """A fresh, empty database on the session's PostgreSQL server, dropped afterwards."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield postgres_url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty store of each kind: the contract suite runs on all three."""
    if request.param == "memory":
        return "memory://"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'threads.db'}"
    return str(request.getfixturevalue("postgres_database"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store on disk, which other processes can open too: a SQLite file or a
    PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'threads.db'}"
    return str(request.getfixturevalue("postgres_database"))


@pytest.fixture
def open_test_store(store_url: str) -> Iterator[Callable[..., Store]]:
    """Open stores on ``store_url``; at teardown, every thread they hold must replay
    from its events alone to the state loaded through snapshots (the replay law)."""
    opened: list[Store] = []

    def open_(**options: Any) -> Store:
        store = open_store(store_url, **options)
        opened.append(store)
        return store

    yield open_
    try:
        for store in opened:
            for thread_id in store.thread_ids():
                assert store.replay_state(thread_id) == store.state_at(thread_id), thread_id
    finally:
        for store in opened:
            store.close()


@pytest.fixture
def other(store: Store) -> Iterator[Store]:
    """A second store object on the same database, as another process would open it."""
    if store.url.startswith("memory"):
        yield store
        return
    with open_store(store.url) as second:
        yield second


@pytest.fixture
def store(open_test_store: Callable[..., Store]) -> Store:
    """One store of each kind (see ``store_url``)."""
    return open_test_store()


@pytest.fixture
def server() -> Iterator[WireServer]:
    """A local server that plays recorded vendor answers (see ``wire_server.py``)."""
    with WireServer() as server:
        yield server


@pytest.fixture
def sleeps() -> list[float]:
    """The waits between attempts of ``provider``, recorded instead of slept."""
    return []


@pytest.fixture
def provider(wire: VendorWire, server: WireServer, sleeps: list[float]) -> Iterator[Any]:
    """The adapter of the test module's ``wire`` vendor, on ``server``; closed afterwards."""
    with wire.provider(server.url, sleep=sleeps.append) as provider:
        yield provider


@pytest.fixture
def simulated_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stores on disk read no clock of their own, as a store in memory: the test's
    clock stands for every clock, its runner's deadlines and its sweeps (ADR 0119)."""
    from covonaut_es.store._records import StoredRecords

    monkeypatch.setattr(StoredRecords, "database_now", lambda self: None)
