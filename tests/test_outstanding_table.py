"""The table of outstanding threads a worker starts from: it holds what the fold of the
whole log holds, a starting worker reads it and the log after its position only, an
encrypted store seals it, and rows another writer altered never make a worker act on a
thread that is not ready (a generated test): at worst it makes the table again, or
passes over a thread."""

from __future__ import annotations

import sqlite3
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import worker_app
from covonaut_es import (
    Agent,
    CheckpointSettings,
    Role,
    Store,
    ThreadStatus,
    Worker,
    create_cipher_key,
    open_store,
)
from covonaut_es.domain import thread_aggregate_id
from covonaut_es.service import ThreadService
from covonaut_es.workers import _outstanding as outstanding
from covonaut_es.workers._deadlines import ReviewDeadlines
from covonaut_es.workers._outstanding import FOLLOWED, catch_up, events, fold
from covonaut_es.workers._ready import ReadyThreads
from covonaut_es.workers._recall import recalling
from test_workers import TOKEN, agent, decide, pause, payments

TABLE = "stored_events_outstanding_v2"
NIL = "0" * 32


def naive(store: Store) -> tuple[set[Any], set[Any]]:
    """The ready and kept threads of a fold of the whole log."""
    recall = recalling(store)
    ready, deadlines = ReadyThreads(store._records.thread_id_of, recall), ReviewDeadlines()
    for _, event in events(store, store._records.notifications(*FOLLOWED), "test"):
        if event is not None:
            fold(ready, deadlines, event)
    return set(ready.ready), {s for s in store_streams(store) if ready.kept(s) is not None}


def store_streams(store: Store) -> list[Any]:
    return [thread_aggregate_id(t) for t in store.thread_ids()]


def threads(store: Store) -> None:
    """A thread waiting for a person, one whose review is decided, one given up, one
    finished and submitted input for a new one."""
    pause(store, "waiting", "decided", "finished", "given-up")
    decide(store, "decided", "finished")
    ThreadService(store).abandon("given-up", "no longer needed")
    store.submit("walk-in", "Pay 5.")


