"""A keyed chain laundered by routes other than re-sealing in place: the store's record
of its key deleted, another thread's sealed events copied in."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from covonaut_es import CovonautError, open_store
from covonaut_es.domain import thread_aggregate_id
from covonaut_es.errors import BrokenChainError, ThreadStateError
from covonaut_es.messages import Message
from covonaut_es.store._chain_key import CHAIN_TABLE
from support import sqlite_key
from test_chain import KEY, NOW, launder, move_anchor_sql, written_thread


def run_sql(url: str, sql: str, *params: Any) -> None:
    """Run one statement as a writer of the database can (``?`` placeholders)."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(sql, params)
    else:
        with psycopg.connect(url) as conn:
            conn.execute(sql.replace("?", "%s"), params)


def tables(url: str) -> tuple[str, str, Any]:
    """The events and head tables, and how a stream id is stored, on the URL's back end."""
    if url.startswith("sqlite"):
        return "stored_events", "stored_events_heads", sqlite_key
    return "covonaut_events", "covonaut_events_heads", lambda stream: stream


def test_deleting_the_record_of_the_key_does_not_let_a_rewritten_thread_be_adopted(
    shared_url: str,
) -> None:
    """A writer without the key who rewrites one thread with the public hash and
    deletes the store's record of its key gets the thread reported, by verify and by
    a keyed save, however often the key is adopted again, while other threads keep
    their keyed seals."""
    with open_store(shared_url, chain_key=KEY) as store:
        written_thread(store, "other", 2)
        written_thread(store, "victim", 4)
        launder(store, shared_url, "victim", {1}, rechain=True)
    run_sql(shared_url, f"DELETE FROM {CHAIN_TABLE}")
    with open_store(shared_url, chain_key=KEY) as store:
        assert not store.verify("victim").ok
        thread = store.load("victim")
        thread.append_message(Message(role="user", content="sealed on top"), now=NOW)
        with pytest.raises(BrokenChainError, match="after the store adopted it"):
            store.save(thread)
    with open_store(shared_url, chain_key=KEY) as store:
        report = store.verify("victim")
        assert not report.ok, report
        assert store.verify("other").ok


def test_another_threads_sealed_events_copied_into_a_thread_are_reported(
    shared_url: str,
) -> None:
    """A writer who copies every sealed event of one thread (and its head anchor) into
    another thread's stream gets the copy reported, and no fork sealed on it: a
    thread's events name it."""
    with open_store(shared_url, chain_key=KEY) as store:
        written_thread(store, "source", 3)
        written_thread(store, "target", 3)
    events, heads, stored = tables(shared_url)
    source, target = thread_aggregate_id("source"), thread_aggregate_id("target")
    run_sql(shared_url, f"DELETE FROM {events} WHERE originator_id = ?", stored(target))
    run_sql(
        shared_url,
        f"INSERT INTO {events} (originator_id, originator_version, topic, state) "
        f"SELECT ?, originator_version, topic, state FROM {events} WHERE originator_id = ?",
        stored(target),
        stored(source),
    )
    run_sql(shared_url, f"DELETE FROM {heads} WHERE originator_id = ?", stored(target))
    run_sql(
        shared_url,
        f"INSERT INTO {heads} SELECT ?, version, chain FROM {heads} WHERE originator_id = ?",
        stored(target),
        stored(source),
    )
    with open_store(shared_url, chain_key=KEY) as store:
        report = store.verify("target")
        assert not report.ok, report
        assert report.findings[0].version == 1
        assert "copied from another thread" in report.findings[0].problem
        with pytest.raises(ThreadStateError, match="copied from another thread"):
            store.load("target")
        with pytest.raises(ThreadStateError, match="copied from another thread"):
            store.fork("target", new_thread_id="fork-of-the-copy")
        assert not store.exists("fork-of-the-copy")


def test_a_writer_opened_before_the_key_was_adopted_is_reported_and_never_sealed_over(
    shared_url: str,
) -> None:
    """A process that opened the store without the key before another adopted it goes
    on writing unkeyed events: each thread it writes is reported from its first event
    after the adoption, and a keyed save refuses to seal on top of one."""
    with open_store(shared_url) as unkeyed:
        written_thread(unkeyed, "shared", 3)
        with open_store(shared_url, chain_key=KEY) as keyed:
            adopted_at = unkeyed.head_version("shared")
            assert adopted_at is not None
            thread = unkeyed.load("shared")
            thread.append_message(Message(role="user", content="unkeyed, late"), now=NOW)
            unkeyed.save(thread)
            written_thread(unkeyed, "begun-unkeyed", 1)
            assert keyed.verify("shared").findings[0].version == adopted_at + 1
            assert keyed.verify("begun-unkeyed").findings[0].version == 1
            for thread_id in ("shared", "begun-unkeyed"):
                thread = keyed.load(thread_id)
                thread.append_message(Message(role="user", content="keyed"), now=NOW)
                with pytest.raises(BrokenChainError):
                    keyed.save(thread)
            assert keyed.verify("shared").findings[0].version == adopted_at + 1


