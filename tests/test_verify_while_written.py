"""``verify`` of a thread that is being written, from another store object (as another
process would), finds nothing: its pass reads up to the head anchored when it began, so
a save committed meanwhile is left to the next audit instead of reading as a deletion,
a rewritten stream or a load that differs (helper-232). At rest, the thread verifies
whole."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ProviderResponse,
    ScriptedProvider,
    Store,
)
from covonaut_es.service import ThreadService


def _runs(store: Store) -> Callable[[], None]:
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider(respond=lambda request: ProviderResponse(content="ok")),
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
        )
    )
    agent.run("first")
    return lambda: agent.run("more")


def _labels(store: Store) -> Callable[[], None]:
    _runs(store)
    service, labels = ThreadService(store), iter(range(10**6))
    return lambda: service.label("t", f"l{next(labels)}")


@pytest.mark.parametrize("writes", [_runs, _labels], ids=["runs", "labels"])
def test_verify_of_a_thread_being_written_finds_nothing(
    store: Store, other: Store, writes: Callable[[Store], Callable[[], None]]
) -> None:
    write = writes(store)  # the snapshots a long thread takes are passed too
    done = threading.Event()

    def writer() -> None:
        try:
            for _ in range(100):
                write()
        finally:
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    found: list[str] = []
    audits = 0
    try:
        while not done.is_set() or audits == 0:
            found += [f.problem for f in other.verify("t").findings]
            audits += 1
    finally:
        done.set()
        thread.join()
    assert found == [], found[:3]
    report = other.verify("t")
    assert report.ok and report.events > 100, report.findings
