"""Optimistic concurrency: agents in several OS processes race on one thread."""

from __future__ import annotations

import multiprocessing
import threading
from collections import Counter
from datetime import UTC, datetime

import pytest

import race_worker
from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    Role,
    ScriptedProvider,
    Store,
    ThreadConflictError,
    open_store,
)
from covonaut_es.domain import AgentThread
from covonaut_es.messages import Message
from support import answer

RACERS = 4
ROUNDS = 5


@pytest.mark.slow
def test_racing_processes_one_winner_per_version_no_gaps_no_duplicates(
    shared_url: str,
) -> None:
    """Each version is won by exactly one writer; losers get ThreadConflictError, or
    ThreadBusyError while another holds the run lease; the final stream has no gaps or
    duplicates and keeps every winner's message."""
    with open_store(shared_url) as store:
        config = AgentConfig(
            provider=ScriptedProvider([answer("ready")]),
            checkpoint=CheckpointSettings(store=store, thread_id="contested"),
        )
        Agent(config).run("start")
    context = multiprocessing.get_context("spawn")
    barrier, queue = context.Barrier(RACERS), context.Queue()
    racers = [
        context.Process(
            target=race_worker.race,
            args=(shared_url, "contested", racer, ROUNDS, barrier, queue),
        )
        for racer in range(RACERS)
    ]
    for process in racers:
        process.start()
    results = [queue.get(timeout=120) for _ in racers]
    for process in racers:
        process.join(timeout=60)
        assert process.exitcode == 0
    outcomes = [outcome for racer in results for outcome in racer]
    assert [detail for kind, detail in outcomes if kind == "error"] == []
    won = [detail for kind, detail in outcomes if kind == "won"]
    lost = [detail for kind, detail in outcomes if kind == "lost"]
    busy = [detail for kind, detail in outcomes if kind == "busy"]
    assert len(won) + len(lost) + len(busy) == RACERS * ROUNDS
    # A racer that read the thread before the last round's winner saved may take the
    # lease and then lose on its version: a round can go without a winner.
    assert won
    assert lost or busy, "the racers never collided: the test did not race"
    with open_store(shared_url) as store:
        history = store.history("contested")
        versions = [event.originator_version for event in history]
        assert versions == list(range(1, len(history) + 1))
        users = [m.content for m in store.state_at("contested").messages if m.role is Role.USER]
        assert Counter(users[1:]) == Counter(won)  # each winner's input exactly once
        assert all(1 <= version < len(history) for version in lost)
        assert store.replay_state("contested") == store.state_at("contested")


def test_an_agent_behind_the_store_runs_on_what_is_stored(store: Store) -> None:
    """An agent whose copy fell behind the store's head (another agent ran the thread
    since) loads the thread again under the run lease before its run: the run goes on
    from what is stored, and nothing is lost or conflicts."""

    def agent(text: str) -> Agent:
        return Agent(
            AgentConfig(
                provider=ScriptedProvider([answer(text)]),
                checkpoint=CheckpointSettings(store=store, thread_id="t"),
            )
        )

    agent("one").run("hello")
    stale = agent("fresh")
    stale.restore_latest_checkpoint()
    agent("two").run("again")
    assert stale.run("stale") == "fresh"
    contents = [m.content for m in store.state_at("t").messages]
    assert contents == ["hello", "one", "again", "two", "stale", "fresh"]


def test_a_save_from_behind_the_head_conflicts_and_stores_nothing(store: Store) -> None:
    """Two writers that append to a thread from the same version: the second gets
    ThreadConflictError naming the thread and the version it started from, and nothing
    of its save is stored."""
    Agent(
        AgentConfig(
            provider=ScriptedProvider([answer("one")]),
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
        )
    ).run("hello")
    first, second = store.load("t"), store.load("t")
    first.label("a", version=None, now=store.clock())
    second.label("b", version=None, now=store.clock())
    store.save(first)
    version = store.state_at("t").version
    with pytest.raises(ThreadConflictError, match="'t'") as info:
        store.save(second)
    assert info.value.thread_id == "t"
    assert info.value.expected_version < version
    assert store.state_at("t").version == version


WRITERS = 6
SAVES = 25


def test_a_tailing_reader_skips_no_event_while_writers_commit(shared_url: str) -> None:
    """Notification ids become visible in order: a reader following the log while
    several writers commit never sees an id before a lower one that commits later (a
    projection would lose that event). On PostgreSQL this is the store's one-statement
    insert, which takes the table lock inside the server."""
    with open_store(shared_url) as store:
        if shared_url.startswith("postgresql"):
            assert store._app.recorder.insert_function is not None  # type: ignore[attr-defined]
        recorder = store._app.recorder
        seen: list[int] = []
        done = threading.Event()

        def write(n: int) -> None:
            now = datetime.now(UTC)
            thread = AgentThread.start(f"w{n}", now=now)
            for i in range(SAVES):
                thread.append_message(Message(role="user", content=f"{n}.{i}"), now=now)
                store.save(thread)

        def tail() -> None:
            position = 0
            while True:
                finished = done.is_set()
                for item in recorder.select_notifications(position, 1000, inclusive_of_start=False):
                    seen.append(item.id)
                    position = item.id
                if finished:
                    return

        reader = threading.Thread(target=tail)
        reader.start()
        writers = [threading.Thread(target=write, args=(n,)) for n in range(WRITERS)]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        done.set()
        reader.join()
        stored = [n.id for n in recorder.select_notifications(None, 10_000)]
    assert len(stored) == WRITERS * (SAVES + 1)
    assert seen == stored
