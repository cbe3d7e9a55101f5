"""The reviewer queue names a thread from its first event, read from the thread's stream
when the thread first pauses (ADR 0076). Whatever a writer behind the library does to
the rows that read reads (a first event copied or moved into a fork's stream, which
opens after version 1; its topic or payload spoiled; an abandonment copied into another
stream), the queue finishes, lists exactly the pauses of every thread that loads and
verifies, and names no stream of an encrypted store."""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import get_topic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import ReviewQueue, Store, ThreadStatus, create_cipher_key, open_store
from covonaut_es.domain import AgentThread, PauseKind, thread_aggregate_id
from covonaut_es.errors import CovonautError
from covonaut_es.store._application import AgentApplication
from covonaut_es.store._topic_codes import compact
from covonaut_es.store._urls import persistence_env
from support import answer, call
from test_queue_passes_over_damage import _item_of, _listed, _paused
from test_review_queue_property import World, run, steps

KEY = create_cipher_key()
ABANDONED = compact(get_topic(AgentThread.Abandoned))
STARTED = compact(get_topic(AgentThread.Started))

# Each changes the row of a thread's first event that the queue reads from its stream (a
# Started at version 1; a start from a saved state is read from the log, as every event
# the queue follows), given its stream and, for those marked, a stream that has no row
# at version 1 (a fork's).
_COPY_FIRST = (
    "INSERT INTO stored_events (originator_id, originator_version, topic, state) "
    "SELECT ?, 1, topic, state FROM stored_events WHERE originator_id = ? "
    "AND originator_version = 1"
)
HOSTILE: dict[str, tuple[str, bool]] = {
    "first event copied into a fork": (_COPY_FIRST, True),
    "first event moved into a fork": (
        "UPDATE stored_events SET originator_id = ? WHERE originator_id = ? "
        "AND originator_version = 1",
        True,
    ),
    "abandonment copied into a fork": (
        "INSERT INTO stored_events (originator_id, originator_version, topic, state) "
        "SELECT ?, 1, topic, state FROM stored_events WHERE topic = '"
        + ABANDONED
        + "' AND originator_id IS NOT ? LIMIT 1",
        True,
    ),
    "topic blanked": (
        "UPDATE stored_events SET topic = '' WHERE originator_id = ? AND originator_version = 1",
        False,
    ),
    "topic NULL": (
        "UPDATE stored_events SET topic = NULL WHERE originator_id = ? AND originator_version = 1",
        False,
    ),
    "topic a number": (
        "UPDATE stored_events SET topic = 7 WHERE originator_id = ? AND originator_version = 1",
        False,
    ),
    "payload NULL": (
        "UPDATE stored_events SET state = NULL WHERE originator_id = ? AND originator_version = 1",
        False,
    ),
    "payload text": (
        "UPDATE stored_events SET state = 'x' WHERE originator_id = ? AND originator_version = 1",
        False,
    ),
}


def pending_of(store: Store, thread_id: str) -> set[str] | None:
    """The item ids of the pauses waiting for a person that the thread's loaded state
    says; None when it does not load or verify (the queue may then list anything of
    it, or nothing)."""
    try:
        if not store.verify(thread_id).ok:
            return None
        state = store.state_at(thread_id)
    except CovonautError:
        return None
    if state.status is ThreadStatus.ABANDONED:
        return set()
    return {
        p.interrupt.data["review_id"]  # type: ignore[index,call-overload]
        if p.interrupt.kind is PauseKind.REVIEW
        else p.interrupt.tool_call_id
        for p in state.pauses
        if not p.resolved
    }


def _hostile_write(path: Path, action: str, pick: int) -> bool:
    """Make ``action`` on the ``pick``-th thread's first event (modulo their number);
    False when the store has none, or no stream to write into."""
    statement, into_a_fork = HOSTILE[action]
    with closing(sqlite3.connect(path)) as conn, conn:
        firsts = [
            r[0]
            for r in conn.execute(
                "SELECT originator_id FROM stored_events WHERE originator_version = 1 "
                "AND topic = ? ORDER BY rowid",
                (STARTED,),
            )
        ]
        forks = [
            r[0]
            for r in conn.execute(
                "SELECT originator_id FROM stored_events GROUP BY originator_id "
                "HAVING min(originator_version) > 1 ORDER BY min(rowid)"
            )
        ]
        if not firsts:
            return False
        source = firsts[pick % len(firsts)]
        if not into_a_fork:
            conn.execute(statement, (source,))
            return True
        if not forks:
            return False
        conn.execute(statement, (forks[pick % len(forks)], source))
    return True