def test_a_thread_written_before_the_key_cannot_be_rewritten_once_it_is_adopted(
    shared_url: str,
) -> None:
    """A thread written before the store adopted its key, rewritten afterwards in place
    with the public hash (same length, head anchor moved to the new head), is reported:
    the adoption point covers the seal of the event it names, and every link before it."""
    with open_store(shared_url) as store:
        written_thread(store, "before", 4)
    with open_store(shared_url, chain_key=KEY) as store:
        assert store.verify("before").findings[-1].problem.startswith("head not sealed")
        launder(store, shared_url, "before", {2}, rechain=True)
        newest = store._records.stored_records("before")[-1]
        chain = store._records.mapper.payload_fields(newest)["chain"]
        move_anchor_sql(shared_url, thread_aggregate_id("before"), chain)
        report = store.verify("before")
        assert report.findings[0].version == 1, report
        thread = store.load("before")
        thread.append_message(Message(role="user", content="keyed on top"), now=NOW)
        with pytest.raises(BrokenChainError):
            store.save(thread)


_ROUTES = ["rewrite in place", "copy another thread", "delete the record of the key"]
_RECORD = ["key", "adopted_at", "points"]


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    route=st.sampled_from(_ROUTES),
    begun_before_the_key=st.booleans(),
    messages=st.integers(min_value=1, max_value=5),
    first=st.integers(min_value=0, max_value=100),
    deleted=st.sets(st.sampled_from(_RECORD), min_size=1),
    move_anchor=st.booleans(),
    reopens=st.integers(min_value=1, max_value=2),
)
def test_no_route_launders_a_thread_of_a_keyed_store(
    tmp_path_factory: pytest.TempPathFactory,
    route: str,
    begun_before_the_key: bool,
    messages: int,
    first: int,
    deleted: set[str],
    move_anchor: bool,
    reopens: int,
) -> None:
    """A writer without the key who rewrites a thread with the public hash (from any
    event on), or copies another thread's sealed stream over it, and may delete any of
    the store's record of its key and move the head anchor: verify reports the thread
    after any number of keyed opens, and no keyed save or fork seals on top of it."""
    # Deleting the whole record of the key from a store whose keyed events all came
    # after the victim's makes it read as a store that never had a key (documented).
    assume(not (route == _ROUTES[2] and deleted == set(_RECORD) and begun_before_the_key))
    url = f"sqlite:///{tmp_path_factory.mktemp('laundered') / 'threads.db'}"
    with open_store(url) as store:
        if begun_before_the_key:
            written_thread(store, "victim", messages)
    with open_store(url, chain_key=KEY) as store:
        written_thread(store, "source", messages)
        if not begun_before_the_key:
            written_thread(store, "victim", messages)
        head = store.head_version("victim")
        assert head is not None
        if route == "copy another thread":
            events, heads, stored = tables(url)
            victim, source = thread_aggregate_id("victim"), thread_aggregate_id("source")
            run_sql(url, f"DELETE FROM {events} WHERE originator_id = ?", stored(victim))
            run_sql(
                url,
                f"INSERT INTO {events} (originator_id, originator_version, topic, state) "
                f"SELECT ?, originator_version, topic, state FROM {events} "
                "WHERE originator_id = ?",
                stored(victim),
                stored(source),
            )
            run_sql(url, f"DELETE FROM {heads} WHERE originator_id = ?", stored(victim))
            run_sql(
                url,
                f"INSERT INTO {heads} SELECT ?, version, chain FROM {heads} "
                "WHERE originator_id = ?",
                stored(victim),
                stored(source),
            )
        else:
            launder(store, url, "victim", {first % head + 1}, rechain=True)
        if move_anchor:
            newest = store._records.stored_records("victim")[-1]
            chain = store._records.mapper.payload_fields(newest)["chain"]
            move_anchor_sql(url, thread_aggregate_id("victim"), chain)
    if route == "delete the record of the key":
        if "points" in deleted:
            run_sql(url, f"DELETE FROM {CHAIN_TABLE} WHERE name NOT IN ('key', 'adopted_at')")
        for row in deleted - {"points"}:
            run_sql(url, f"DELETE FROM {CHAIN_TABLE} WHERE name = ?", row)
    for reopen in range(reopens):
        with open_store(url, chain_key=KEY) as store:
            assert not store.verify("victim").ok
            with pytest.raises(CovonautError):  # nor is a fork sealed on it
                store.fork("victim", new_thread_id=f"fork-{reopen}")
            thread = store.load("victim") if route != "copy another thread" else None
            if thread is not None:
                thread.append_message(Message(role="user", content="keyed"), now=NOW)
                with pytest.raises(BrokenChainError):
                    store.save(thread)
