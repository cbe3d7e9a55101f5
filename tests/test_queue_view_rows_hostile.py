"""The reviewer queue's stored view against a hostile writer of its tables: any one cell
of its items' or its thread names' rows set to another value, or to another row's, on a
plain and on an encrypted store. Reading the queue (every pending item, a page, a
review's lookup) and following the store on from there never raise; a row that does not
read is passed over with a warning; a thread's name moved to another thread's row is
never used (the store is asked instead); and a sealed item is listed only where it is
pending, under its own thread."""

from __future__ import annotations

import contextlib
import logging
import shutil
import sqlite3
import tracemalloc
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ReviewQueue,
    ScriptedProvider,
    Tool,
    create_cipher_key,
    open_store,
)
from covonaut_es.errors import StoredRowError
from covonaut_es.projections._items import pending_from
from covonaut_es.service import ThreadService
from support import call
from test_queue_passes_over_damage import NOW, THREADS, _paused

KEY = create_cipher_key()
TABLES = {
    False: {"items": "covonaut_pauses", "names": "covonaut_queue_threads"},
    True: {"items": "covonaut_sealed_pauses", "names": "covonaut_sealed_queue_threads"},
}


def _queue(store_path: Path, view_path: Path, encrypted: bool) -> ReviewQueue:
    return ReviewQueue(
        f"sqlite:///{store_path}",
        view_url=f"sqlite:///{view_path}",
        cipher_key=KEY if encrypted else None,
    )


def _followed(queue: ReviewQueue, store_path: Path, encrypted: bool) -> None:
    url, key = f"sqlite:///{store_path}", KEY if encrypted else None
    with closing(open_store(url, cipher_key=key)) as store, queue.follow() as runner:
        queue.wait_until_current(store, runner=runner)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, tuple[Path, Path]]:
    found = {}
    for encrypted in (False, True):
        folder = tmp_path_factory.mktemp("queue")
        store_path, view_path = folder / "threads.db", folder / "view.db"
        with closing(
            open_store(f"sqlite:///{store_path}", cipher_key=KEY if encrypted else None)
        ) as store:
            _paused(store)
        queue = _queue(store_path, view_path, encrypted)
        try:
            _followed(queue, store_path, encrypted)
            assert len(queue.pending()) == len(THREADS)
        finally:
            queue.close()
        found[encrypted] = (store_path, view_path)
    return found


PAY = Tool("pay", "Pay", {"type": "object"}, lambda ctx, args: "paid", requires_approval=True)

_VALUES = st.one_of(
    st.binary(max_size=60),
    st.text(max_size=30),
    st.integers(-(2**63), 2**63 - 1),
    st.just("another row's"),  # the same column of another row
)


def _spoil(view: Path, table: str, nth: int, column_nth: int, value: object) -> None:
    with closing(sqlite3.connect(view)) as conn, conn:
        columns = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
        rows = conn.execute(f"SELECT rowid, * FROM {table} ORDER BY rowid").fetchall()
        rowid, *cells = rows[nth % len(rows)]
        column = columns[column_nth % len(columns)]
        if value == "another row's":
            other_rowid, *other = rows[(nth + 1) % len(rows)]
            value = other[columns.index(column)]
            conn.execute(
                f"UPDATE {table} SET {column} = ? WHERE rowid = ?",
                (cells[columns.index(column)], other_rowid),
            )
        conn.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = ?", (value, rowid))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@example(encrypted=True, which="names", nth=2, column_nth=7, value=1_087_771_797)