plans = st.tuples(
    run, st.lists(steps, max_size=6), st.just(("fork", 0, 1.0)), st.lists(steps, max_size=4)
).map(lambda p: [p[0], *p[1], p[2], *p[3]])


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "encrypted"])
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=plans, action=st.sampled_from(sorted(HOSTILE)), pick=st.integers(0, 50))
def test_no_hostile_write_of_a_first_event_lists_a_pause_a_thread_does_not_hold(
    sealed: bool,
    plan: list[Any],
    action: str,
    pick: int,
    tmp_path_factory: pytest.TempPathFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Generated: after any steps (runs, pauses, decisions, forks, starts from a saved
    state, abandonments), one hostile write of the rows the queue reads to name threads:
    a queue rebuilt then finishes, lists exactly the pending pauses of every thread that
    loads and verifies, and warns without naming a stream."""
    path = tmp_path_factory.mktemp("names") / "threads.db"
    url, key = f"sqlite:///{path}", (KEY if sealed else None)
    with open_store(url, cipher_key=key) as store:
        world = World(store, "h")
        for name, *args in plan:
            getattr(world, name)(*args)
            world.note_heads()
        threads = list(store.thread_ids())
    if not _hostile_write(path, action, pick):
        return
    caplog.clear()
    with open_store(url, cipher_key=key) as store, caplog.at_level(logging.WARNING):
        queue = ReviewQueue(url, view_url="memory://", cipher_key=key)
        try:
            with queue.follow() as runner:
                queue.wait_until_current(store, runner=runner)
            items = queue.pending()
        finally:
            queue.close()
        for thread_id in threads:
            want = pending_of(store, thread_id)
            if want is not None:
                got = {i.item_id for i in items if i.thread_id == thread_id}
                assert got == want, (thread_id, action)
    if sealed:
        for thread_id in threads:
            stream = thread_aggregate_id(thread_id)
            assert str(stream) not in caplog.text and stream.hex not in caplog.text


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "encrypted"])
def test_a_first_event_copied_into_a_fork_names_neither_thread(
    store_url: str, sealed: bool
) -> None:
    """A fork paused again, whose stream (opening after version 1) a writer gave a copy
    of another thread's first event at version 1: a queue rebuilt lists the intact
    thread's review under it, and the fork's pause under no other thread (the fork no
    longer loads)."""
    key = KEY if sealed else None
    with contextlib.closing(open_store(store_url, cipher_key=key)) as store:
        world = World(store, "f")
        world.run("a", ("ask",))  # f-t0, paused on a tool's pause
        world.run("v", ("pay",))  # f-t1, paused on a review: the copied first event's
        world.note_heads()
        world.decide(0, "ok")
        fork = store.fork("f-t0", new_thread_id="forked")
        agent = world.agent(fork, [call(("k2", "ask", json.dumps({"q": "again"}))), answer("x")])
        agent.restore_latest_checkpoint(fork)
        agent.resume()
        recorder = store._app.recorder
        (first,) = recorder.select_events(thread_aggregate_id("f-t1"), lte=1)
        recorder.insert_events(
            [StoredEvent(thread_aggregate_id(fork), 1, first.topic, first.state)]
        )
        queue = ReviewQueue(store.url, cipher_key=key, view_url="memory://")
        try:
            with queue.follow() as runner:
                queue.wait_until_current(store, runner=runner)
            listed = {(p.thread_id, p.item_id) for p in queue.pending()}
        finally:
            queue.close()
        assert {i for t, i in listed if t == "f-t1"} == pending_of(store, "f-t1")
        assert ("f-t1", "k2") not in listed


class _TextIds(AgentApplication):
    """An application of one's own that keeps stream ids as text: its streams are read
    one at a time (no statement reads several)."""


@pytest.mark.parametrize("column", ["state", "topic"])
def test_a_damaged_row_of_a_text_id_applications_thread_leaves_the_others_listed(
    tmp_path: Path, column: str
) -> None:
    """A row of a paused thread's stream that the queue's events do not include, damaged
    (NULL): that thread is passed over, the others' pauses listed."""
    path = tmp_path / "app.db"
    env = {**persistence_env(f"sqlite:///{path}"), "ORIGINATOR_ID_TYPE": "text"}
    with closing(_TextIds(env=env)) as app:
        _paused(Store.from_application(app))
    with closing(sqlite3.connect(path)) as conn, conn:
        changed = conn.execute(
            f"UPDATE stored_events SET {column} = NULL "
            "WHERE originator_id = ? AND originator_version = 2",
            (thread_aggregate_id("b").hex,),
        ).rowcount
    assert changed == 1
    with closing(_TextIds(env=env)) as app:
        store = Store.from_application(app)
        listed = _listed(store, ReviewQueue.from_application(app, view_url="memory://"))
        assert ("a", _item_of(store, "a")) in listed
        assert ("c", _item_of(store, "c")) in listed
