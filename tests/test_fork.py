"""Branching and time travel: forks of streams, the session tree, labels."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest

from covonaut_es import (
    AgentThread,
    Message,
    Role,
    Store,
    ThreadConflictError,
    ThreadNotFoundError,
    ThreadStatus,
    open_store,
)
from covonaut_es.domain import Label, ThreadParent
from covonaut_es.errors import CheckpointNotFoundError, ConfigurationError, ThreadStateError
from covonaut_es.service import ThreadService
from support import agent_on, answer, call, call_intents, conversation, ticking_clock


def test_fork_loads_the_parent_prefix_plus_its_own_events(store: Store) -> None:
    """A fork at version v has the parent's state at v, then diverges on its own."""
    parent = conversation(store, "root", 3)
    at = parent.state.version - 4
    fork_id = store.fork("root", at_version=at, new_thread_id="branch")
    assert fork_id == "branch"
    fork_state = store.state_at("branch")
    parent_at = store.state_at("root", at)
    assert fork_state.messages == parent_at.messages
    assert fork_state.version == at + 1
    assert fork_state.parent == ThreadParent("root", at)
    assert fork_state.thread_id == "branch"
    branch = agent_on(store, "branch", [answer("branch answer")])
    branch.run("another way")
    assert branch.messages[: len(parent_at.messages)] == parent_at.messages
    assert store.state_at("root") == parent.state  # the parent did not move


def test_fork_defaults_to_the_head_and_makes_a_unique_id(store: Store) -> None:
    """Without a version the fork branches at the parent's head, with a fresh id."""
    parent = conversation(store, "root", 1)
    first, second = store.fork("root"), store.fork("root")
    assert first != second and first.startswith("root")
    assert store.parent(first) == ThreadParent("root", parent.state.version)


def test_fork_at_checkpoint(store: Store) -> None:
    """at_checkpoint forks at the version a checkpoint recorded."""
    conversation(store, "root", 3)
    checkpoint = store.checkpoints("root")[1]
    fork = store.fork("root", at_checkpoint=checkpoint.sequence)
    assert store.parent(fork) == ThreadParent("root", checkpoint.version)
    with pytest.raises(CheckpointNotFoundError, match="no checkpoint 99"):
        store.fork("root", at_checkpoint=99)
    with pytest.raises(ConfigurationError, match="not both"):
        store.fork("root", at_version=2, at_checkpoint=1)


def test_fork_refuses_bad_versions_and_existing_ids(store: Store) -> None:
    """Versions outside the stream and ids already taken are refused; nothing stored."""
    conversation(store, "root", 1)
    head = store.state_at("root").version
    with pytest.raises(ThreadNotFoundError, match=f"versions 1 to {head}"):
        store.fork("root", at_version=head + 1)
    with pytest.raises(ThreadNotFoundError):
        store.fork("nobody")
    conversation(store, "other", 1)
    with pytest.raises(ThreadConflictError, match="already exists"):
        store.fork("root", new_thread_id="other")
    assert store.children("root") == ()


def test_a_fork_onto_a_shorter_thread_is_refused_on_every_insert_path(shared_url: str) -> None:
    """A fork named after an existing thread whose versions end below the fork's (so
    that no version collides) is refused and stores nothing: with the store's insert,
    eventsourcing's insert (no PostgreSQL insert function) and with no head table."""
    with open_store(shared_url) as store:
        conversation(store, "root", 2)
        conversation(store, "other", 1)
    postgres = shared_url.startswith("postgresql")
    older_schemas = ["DROP TABLE stored_events_heads"]
    if postgres:
        older_schemas = ["DROP FUNCTION covonaut_events_insert", "DROP TABLE covonaut_events_heads"]
    for statement in [None, *older_schemas]:
        if statement and postgres:
            with psycopg.connect(shared_url) as conn:
                conn.execute(statement)
        elif statement:
            with closing(sqlite3.connect(shared_url.removeprefix("sqlite:///"))) as conn:
                conn.execute(statement)
        with open_store(shared_url, create_tables=False) as store:
            other = store.history("other")
            with pytest.raises(ThreadConflictError, match="already exists"):
                store.fork("root", new_thread_id="other")
            assert store.history("other") == other, statement


def test_a_new_thread_under_a_forks_id_is_refused_and_the_fork_kept(store: Store) -> None:
    """A thread started and saved under the id of an existing fork (whose own stream
    starts above the new thread's versions, so that no version collides) is a
    ThreadConflictError, and the fork's stream is left as it was."""
    conversation(store, "root", 2)
    store.fork("root", new_thread_id="branch")
    fork = store.history("branch")
    thread = AgentThread.start("branch", now=ticking_clock()())
    thread.append_message(Message(Role.USER, "hi"), now=ticking_clock()())
    with pytest.raises(ThreadConflictError, match="'branch'"):
        store.save(thread)
    assert store.history("branch") == fork


