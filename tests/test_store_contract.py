"""The store's contract, run on every back end (memory, SQLite, PostgreSQL).

Behaviours of :class:`~covonaut_es.Store` that hold whatever the back end: reopening,
compression, snapshots and time travel, forks, concurrent saves, named-state keys, and
the reads a runner and the reviewer queue rely on (``head_version``, ``events_after``,
``threads_with_review``, ``exists``). Each test goes through the public API; the
recorder-level contract is ``test_recorder_contracts.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    ProviderResponse,
    ScriptedProvider,
    Store,
    ThreadConflictError,
    Tool,
    ToolCall,
    open_store,
)
from covonaut_es.audit import export_thread
from covonaut_es.domain import CheckpointReason, thread_aggregate_id
from covonaut_es.errors import InvalidStateKeyError
from covonaut_es.messages import Message, Role
from covonaut_es.store import Compression
from support import (
    agent_on,
    answer,
    call,
    conversation,
    echo_script,
    raw_records,
    start_bare_run,
    ticking_clock,
)

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def user(text: str) -> Message:
    return Message(Role.USER, text)


# Reopening and settings --------------------------------------------------------------


def test_a_store_on_disk_restores_after_it_is_reopened(shared_url: str) -> None:
    """A SQLite or PostgreSQL store restores after its first Store object is closed."""
    with open_store(shared_url) as store:
        state = conversation(store, "t", 2).state
    with open_store(shared_url) as reopened:
        assert reopened.state_at("t") == state


@pytest.fixture
def second_url(store_url: str, tmp_path: Path) -> Iterator[str]:
    """Another empty store of the kind of ``store_url``, beside it."""
    if store_url.startswith("memory"):
        yield "memory://"
    elif store_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'second.db'}"
    else:
        server, _, first = store_url.rpartition("/")
        name = f"{first}_second"
        with psycopg.connect(store_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        yield f"{server}/{name}"
        with psycopg.connect(store_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.mark.parametrize("compress", ["zstd", "zlib"])
def test_compression_shrinks_records(
    open_test_store: Callable[..., Store], second_url: str, compress: Compression
) -> None:
    """Each compression stores the same thread in fewer bytes than none."""
    long_answer = "all work and no play " * 50
    store = open_test_store(compress="none")
    with open_store(second_url, compress=compress) as packed:
        for each in (store, packed):
            agent_on(each, "t", [answer(long_answer)]).run("go")
        assert sum(map(len, raw_records(packed))) < sum(map(len, raw_records(store))) / 2
        assert packed.state_at("t").messages[-1].content == long_answer


# Snapshots and time travel -------------------------------------------------------------


def test_replay_law_holds_across_snapshots(store: Store) -> None:
    """Long threads are loaded through snapshots; the result equals the replay."""
    agent = agent_on(store, "long", echo_script(130))
    agent.run("go")
    assert agent.state.version > 256
    assert store.verify("long").snapshots_checked >= 1
    assert store.replay_state("long") == agent.state == store.state_at("long")
    for checkpoint in store.checkpoints("long")[::7]:
        partial = store.state_at("long", checkpoint.version)
        assert partial.version == checkpoint.version
        assert partial.checkpoints[-1] == checkpoint


def test_a_new_snapshot_replaces_the_older_ones_and_time_travel_still_works(
    store_url: str, store: Store
) -> None:
    """A database store keeps one snapshot per thread, the newest (an in-memory store
    keeps them all, ADR 0014); the state at any version, below it or above it, is still
    the one the thread had then."""
    thread = AgentThread.start("long", now=NOW)
    start_bare_run(thread, now=NOW)
    states = {}
    written = 0
    for i in range(1, 301):
        thread.append_message(user(f"message {i}"), now=NOW)
        if i % 10 == 0:
            thread.save_checkpoint(CheckpointReason.MANUAL, retain=0, now=NOW)
            store.save(thread)
            written += store.snapshot_if_due(thread)
            states[thread.version] = thread.state
    assert written >= 2
    report = store.verify("long")
    assert report.ok, report.findings
    kept = written if store_url.startswith("memory") else 1  # several were written
    assert report.snapshots_checked == kept
    for version in sorted(states)[::4]:
        assert store.state_at("long", version) == states[version]
    assert store.state_at("long") == thread.state


def newest_snapshot(store: Store, thread_id: str) -> int | None:
    """The version of the thread's newest stored snapshot, if it has one."""
    assert store._app.snapshots is not None
    stream = thread_aggregate_id(thread_id)
    newest = store._app.snapshots.recorder.select_events(stream, desc=True, limit=1)
    return newest[0].originator_version if newest else None


