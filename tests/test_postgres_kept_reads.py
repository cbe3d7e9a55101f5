"""A PostgreSQL store's restores read on connections of their own (ADR 0086): a session
the server ended is replaced, reads beyond the connections kept go through the pool, and
closing the store ends every session it opened, a read in flight finishing first."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import Store, open_store
from covonaut_es.domain import AgentThread
from covonaut_es.store import AgentApplication
from covonaut_es.store._backends import _postgres_reads
from test_own_types import user_env

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 12, 5, tzinfo=UTC)
DOCS = Path(__file__).resolve().parent.parent / "docs" / "operations.md"


def sessions(postgres_url: str, database: str) -> int:
    """How many sessions the server holds on ``database``."""
    name = database.rsplit("/", 1)[1]
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)
        ).fetchone()
    return int(row[0]) if row else 0


def active(postgres_url: str, statement: str) -> bool:
    """Whether a session of the server runs ``statement`` now."""
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query = %s",
            (statement,),
        ).fetchone()
    return bool(row and row[0])


def end_sessions(postgres_url: str, database: str) -> None:
    name = database.rsplit("/", 1)[1]
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,)
        )


def kept(store: Store) -> Any:
    return store._app.recorder.reads  # type: ignore[attr-defined]


def saved(store: Store, thread_id: str) -> AgentThread:
    thread = AgentThread.start(thread_id, now=NOW)
    store.save(thread)
    return thread


def in_threads(count: int, read: Any) -> list[Any]:
    """``read()`` in ``count`` threads at once; what each returned."""
    found: list[Any] = []
    threads = [threading.Thread(target=lambda: found.append(read())) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return found


def test_a_restore_whose_session_ended_reads_on_a_new_one(
    postgres_url: str, postgres_database: str
) -> None:
    with open_store(postgres_database) as store:
        thread = saved(store, "t")
        assert store.load("t").version == thread.version
        end_sessions(postgres_url, postgres_database)
        assert store.load("t").version == thread.version
        assert kept(store)._open == 1  # the ended one closed, a new one opened


def test_reads_beyond_the_connections_kept_go_through_the_pool(postgres_database: str) -> None:
    with open_store(postgres_database) as store:
        reads, limit = kept(store), store._app.recorder.datastore.pool.min_size  # type: ignore[attr-defined]
        found = in_threads(limit + 3, lambda: reads.rows("SELECT 1 FROM pg_sleep(0.3)", ()))
        assert found == [[(1,)]] * (limit + 3)
        assert reads._open == len(reads._idle) == limit


def test_a_store_keeps_as_many_connections_for_restores_as_docs_operations_says(
    postgres_database: str,
) -> None:
    """A store opened by URL keeps 1 connection for restores (``POSTGRES_POOL_SIZE``
    1), and an application of the user's own that sets none eventsourcing's 5, as
    docs/operations.md says in both places it counts them (helper-190: one said 5 by
    default)."""
    text = " ".join(DOCS.read_text().split())
    assert "`POSTGRES_POOL_SIZE`: 1 for a store opened by URL" in text
    assert "(`Store.from_application`) that sets none has eventsourcing's default of 5" in text
    assert "`POSTGRES_POOL_SIZE`, 1 for a store opened by URL; 5 for an application" in text
    assert "5 by default" not in text
    with open_store(postgres_database) as store:
        saved(store, "t")
        in_threads(4, lambda: store.load("t"))
        assert store._app.recorder.datastore.pool.min_size == 1  # type: ignore[attr-defined]
        assert kept(store)._open == 1
    app = AgentApplication(env=user_env(postgres_database))
    try:
        with Store.from_application(app) as store:
            saved(store, "own")
            assert store.load("own").version == 1
            assert app.recorder.datastore.pool.min_size == 5  # type: ignore[attr-defined]
    finally:
        app.close()


def test_closing_ends_every_session_a_read_in_flight_finishing_first(
    postgres_url: str, postgres_database: str
) -> None:
    store = open_store(postgres_database)
    saved(store, "t")
    in_threads(3, lambda: store.load("t"))  # leaves kept connections idle
    reads = kept(store)
    assert reads._open >= 1
    found: list[Any] = []
    reader = threading.Thread(
        target=lambda: found.append(reads.rows("SELECT 2 FROM pg_sleep(0.5)", ()))
    )
    reader.start()
    while not active(postgres_url, "SELECT 2 FROM pg_sleep(0.5)"):  # its statement runs
        time.sleep(0.01)
    store.close()
    reader.join()
    assert found == [[(2,)]]
    assert reads._open == 0
    assert sessions(postgres_url, postgres_database) == 0


def test_a_connection_that_cannot_be_opened_leaves_restores_to_the_pool(
    postgres_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A password function that fails (a token service down) fails no restore the
    pool can serve, and once it answers again, a connection is opened, after a pause."""
    with open_store(postgres_database) as store:
        thread = saved(store, "t")
        pool, reads = store._app.recorder.datastore.pool, kept(store)  # type: ignore[attr-defined]
        down = [True]

        def token() -> str:
            if down[0]:
                raise RuntimeError("token service unreachable")
            return ""

        monkeypatch.setattr(pool, "get_password_func", token)
        assert store.load("t").version == thread.version  # through the pool
        assert reads._open == 0
        down[0] = False
        assert store.load("t").version == thread.version  # still paused: the pool
        assert reads._open == 0
        monkeypatch.setattr(_postgres_reads, "OPEN_AGAIN_AFTER", 0.0)
        reads._open_again_at = 0.0
        assert store.load("t").version == thread.version
        assert reads._open == len(reads._idle) == 1


FAILURES = {
    "refused": lambda: psycopg.OperationalError("too many clients already"),
    "raised": lambda: RuntimeError("token service unreachable"),
}


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(
        st.sampled_from(["refused", "raised", "up", "load", "loads"]), min_size=1, max_size=12
    )
)
def test_whatever_opening_a_connection_does_every_restore_is_served_and_counted(
    postgres_database: str, steps: list[str]
) -> None:
    """Generated: opening a kept connection fails (as the server refuses one, or the
    password function raises) or works, between loads alone and at once: every load
    reads the thread, and the connections counted are those kept, never above the
    limit."""
    with pytest.MonkeyPatch.context() as patch, open_store(postgres_database) as store:
        patch.setattr(_postgres_reads, "OPEN_AGAIN_AFTER", 0.0)
        thread = saved(store, f"t-{uuid.uuid4().hex}")  # the database serves every example
        pool, reads = store._app.recorder.datastore.pool, kept(store)  # type: ignore[attr-defined]
        failing: list[str] = []

        def password() -> str:
            if failing:
                raise FAILURES[failing[0]]()
            return ""

        patch.setattr(pool, "get_password_func", password)
        for step in steps:
            if step in FAILURES:
                failing[:] = [step]
                reads._close_idle()  # the next load opens one
            elif step == "up":
                failing.clear()
            else:
                count = 3 if step == "loads" else 1
                loaded = in_threads(count, lambda: store.load(thread.thread_id).version)
                assert loaded == [thread.version] * count
            assert reads._open == len(reads._idle) <= pool.min_size
            assert not failing or reads._open == 0