def test_forks_of_forks_load_to_any_depth(store: Store) -> None:
    """A chain of forks loads as the concatenation of the prefixes."""
    conversation(store, "t0", 1)
    previous = "t0"
    for depth in range(1, 6):
        fork = store.fork(previous, new_thread_id=f"t{depth}")
        agent_on(store, fork, [answer(f"level {depth}")]).run(f"at depth {depth}")
        previous = fork
    state = store.state_at("t5")
    users = [m.content for m in state.messages if m.role is Role.USER]
    assert users == ["go"] + [f"at depth {d}" for d in range(1, 6)]
    assert store.path_to_root("t5") == ("t5", "t4", "t3", "t2", "t1", "t0")
    assert store.replay_state("t5") == state


def test_forking_at_an_interrupt_gives_an_independently_paused_branch(store: Store) -> None:
    """Both the original and the fork are paused on the interrupt and resume apart."""
    original = agent_on(store, "root", [call(("r1", "review", "{}")), answer("approved path")])
    original.run("pay")
    fork = store.fork("root", new_thread_id="rejected")
    assert store.state_at("rejected").status is ThreadStatus.INTERRUPTED
    forked = store.history("rejected")[-1]
    assert isinstance(forked, AgentThread.Forked)
    assert [i.tool_call_id for i in forked.interrupts] == ["r1"]  # for projections

    branch = agent_on(store, fork, [answer("rejected path")])
    branch.steer("Rejected.")
    assert branch.resume() == "rejected path"
    assert store.state_at("root").status is ThreadStatus.INTERRUPTED  # original still paused
    original.steer("Approved.")
    assert original.resume() == "approved path"
    assert branch.messages[-2] == Message(Role.USER, "Rejected.")


def test_history_of_a_fork_lists_inherited_then_own_events(store: Store) -> None:
    """history() of a fork is the parent's prefix followed by the fork's events."""
    conversation(store, "root", 1)
    at = 1  # the thread's start with its run and the user's message, before the answer
    store.fork("root", at_version=at, new_thread_id="f")
    agent_on(store, "f", [answer("x")]).run("y")
    history = store.history("f")
    assert [e.originator_version for e in history] == list(range(1, len(history) + 1))
    assert history[:at] == store.history("root")[:at]
    assert isinstance(history[at], AgentThread.Forked)


def test_state_at_inherited_versions_of_a_fork(store: Store) -> None:
    """A fork's versions up to its branch point read as the parent's."""
    conversation(store, "root", 2)
    store.fork("root", at_version=6, new_thread_id="f")
    assert store.state_at("f", 4) == store.state_at("root", 4)