def grown(store: Store, thread: AgentThread, events: int) -> AgentThread:
    """``thread`` with ``events`` more messages, saved."""
    for i in range(events):
        thread.append_message(user(f"message {thread.version} {i}"), now=NOW)
    store.save(thread)
    return thread


def test_at_rest_a_snapshot_is_due_once_its_tail_is_a_sixty_fourth_of_the_thread(
    store_url: str, store: Store
) -> None:
    """When a run ends a snapshot is due sooner than at a checkpoint (ADR 0085): once the
    events since the last one are a sixty-fourth of the thread and at least 32, where a
    checkpoint waits for a sixteenth and at least 64; no thread under 64 events has one.
    A store in memory, which keeps every snapshot, writes none at rest."""
    thread = AgentThread.start("rest", now=NOW)
    start_bare_run(thread, now=NOW)
    grown(store, thread, 61)
    assert thread.version == 63
    assert not store.snapshot_if_due(thread, at_rest=True)
    grown(store, thread, 1)
    if store_url.startswith("memory"):
        assert not store.snapshot_if_due(thread, at_rest=True)
        assert store.snapshot_if_due(thread)  # at a checkpoint, as before
        return
    assert store.snapshot_if_due(thread, at_rest=True)
    assert newest_snapshot(store, "rest") == 64

    grown(store, thread, 31)
    assert not store.snapshot_if_due(thread, at_rest=True)
    grown(store, thread, 1)
    assert not store.snapshot_if_due(thread)  # 32 events: short of a checkpoint's 64
    assert store.snapshot_if_due(thread, at_rest=True)
    assert newest_snapshot(store, "rest") == 96

    grown(store, thread, 2521 - thread.version)
    assert store.snapshot_if_due(thread, at_rest=True)
    grown(store, thread, 39)  # 2,560 events: a sixty-fourth is 40
    assert not store.snapshot_if_due(thread, at_rest=True)
    grown(store, thread, 1)
    assert store.snapshot_if_due(thread, at_rest=True)
    assert newest_snapshot(store, "rest") == thread.version == 2561
    assert store.state_at("rest") == thread.state == store.replay_state("rest")


@pytest.mark.parametrize("awaited", [False, True], ids=["run", "arun"])
def test_a_run_that_ends_leaves_a_snapshot_of_its_end_when_one_is_due_at_rest(
    store_url: str, store: Store, awaited: bool
) -> None:
    """A run's end stores a snapshot at the thread's head once one is due at rest, so
    that the next restore replays nothing; a short thread's run leaves none, and a store
    in memory keeps only the snapshots its checkpoints wrote."""
    for thread_id, turns in (("long", 60), ("short", 3)):
        agent = agent_on(store, thread_id, echo_script(turns))
        if awaited:
            asyncio.run(agent.arun("go"))
        else:
            agent.run("go")
        head, newest = store.head_version(thread_id), newest_snapshot(store, thread_id)
        if thread_id == "short":
            assert newest is None
        elif store_url.startswith("memory"):
            assert newest is not None and newest < head  # its checkpoints' only
        else:
            assert newest == head
        assert store.state_at(thread_id) == agent.state == store.replay_state(thread_id)
    report = store.verify("long")
    assert report.ok, report.findings