@given(
    encrypted=st.booleans(),
    which=st.sampled_from(("items", "names")),
    nth=st.integers(0, 5),
    column_nth=st.integers(0, 9),
    value=_VALUES,
)
def test_a_hostile_cell_of_the_stored_view_never_stops_the_queue_nor_misplaces_an_item(
    made: dict[bool, tuple[Path, Path]],
    tmp_path_factory: pytest.TempPathFactory,
    caplog: pytest.LogCaptureFixture,
    encrypted: bool,
    which: str,
    nth: int,
    column_nth: int,
    value: object,
) -> None:
    folder = tmp_path_factory.mktemp("spoiled")
    store_path, view_path = folder / "threads.db", folder / "view.db"
    shutil.copy(made[encrypted][0], store_path)
    shutil.copy(made[encrypted][1], view_path)
    try:
        _spoil(view_path, TABLES[encrypted][which], nth, column_nth, value)
    except sqlite3.IntegrityError:
        event("refused by the table")
        return  # the table's own constraints refuse it: nothing to read
    event(f"{which} spoiled")
    url = f"sqlite:///{store_path}"
    caplog.clear()
    queue = _queue(store_path, view_path, encrypted)
    with closing(open_store(url, cipher_key=KEY if encrypted else None)) as store:
        ThreadService(store).abandon("a", "left")  # named later: its name is looked up
        pending = {
            (t, pending_from(p.interrupt, t, NOW).item_id)
            for t in THREADS
            if t != "a"
            for p in store.load(t).pauses
        }
        try:
            with caplog.at_level(logging.WARNING, logger="covonaut_es"):
                _followed(queue, store_path, encrypted)
                listed = {(i.thread_id, i.item_id) for i in queue.pending()}
                paged = {(i.thread_id, i.item_id) for i in queue.page(limit=1).items}
                looked_up = {
                    (thread_id, item_id): queue.threads_with_review(item_id, store)
                    for thread_id, item_id in pending
                }
        finally:
            queue.close()
    assert paged <= listed
    if encrypted or which == "names":  # a plain item's columns are what it holds
        assert listed <= pending
        for (thread_id, _), found in looked_up.items():
            assert found is None or set(found) <= {thread_id}
    assert all("Traceback" not in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("count", [1_087_771_797, 2**62])
def test_an_integer_in_every_sealed_cell_is_passed_over_without_building_its_bytes(
    made: dict[bool, tuple[Path, Path]], tmp_path_factory: pytest.TempPathFactory, count: int
) -> None:
    """Every sealed cell of an encrypted store's view (an item, a thread's name) set to
    an integer: the queue passes each over, with the memory of a few rows, and goes on
    (``bytes()`` of the integer built a gigabyte of zeros for each read, or stopped the
    queue with a MemoryError)."""
    folder = tmp_path_factory.mktemp("integers")
    store_path, view_path = folder / "threads.db", folder / "view.db"
    shutil.copy(made[True][0], store_path)
    shutil.copy(made[True][1], view_path)
    tables = TABLES[True]
    with closing(sqlite3.connect(view_path)) as conn, conn:
        conn.execute(f"UPDATE {tables['names']} SET thread_id = ?", (count,))
        conn.execute(f"UPDATE {tables['items']} SET item = ?", (count,))
    queue = _queue(store_path, view_path, True)
    tracemalloc.start()
    try:
        with closing(open_store(f"sqlite:///{store_path}", cipher_key=KEY)) as store:
            for thread_id in THREADS:
                ThreadService(store).abandon(thread_id, "left")  # names looked up
        _followed(queue, store_path, True)
        assert queue.pending() == ()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        queue.close()
    assert peak < 64 * 2**20, f"{peak:,} bytes"


@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(followers=st.integers(2, 3), threads=st.integers(4, 10))
def test_followers_of_one_stored_view_each_go_on_and_agree(
    tmp_path_factory: pytest.TempPathFactory, followers: int, threads: int
) -> None:
    """Several followers of the same stored view (two `reviews --follow`), while pauses
    are listed and decided: none stops on a position another recorded first, and the
    view lists what the threads wait on."""
    folder = tmp_path_factory.mktemp("followers")
    store_path, view_path = folder / "threads.db", folder / "view.db"
    url = f"sqlite:///{store_path}"
    queues = [_queue(store_path, view_path, False) for _ in range(followers)]
    with closing(open_store(url)) as store, contextlib.ExitStack() as following:
        runners = [following.enter_context(queue.follow()) for queue in queues]
        for n in range(threads):
            thread_id = f"t{n}"
            Agent(
                AgentConfig(
                    provider=ScriptedProvider([call(("k1", "pay", '{"amount": 40}'))]),
                    tools=[PAY],
                    checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
                )
            ).run("go")
            if n % 2:
                ThreadService(store).abandon(thread_id, "left")
        for queue, runner in zip(queues, runners, strict=True):
            queue.wait_until_current(store, runner=runner)
            runner.run_forever(timeout=0.01)  # raises what stopped its thread, if anything
        listed = {item.thread_id for item in queues[0].pending()}
        assert listed == {f"t{n}" for n in range(threads) if not n % 2}
    for queue in queues:
        queue.close()


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    encrypted=st.booleans(),
    nth=st.integers(0, 3),
    position=st.sampled_from([None, 0, 1, -5, 10**9]),
)
def test_a_hostile_tracking_row_of_the_stored_view_is_followed_or_named(
    made: dict[bool, tuple[Path, Path]],
    tmp_path_factory: pytest.TempPathFactory,
    encrypted: bool,
    nth: int,
    position: int | None,
) -> None:
    """Any one row of the view's tracking table given another position (none at all
    among them): following the store on either works, or stops with the library's
    typed error naming the row and how to rebuild the view; never eventsourcing's
    IntegrityError (helper-222: a NULL position stopped the queue untyped)."""
    folder = tmp_path_factory.mktemp("tracked")
    store_path, view_path = folder / "threads.db", folder / "view.db"
    shutil.copy(made[encrypted][0], store_path)
    shutil.copy(made[encrypted][1], view_path)
    with closing(sqlite3.connect(view_path)) as conn, conn:
        names = conn.execute("SELECT application_name FROM tracking ORDER BY 1").fetchall()
        (name,) = names[nth % len(names)]
        statement = "UPDATE tracking SET notification_id = ? WHERE application_name = ?"
        conn.execute(statement, (position, name))
    url = f"sqlite:///{store_path}"
    with closing(open_store(url, cipher_key=KEY if encrypted else None)) as store:
        ThreadService(store).abandon("a", "left")  # an event the view follows
    queue = _queue(store_path, view_path, encrypted)
    try:
        _followed(queue, store_path, encrypted)
    except StoredRowError as exc:
        named = "holds no position it records" in str(exc) and "built again" in str(exc)
        assert named or "past the end of the store's log" in str(exc), exc
    finally:
        queue.close()
