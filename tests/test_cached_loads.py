"""An embedded application with eventsourcing's aggregate cache on, read from several
threads while one writes: every load gives a state the thread had at its version, never
one copied while another thread fast-forwarded the cached aggregate."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import AgentApplication, Store
from covonaut_es.domain import AgentThread
from covonaut_es.messages import Message, Role

NOW = datetime(2026, 12, 1, tzinfo=UTC)


class CachingApp(AgentApplication):
    """An application of the user's own, its aggregates cached."""


@pytest.fixture
def switching_often() -> Iterator[None]:
    """Threads switched every few microseconds, so that interleavings are many."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(readers=st.integers(2, 5), fastforward=st.booleans())
def test_loads_of_a_cached_thread_written_meanwhile_are_whole(
    tmp_path_factory: pytest.TempPathFactory,
    switching_often: None,
    readers: int,
    fastforward: bool,
) -> None:
    path = tmp_path_factory.mktemp("cached") / "threads.db"
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": str(path),
        "AGGREGATE_CACHE_MAXSIZE": "100",
        "AGGREGATE_CACHE_FASTFORWARD": "y" if fastforward else "n",
    }
    store = Store.from_application(CachingApp(env=env))
    try:
        store.save(AgentThread.start("x", now=NOW))
        done = threading.Event()
        loaded: list[tuple[int, int, str | None]] = []

        def write() -> None:
            thread = store.load("x")
            for n in range(60):
                thread.append_message(Message(Role.USER, f"m{n} " + "x" * 200), now=NOW)
                store.save(thread)
            done.set()

        def read() -> None:
            while not done.is_set():
                found = store.load("x")
                loaded.append((found.version, len(found.state.messages), found.chain_head))

        running = [threading.Thread(target=write)]
        running += [threading.Thread(target=read) for _ in range(readers)]
        for each in running:
            each.start()
        for each in running:
            each.join(60)
        assert loaded
        truth: dict[int, tuple[int, str | None]] = {}
        for version, messages, chain in loaded:
            if version not in truth:
                at = store.load("x", version=version)
                truth[version] = (len(at.state.messages), at.chain_head)
            assert truth[version] == (messages, chain), f"a torn load at version {version}"
    finally:
        store.close()