def test_a_starting_worker_reads_the_table_and_the_log_after_it(
    shared_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's start brings the table up to the log's end, a few events per
    transaction, and keeps what the fold of the whole log keeps; a later start follows
    only the events written since."""
    monkeypatch.setenv("WORKER_TEST_LEDGER", str(tmp_path / "ledger"))
    monkeypatch.setattr(outstanding, "BATCH", 3)  # rows made again across transactions
    with open_store(shared_url) as store:
        threads(store)
        Worker(store, worker_app.make_config).run(once=True)  # runs "finished" and more
        assert store.state_at("finished").status is ThreadStatus.FINISHED
        table = store._outstanding
        assert table is not None
        found = table.read()
        assert found is not None
        assert found[0] > 0
        catch_up(store, "test")
        assert table.position() == store._records.log_position()  # past what none follows
        pause(store, "late")
        decide(store, "late")
        worker = Worker(store, worker_app.make_config)
        worker._start()
        ready, kept = naive(store)
        assert set(worker._ready.ready) == ready
        assert thread_aggregate_id("late") in ready
        assert {s for s in store_streams(store) if worker._ready.kept(s) is not None} == kept
        position = worker._position
        assert found[0] <= position <= store._records.log_position()
        worker.run(once=True)
        assert store.state_at("late").status is ThreadStatus.FINISHED


def test_an_encrypted_stores_table_is_sealed(tmp_path: Path) -> None:
    """The rows of an encrypted store name neither thread nor review in the clear, and
    are kept under the stream ids as stored."""
    path = tmp_path / "threads.db"
    with open_store(f"sqlite:///{path}", cipher_key=create_cipher_key()) as store:
        pause(store, "secret-thread-name")
        # Input waiting behind the review: a thread only waiting for a person has no row.
        store.submit("secret-thread-name", "And then pay 5.")
        catch_up(store, "test")
        review = agent(store, "secret-thread-name").pending_reviews[0].review_id
    with sqlite3.connect(path) as database:
        rows = database.execute(f"SELECT originator_id, state FROM {TABLE}").fetchall()
    database.close()
    assert len(rows) == 2  # the thread and the table's position
    for stream, state in rows:
        assert b"secret-thread-name" not in state and review.encode() not in state
        assert stream != thread_aggregate_id("secret-thread-name").hex


def test_a_worker_keeps_nothing_of_threads_waiting_for_a_person(
    shared_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Threads paused on a review have no row and no summary in a worker, so its start
    and its memory follow the threads ready, not those waiting; once a person decides,
    a worker runs the thread."""
    monkeypatch.setenv("WORKER_TEST_LEDGER", str(tmp_path / "ledger"))
    waiting = [f"waiting-{n}" for n in range(6)]
    with open_store(shared_url) as store:
        pause(store, *waiting)
        store.submit("walk-in", "Pay 5.")
        worker = Worker(store, worker_app.make_config)
        worker._start()
        found = store._outstanding.read() if store._outstanding else None
        assert found is not None
        assert set(found[1]) == {thread_aggregate_id("walk-in")}
        assert len(worker._ready) == 1
        decide(store, waiting[0])
        worker.run(once=True)
        assert store.state_at(waiting[0]).status is ThreadStatus.FINISHED
        assert {store.state_at(t).status for t in waiting[1:]} == {ThreadStatus.INTERRUPTED}
        catch_up(store, "test")
        assert store._outstanding.read()[1] == {}  # type: ignore[union-attr]


def test_a_worker_looks_at_no_thread_that_still_waits_for_a_person(
    shared_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decision that leaves another review pending, or input sent to a thread waiting
    for a person, makes no worker look at the thread, at any start; once every pause is
    dealt with, a worker runs the thread, then its input."""
    monkeypatch.setenv("WORKER_TEST_LEDGER", str(tmp_path / "ledger"))
    looked: list[str] = []

    def config(thread_id: str) -> Any:
        looked.append(thread_id)
        return worker_app.make_two_payments_config(thread_id)

    twice = [f"twice-{n}" for n in range(3)]
    with open_store(shared_url) as store:
        for thread_id in twice:
            paused = Agent(
                attrs.evolve(
                    config(thread_id),
                    checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
                )
            )
            paused.run("Pay 5 and 7.")
            paused.approve(paused.pending_reviews[0].review_id, reviewer=TOKEN)
        pause(store, "with-input")
        store.submit("with-input", "Then pay 9.")
        looked.clear()
        for _ in range(3):
            worker = Worker(store, config)
            assert worker.run(once=True).steps == 0
            assert len(worker._ready) == 1  # the thread holding input
            catch_up(store, "test")
            found = store._outstanding.read()  # type: ignore[union-attr]
            assert found is not None and set(found[1]) == {thread_aggregate_id("with-input")}
        assert looked == []
        for thread_id in twice:
            deciding = Agent(
                attrs.evolve(
                    config(thread_id),
                    checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
                )
            )
            deciding.approve(deciding.pending_reviews[0].review_id, reviewer=TOKEN)
        decide(store, "with-input")
        Worker(store, config).run(once=True)
        assert {store.state_at(t).status for t in twice} == {ThreadStatus.FINISHED}
        ran = [m.content for m in store.state_at("with-input").messages if m.role is Role.USER]
        assert ran[-1] == "Then pay 9."


def test_a_fork_of_a_thread_waiting_for_a_person_waits_too(
    shared_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork that inherits a pending review is read as the fork says it stands, waiting
    for a person: no worker looks at it, at any start, until its review is decided."""
    monkeypatch.setenv("WORKER_TEST_LEDGER", str(tmp_path / "ledger"))
    looked: list[str] = []

    def config(thread_id: str) -> Any:
        looked.append(thread_id)
        return worker_app.make_config(thread_id)

    with open_store(shared_url) as store:
        pause(store, "parent")
        forks = [store.fork("parent", new_thread_id=f"fork-{n}") for n in range(3)]
        for _ in range(2):
            worker = Worker(store, config)
            assert worker.run(once=True).steps == 0
            assert len(worker._ready) == 0
        assert looked == []
        decide(store, forks[0])
        Worker(store, config).run(once=True)
        assert looked == [forks[0]]
        assert store.state_at(forks[0]).status is ThreadStatus.FINISHED


def test_a_table_an_earlier_version_kept_is_left_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers of this version keep their own table: the one earlier versions kept,
    which holds rows of threads waiting for a person that they need, is not changed, and
    a thread waiting there runs once its review is decided."""
    monkeypatch.setenv("WORKER_TEST_LEDGER", str(tmp_path / "ledger"))
    path = tmp_path / "threads.db"
    earlier = "stored_events_outstanding"
    with open_store(f"sqlite:///{path}") as store:
        pause(store, "waiting")
        review = agent(store, "waiting").pending_reviews[0]
    kept = [["waiting", "paused", [review.tool_call_id], {review.review_id: review.tool_call_id},
             False, 0], None]  # fmt: skip
    with sqlite3.connect(path) as database:
        database.execute(
            f"CREATE TABLE {earlier} (originator_id TEXT PRIMARY KEY, "
            "position INTEGER NOT NULL, state BLOB NOT NULL)"
        )
        rows = [
            (NIL, 3, b""),
            (thread_aggregate_id("waiting").hex, 3, msgspec.msgpack.encode(kept)),
        ]
        database.executemany(f"INSERT INTO {earlier} VALUES (?, ?, ?)", rows)
    database.close()
    with open_store(f"sqlite:///{path}") as store:
        worker = Worker(store, worker_app.make_config)
        worker._start()
        assert len(worker._ready) == 0
        decide(store, "waiting")
        worker.run(once=True)
        assert store.state_at("waiting").status is ThreadStatus.FINISHED
    with sqlite3.connect(path) as database:
        assert database.execute(f"SELECT * FROM {earlier} ORDER BY 1").fetchall() == sorted(rows)
    database.close()


MUTATIONS = st.one_of(
    st.tuples(st.just("delete"), st.integers(0, 8)),
    st.tuples(st.just("garble"), st.integers(0, 8), st.binary(max_size=40)),
    st.tuples(st.just("copy"), st.integers(0, 8), st.integers(0, 8)),
    st.tuples(st.just("rename"), st.integers(0, 8), st.sampled_from(["x", NIL, "walk-in"])),
    st.tuples(st.just("position"), st.one_of(st.integers(-5, 10**12), st.just("p"))),
    st.tuples(st.just("claim"), st.sampled_from(["finished", "waiting", "given-up"])),
    st.tuples(
        st.just("forge"),
        st.sampled_from(["waiting", "decided", "ghost"]),
        st.dictionaries(
            st.text(max_size=3),
            st.tuples(
                st.datetimes(timezones=st.none() | st.just(UTC)).map(datetime.isoformat),
                st.booleans(),
            ),
            max_size=2,
        ),
    ),
)
"""Changes of another writer; a forged row is well formed, its review deadlines naive or
not (a naive one cannot be compared with the clock's time)."""


def mutate(database: sqlite3.Connection, mutation: tuple[Any, ...]) -> None:
    """Apply one change another writer of the database could make to the table."""
    rows = database.execute(f"SELECT originator_id, state FROM {TABLE} ORDER BY 1").fetchall()
    match mutation:
        case ("delete", index):
            database.execute(f"DELETE FROM {TABLE} WHERE originator_id = ?", (pick(rows, index),))
        case ("garble", index, state):
            database.execute(
                f"UPDATE {TABLE} SET state = ? WHERE originator_id = ?", (state, pick(rows, index))
            )
        case ("copy", source, target):
            state = rows[source % len(rows)][1]
            database.execute(
                f"UPDATE {TABLE} SET state = ? WHERE originator_id = ?", (state, pick(rows, target))
            )
        case ("rename", index, name):
            stream = name if name in ("x", NIL) else thread_aggregate_id(name).hex
            database.execute(
                f"UPDATE OR IGNORE {TABLE} SET originator_id = ? WHERE originator_id = ?",
                (stream, pick(rows, index)),
            )
        case ("position", position):
            database.execute(
                f"UPDATE {TABLE} SET position = ? WHERE originator_id = ?", (position, NIL)
            )
        case ("forge", name, waiting):  # a row that reads, saying reviews are due
            database.execute(
                f"INSERT OR REPLACE INTO {TABLE} (originator_id, position, state) VALUES (?, 1, ?)",
                (uuid.uuid4().hex, msgspec.msgpack.encode([None, [name, waiting]])),
            )
        case ("claim", name):  # the thread is said to hold what a ready one holds
            ready = database.execute(
                f"SELECT state FROM {TABLE} WHERE originator_id = ?",
                (thread_aggregate_id("decided").hex,),
            ).fetchone()
            database.execute(
                f"INSERT OR REPLACE INTO {TABLE} (originator_id, position, state) VALUES (?, 1, ?)",
                (thread_aggregate_id(name).hex, ready[0] if ready else b"\x92\xc0\xc0"),
            )


def pick(rows: list[tuple[Any, ...]], index: int) -> Any:
    return rows[index % len(rows)][0] if rows else NIL


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@example(mutations=[("forge", "ghost", {"r1": ("2020-01-01T00:00:00", False)})])
@given(mutations=st.lists(MUTATIONS, min_size=1, max_size=4))
def test_an_altered_table_never_makes_a_worker_act_on_a_thread_not_ready(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    mutations: list[tuple[Any, ...]],
) -> None:
    """Whatever another writer does to the rows and the position, a worker started on
    the table never runs a thread waiting for a person, finished or given up, and pays
    only for the thread whose review was decided; it does not fail."""
    directory = tmp_path_factory.mktemp("outstanding")
    monkeypatch.setenv("WORKER_TEST_LEDGER", str(directory / "ledger"))
    path = directory / "threads.db"
    with open_store(f"sqlite:///{path}") as store:
        pause(store, "waiting", "decided", "finished", "given-up")
        decide(store, "finished")
        agent(store, "finished").resume()
        decide(store, "decided")
        ThreadService(store).abandon("given-up", "no longer needed")
        catch_up(store, "test")
        before = {t: store.state_at(t).version for t in ("waiting", "finished", "given-up")}
    with sqlite3.connect(path) as database:
        for mutation in mutations:
            mutate(database, mutation)
    database.close()
    with open_store(f"sqlite:///{path}") as store:
        summary = Worker(store, worker_app.make_config).run(once=True)
        assert summary.failed == ()
        after = {t: store.state_at(t).version for t in before}
        assert after == before
        assert agent(store, "waiting").pending_reviews
        assert set(payments(directory / "ledger")) <= {"finished", "decided"}
        assert sum(payments(directory / "ledger")["finished"].values()) == 1