def test_fork_adds_under_2_kb_to_a_1000_message_thread(tmp_path: Path) -> None:
    """Storage: forking a 1,000-message thread adds well under 2 KB to the SQLite file
    and leaves the parent's rows byte for byte as they were."""
    db = tmp_path / "threads.db"
    with open_store(f"sqlite:///{db}") as store:
        conversation(store, "big", 499)  # user + 499 x (call, result) + answer + ...
        assert len(store.state_at("big").messages) >= 1000

        def rows() -> list[tuple[Any, ...]]:
            with sqlite3.connect(db) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                return conn.execute("SELECT * FROM stored_events ORDER BY rowid").fetchall()

        before = rows()
        store.fork("big", at_version=store.state_at("big").version // 2, new_thread_id="f")
        after = rows()
    assert after[: len(before)] == before
    added = after[len(before) :]
    assert len(added) == 1
    assert sum(len(str(value)) for value in added[0]) < 2048


def test_tree_queries_on_three_levels(store: Store) -> None:
    """children, parent, path_to_root, leaves, branch points, tree and stats."""
    conversation(store, "root", 2)
    store.fork("root", at_version=4, new_thread_id="a")
    store.fork("root", at_version=4, new_thread_id="b")
    store.fork("root", at_version=7, new_thread_id="c")
    store.fork("a", new_thread_id="a1")
    store.fork("a", new_thread_id="a2")
    store.fork("a1", new_thread_id="a1x")
    ThreadService(store).label("a1x", "best")
    ThreadService(store).label("root", "v4", version=4)

    assert store.children("root") == ("a", "b", "c")
    assert store.children("a") == ("a1", "a2")
    assert store.parent("root") is None
    assert store.parent("a1") == ThreadParent("a", 5)
    assert store.path_to_root("a1x") == ("a1x", "a1", "a", "root")
    assert store.leaves("root") == ("a1x", "a2", "b", "c")
    assert store.leaves("a2") == ("a2",)
    points = {(p.thread_id, p.version): p.children for p in store.branch_points("root")}
    assert points == {
        ("root", 4): ("a", "b"),
        ("root", 7): ("c",),
        ("a", 5): ("a1", "a2"),
        ("a1", 6): ("a1x",),
    }

    tree = store.tree("root")
    assert tree.labels == (Label("v4", 4),)
    assert [child.thread_id for child in tree.children] == ["a", "b", "c"]
    a1x = tree.children[0].children[0].children[0]
    assert (a1x.thread_id, a1x.parent_version, a1x.labels) == ("a1x", 6, (Label("best"),))
    stats = store.tree_stats("root")
    assert (stats.threads, stats.forks, stats.depth, stats.leaves, stats.branch_points) == (
        7,
        6,
        3,
        4,
        4,
    )
    assert set(store.thread_ids()) == {"root", "a", "b", "c", "a1", "a2", "a1x"}


def test_labels_are_events_and_one_name_labels_one_thing(store: Store) -> None:
    """A label is an event of the labelled thread; relabelling moves the name."""
    conversation(store, "root", 1)
    ThreadService(store).label("root", "draft", version=2)
    ThreadService(store).label("root", "draft", version=3)
    assert store.state_at("root").labels == (Label("draft", 3),)
    assert isinstance(store.history("root")[-1], AgentThread.Labelled)
    with pytest.raises(Exception, match="cannot be labelled"):
        ThreadService(store).label("root", "nope", version=999)


def test_the_store_s_abandon_and_label_still_work_and_warn_naming_the_service(
    store: Store,
) -> None:
    """Store.label and Store.abandon, deprecated aliases of ThreadService's commands,
    record their events as before and warn with a DeprecationWarning naming the
    service's command, at the caller's line."""
    conversation(store, "root", 1)
    with pytest.warns(DeprecationWarning, match=r"ThreadService\(store\)\.label") as warned:
        store.label("root", "draft", version=2)
    assert warned[0].filename == __file__  # the caller's line, not the store's
    with pytest.warns(DeprecationWarning, match=r"ThreadService\(store\)\.abandon"):
        store.abandon("root", "wrong direction")
    state = store.state_at("root")
    assert state.labels == (Label("draft", 2),)
    assert state.status is ThreadStatus.ABANDONED


def test_a_fork_between_a_call_and_its_result_inherits_the_call_in_doubt(store: Store) -> None:
    """A call in doubt stays in doubt across forks: in the branch's history the call has
    no result, so the branch reports it in doubt instead of assuming the parent's
    outcome."""
    conversation(store, "root", 1)
    ((call_id, version),) = call_intents(store.history("root"))
    fork = store.fork("root", at_version=version)
    branch = agent_on(store, fork, [answer("ok")])
    assert [p.call.id for p in branch.in_doubt] == [call_id]


def test_an_abandoned_thread_is_forked_from_before_it_was_abandoned(store: Store) -> None:
    """Forking at or after the abandonment is refused; an earlier version works."""
    conversation(store, "root", 1)
    before = store.state_at("root").version
    ThreadService(store).abandon("root", "wrong direction")
    with pytest.raises(ThreadStateError, match="before it was abandoned"):
        store.fork("root")
    fork = store.fork("root", at_version=before)
    assert agent_on(store, fork, [answer("again")]).run("retry") == "again"


def test_a_fork_records_exactly_the_interrupts_pending_at_its_version(store: Store) -> None:
    """Forked.interrupts, read from the tail of the stream, equals the state's pending
    interrupts at every version of a thread that pauses, resumes and pauses again."""
    script = [
        call(("r1", "review", "{}"), ("r2", "review", "{}")),
        call(("e1", "echo", '{"text": "x"}')),
        call(("r3", "review", "{}")),
        answer("done"),
    ]
    agent = agent_on(store, "root", script)
    agent.run("go")
    agent.steer("ok")
    agent.resume()
    head = store.state_at("root").version
    for version in range(1, head + 1):
        fork = store.fork("root", at_version=version)
        forked = store.history(fork)[version]
        assert isinstance(forked, AgentThread.Forked)
        assert forked.interrupts == store.state_at("root", version).interrupts, version
        assert store.replay_state(fork).interrupts == forked.interrupts
    nested = store.fork(fork, at_version=3)  # an inherited version of a fork
    assert store.parent(nested) == ThreadParent("root", 3)