_longs = itertools.count()


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    saves=st.lists(st.integers(1, 40), min_size=3, max_size=12),
    data=st.data(),
)
def test_a_load_at_any_version_starts_from_the_newest_snapshot_at_or_below_it(
    store: Store, saves: list[int], data: st.DataObject
) -> None:
    """Property: whatever the saves and the snapshots they made, the state at any saved
    version (below, at or above a snapshot's) is the one the thread had then, read in
    one statement of the snapshot at or below it and the events after it."""
    thread_id = f"long{next(_longs)}"  # one store for every example: a new thread each
    thread = AgentThread.start(thread_id, now=NOW)
    start_bare_run(thread, now=NOW)
    states = {}
    for index, count in enumerate(saves):
        for i in range(count * 4):
            thread.append_message(user(f"save {index} message {i}"), now=NOW)
        store.save(thread)
        store.snapshot_if_due(thread)
        states[thread.version] = thread.state
    versions = data.draw(st.lists(st.sampled_from(sorted(states)), min_size=1, max_size=6))
    for version in versions:
        assert store.state_at(thread_id, version) == states[version]
    assert store.state_at(thread_id) == thread.state == store.replay_state(thread_id)


# Forks -------------------------------------------------------------------------------

fork_points = st.lists(st.floats(0, 1), min_size=1, max_size=4)
_parents = itertools.count()


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(turns=st.integers(1, 6), points=fork_points, extra=st.integers(0, 3))
def test_fork_law_parent_prefix_plus_fork_events(
    store: Store, turns: int, points: list[float], extra: int
) -> None:
    """Property: for random threads and fork points, the fork's state at its head is the
    parent's state at the fork version plus the fork's own events, and the parent's
    stored events are unchanged."""
    parent = f"p{next(_parents)}"  # one store for every example: a new parent each
    conversation(store, parent, turns)
    head = store.state_at(parent).version
    parent_before = list(export_thread(store, parent))
    for index, point in enumerate(points):
        at = max(1, round(point * head))
        fork = store.fork(parent, at_version=at, new_thread_id=f"{parent}-f{index}")
        script = [call((f"x{i}", "echo", '{"text": "y"}')) for i in range(extra)]
        branch = agent_on(store, fork, [*script, ProviderResponse(content="z")])
        for pending in branch.in_doubt:  # forked between a call and its result
            branch.settle(pending.call.id, result="settled in the fork")
        branch.run("fork input")
        forked = store.history(fork)[at]
        assert forked.interrupts == store.state_at(parent, at).interrupts  # for projections
        own = store.history(fork)[at + 1 :]  # after the Forked event
        expected = AgentThread.Forked.graft(store.history(fork)[at], store.load(parent, version=at))
        for event in own:
            event.mutate(expected)
        assert store.state_at(fork) == expected.state == store.replay_state(fork)
    assert list(export_thread(store, parent)) == parent_before


# Concurrent saves ----------------------------------------------------------------------

THREADS, SAVES = 6, 25


