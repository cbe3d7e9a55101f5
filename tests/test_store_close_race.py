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
