"""Closing a SQLite store while other threads read or write it must not crash the
process: Python's sqlite3 crashes (SIGSEGV) when a connection is closed under a
statement another thread is stepping. Each race runs in its own interpreter
(close_racer.py), whose exit code is the verdict."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import ConnectionPoolClosedError
from hypothesis import given, settings
from hypothesis import strategies as st

from close_racer import open_connections, seed
from covonaut_es import open_store
from covonaut_es.domain import AgentThread
from covonaut_es.store._backends import _sqlite_connections

RACER = Path(__file__).with_name("close_racer.py")


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("close-race") / "threads.db"
    seed(f"sqlite:///{path}")
    return path


def race(path: Path, rounds: int, what: str, *extra: int) -> None:
    result = subprocess.run(
        [sys.executable, str(RACER), str(path), str(rounds), what, *map(str, extra)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode < 0:
        crashed = f"the process was killed by {signal.Signals(-result.returncode).name}"
        pytest.fail(f"{crashed} while a store was closed under its readers\n{result.stderr}")
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_closing_a_store_under_its_readers_and_saver_does_not_crash_the_process(
    seeded: Path,
) -> None:
    race(seeded, 10, "store")


@pytest.mark.slow
def test_closing_a_review_queue_under_its_runner_does_not_crash_the_process(
    seeded: Path,
) -> None:
    race(seeded, 30, "queue")


@pytest.mark.slow
@settings(max_examples=5, deadline=None)
@given(readers=st.integers(min_value=1, max_value=8), delay_ms=st.integers(0, 60))
def test_closing_returns_with_every_connection_closed_whatever_the_readers_do(
    seeded: Path, readers: int, delay_ms: int
) -> None:
    race(seeded, 3, "store", readers, delay_ms)


def test_a_connection_in_use_past_the_wait_is_closed_by_its_thread_not_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read and a save that outlast the close's wait go on on their connections, which
    are closed when they end; the store is closed for anything begun after."""
    monkeypatch.setattr(_sqlite_connections, "CLOSE_WAIT", 0.05)
    path = tmp_path / "threads.db"
    store = open_store(f"sqlite:///{path}")
    store.save(AgentThread.start("t", now=datetime(2026, 12, 1, tzinfo=UTC)))
    recorder: Any = store._app.recorder
    counted: list[int] = []
    holding = threading.Barrier(3)
    released = threading.Event()

    def hold(transaction: Callable[[], AbstractContextManager[Any]]) -> None:
        with transaction() as cursor:
            holding.wait()
            released.wait()
            cursor.execute(f"SELECT COUNT(*) FROM {recorder.events_table_name}")
            counted.append(cursor.fetchone()[0])

    holders = [
        threading.Thread(target=hold, args=(t,))
        for t in (lambda: recorder.datastore.transaction(commit=False), recorder.writer.transaction)
    ]
    for holder in holders:
        holder.start()
    holding.wait()
    store.close()  # gives up waiting for them
    assert open_connections(path) > 0
    released.set()
    for holder in holders:
        holder.join()
    assert counted == [1, 1]
    assert open_connections(path) == 0
    with pytest.raises(ConnectionPoolClosedError):
        store.load("t")


class HeldReads:
    """Every connection the store opens gets ``hold()``, a SQL function that waits, so
    that a test can keep reads in flight: ``arrived`` counts the reads inside it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.arrived = threading.Semaphore(0)
        self.released = threading.Event()
        connect = _sqlite_connections._connect

        def connecting(pool: Any, *, max_age: float | None) -> Any:
            connection = connect(pool, max_age=max_age)
            connection._sqlite_conn.create_function("hold", 0, self._hold)
            return connection

        monkeypatch.setattr(_sqlite_connections, "_connect", connecting)

    def _hold(self) -> int:
        self.arrived.release()
        self.released.wait()
        return 1

    def start(self, pool: Any, reads: int) -> tuple[list[threading.Thread], list[Any]]:
        """``reads`` reads of ``SELECT hold()`` through ``pool``, each in a thread of its
        own, once all are inside it."""
        found: list[Any] = []
        threads = [
            threading.Thread(target=lambda: found.append(pool.read("SELECT hold()", ())))
            for _ in range(reads)
        ]
        for thread in threads:
            thread.start()
        for _ in range(reads):
            assert self.arrived.acquire(timeout=10)
        return threads, found


def test_a_read_in_flight_past_the_wait_is_closed_by_its_thread_not_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read on one of the connections kept for reads, outlasting the close's wait,
    ends with its rows; its connection is closed when it ends, with the store's last."""
    monkeypatch.setattr(_sqlite_connections, "CLOSE_WAIT", 0.05)
    held = HeldReads(monkeypatch)
    path = tmp_path / "threads.db"
    store = open_store(f"sqlite:///{path}")
    store.save(AgentThread.start("t", now=datetime(2026, 12, 1, tzinfo=UTC)))
    pool: Any = store._app.recorder.datastore.pool
    threads, found = held.start(pool, 1)
    store.close()  # gives up waiting for the read
    assert open_connections(path) > 0
    held.released.set()
    threads[0].join()
    assert [tuple(row) for rows in found for row in rows] == [(1,)]
    assert open_connections(path) == 0
    with pytest.raises(ConnectionPoolClosedError):
        store.load("t")


def test_reads_beyond_the_connections_kept_for_them_go_through_the_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More reads at once than the pool keeps connections for them: each is read, no
    more than ``pool_size`` reading connections are opened, and closing, once they
    ended, closes every connection at once."""
    held = HeldReads(monkeypatch)
    path = tmp_path / "threads.db"
    store = open_store(f"sqlite:///{path}")
    pool: Any = store._app.recorder.datastore.pool
    threads, found = held.start(pool, pool.pool_size + 2)
    assert pool._readers == pool.pool_size
    held.released.set()
    for thread in threads:
        thread.join()
    assert len(found) == pool.pool_size + 2
    assert len(pool._idle_readers) == pool.pool_size
    store.close()
    assert open_connections(path) == 0