def test_threads_saving_through_one_store_at_once_lose_nothing(store: Store) -> None:
    """Several threads of a process saving their own threads through one store object
    at once lose no event and break no chain."""
    failures: list[BaseException] = []

    def talk(name: str) -> None:
        try:
            thread = AgentThread.start(name, now=NOW)
            for n in range(SAVES):
                thread.append_message(user(f"{name} says {n}"), now=NOW)
                store.save(thread)
        except BaseException as exc:  # reported below, with the thread that raised it
            failures.append(exc)

    workers = [threading.Thread(target=talk, args=(f"t{i}",)) for i in range(THREADS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert failures == []
    for i in range(THREADS):
        messages = store.load(f"t{i}").state.messages
        assert [m.content for m in messages] == [f"t{i} says {n}" for n in range(SAVES)]
        assert store.verify(f"t{i}").ok


def test_a_conflicting_save_stores_nothing_and_the_store_saves_again(
    store: Store, other: Store
) -> None:
    """A save from behind another writer's raises ThreadConflictError and stores
    nothing; the same store then saves the reloaded thread, and both stores read it."""
    store.save(AgentThread.start("t", now=NOW))
    mine, theirs = store.load("t"), other.load("t")
    theirs.append_message(user("theirs"), now=NOW)
    other.save(theirs)
    mine.append_message(user("mine"), now=NOW)
    with pytest.raises(ThreadConflictError):
        store.save(mine)
    assert [m.content for m in store.load("t").state.messages] == ["theirs"]
    mine = store.load("t")
    mine.append_message(user("mine, again"), now=NOW)
    store.save(mine)
    assert [m.content for m in other.load("t").state.messages] == ["theirs", "mine, again"]


# Named states ----------------------------------------------------------------------------

BAD_STATE_KEYS = ["", "../escape", "a/b", "a\\b", ".hidden", "-dash", "x" * 129, "nul\x00", "é", 7]


def test_state_keys_are_checked_by_the_thread_store(store: Store) -> None:
    """A key that is not 1-128 letters, digits, '.', '_' or '-' (starting with a letter
    or digit) is refused by the store's named states, as by every state store."""
    for key in BAD_STATE_KEYS:
        with pytest.raises(InvalidStateKeyError, match="is not allowed"):
            store.write_state(key, {"_v": 1})  # type: ignore[arg-type]
        with pytest.raises(InvalidStateKeyError):
            store.read_state(key)  # type: ignore[arg-type]


# What runners and the reviewer queue read ----------------------------------------------


def test_head_version_is_the_newest_stored_version_of_the_threads_own_stream(
    store: Store,
) -> None:
    """head_version is None for a thread never saved, then follows each save; a fork's
    is its own head, and forking leaves the parent's as it was."""
    assert store.head_version("t") is None
    assert not store.exists("t")
    agent = conversation(store, "t", 2)
    assert store.exists("t")
    assert store.head_version("t") == agent.state.version == store.state_at("t").version
    fork = store.fork("t", at_version=3, new_thread_id="t-fork")
    assert store.head_version(fork) == 4 == store.state_at(fork).version
    assert store.head_version("t") == agent.state.version


def test_last_log_position_is_the_newest_event_of_any_writer(store: Store, other: Store) -> None:
    """last_log_position is 0 for an empty store, then the position of the newest event
    in the log, whoever wrote it; a consumer that recorded it has nothing after it."""
    assert store.last_log_position() == 0
    thread = AgentThread.start("t", now=NOW)
    store.save(thread)
    first = store.last_log_position()
    assert first >= thread.version
    theirs = other.load("t")
    theirs.append_message(user("one"), now=NOW)
    other.save(theirs)
    assert store.last_log_position() > first
    store.record_log_position("reader", store.last_log_position())
    assert store.log_position("reader") == store.last_log_position()


def test_events_after_lists_what_other_writers_appended_since_a_version(
    store: Store, other: Store
) -> None:
    """events_after gives the thread's own events after a version, in order; none after
    its head."""
    thread = AgentThread.start("t", now=NOW)
    store.save(thread)
    loaded_at = thread.version
    theirs = other.load("t")
    for text in ("one", "two"):
        theirs.append_message(user(text), now=NOW)
    other.save(theirs)
    after = store.events_after("t", loaded_at)
    assert [e.originator_version for e in after] == [loaded_at + 1, loaded_at + 2]
    assert [e.message.content for e in after] == ["one", "two"]  # type: ignore[attr-defined]
    assert store.events_after("t", theirs.version) == ()


def test_threads_with_review_names_the_asker_and_the_forks_that_inherited_it(
    store: Store,
) -> None:
    """A review is found in the thread that asked for it and in each fork made while it
    was pending, in creation order; a fork from before the request holds none, and an
    unknown review id is in no thread."""
    pay = Tool("pay", "Pay", {"type": "object"}, lambda ctx, args: None, requires_approval=True)
    asking = Agent(
        AgentConfig(
            provider=ScriptedProvider(
                [ProviderResponse(tool_calls=(ToolCall("r1", "pay", '{"amount": 1}'),))]
            ),
            tools=[pay],
            checkpoint=CheckpointSettings(store=store, thread_id="asks"),
            clock=ticking_clock(),
        )
    )
    asking.run("Pay 1.")
    (review,) = store.state_at("asks").reviews
    review_id = review.request.review_id
    store.fork("asks", at_version=2, new_thread_id="before-the-request")
    store.fork("asks", new_thread_id="inherits")
    store.fork("inherits", new_thread_id="inherits-again")
    assert store.threads_with_review(review_id) == ("asks", "inherits", "inherits-again")
    assert store.threads_with_review("no-such-review") == ()
    assert list(store.thread_ids()) == ["asks", "before-the-request", "inherits", "inherits-again"]
