"""Listing threads a page at a time: every back end lists every thread once, in creation
order, each summarized as its state says, however the threads change between listings
(a generated test); a spoiled or stale summary is made again; an encrypted store's
summaries are sealed; a page's size is checked."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ScriptedProvider,
    Store,
    Tool,
    create_cipher_key,
    open_store,
)
from covonaut_es.domain import thread_aggregate_id
from covonaut_es.errors import ConfigurationError, StoredRowError
from covonaut_es.service import ThreadService
from covonaut_es.store import ThreadSummary
from support import answer, call, converse, sqlite_key

PAY = Tool("pay", "Pay", {"type": "object"}, lambda c, a: "paid", requires_approval=True)


def run(store: Store, thread_id: str, *, pause: bool = False) -> None:
    """Run the thread one turn: answered, or paused on a payment's review."""
    script = [call(("c1", "pay", "{}"))] if pause else [answer("done")]
    config = AgentConfig(
        provider=ScriptedProvider(script),
        tools=[PAY],
        checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
    )
    Agent(config).run("go")


def expected(store: Store) -> list[tuple[str, int, str, int, str, int]]:
    """What a listing must say of every thread, from the threads themselves."""
    rows = []
    for thread_id in store.thread_ids():
        state = store.state_at(thread_id)
        abandoned = state.status.value == "abandoned"
        rows.append(
            (
                thread_id,
                state.version,
                state.status.value,
                state.turn,
                state.waiting_for,
                0 if abandoned else sum(not p.resolved for p in state.pauses),
            )
        )
    return rows


def listed(store: Store, limit: int) -> list[tuple[str, int, str, int, str, int]]:
    """Every page of the listing, ``limit`` threads a page."""
    found: list[ThreadSummary] = []
    after = None
    while True:
        page = store.list_threads(after=after, limit=limit)
        assert len(page.threads) <= limit
        found.extend(page.threads)
        if page.next_after is None:
            break
        after = page.next_after
    return [
        (s.thread_id, s.version, s.status.value, s.turn, s.waiting_for, s.unresolved_pauses)
        for s in found
    ]


def test_every_back_end_lists_each_thread_once_in_creation_order(
    open_test_store: Callable[..., Store],
) -> None:
    """Threads answered, paused, forked and abandoned are each listed once, oldest first,
    as their states say, a page at a time and again after they change."""
    store = open_test_store()
    for index in range(5):
        run(store, f"thread-{index}", pause=index % 2 == 1)
    store.fork("thread-0", at_version=2)
    ThreadService(store).abandon("thread-3", "not needed")
    assert listed(store, 2) == expected(store)
    assert [row[0] for row in listed(store, 100)] == list(store.thread_ids())
    run(store, "thread-0")  # changed since the last listing
    run(store, "thread-9")  # begun since
    assert listed(store, 3) == expected(store)
    first = store.list_threads(limit=1).threads[0]
    history = store.history("thread-0")
    assert first.created_at == history[0].timestamp
    assert first.last_activity == history[-1].timestamp


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["run", "pause", "fork", "abandon", "list"]),
            st.integers(0, 3),
            st.integers(1, 4),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_a_listing_always_says_what_the_threads_say(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int, int]]
) -> None:
    """Under any sequence of runs, pauses, forks, abandonments and listings (of any page
    size), a listing of a SQLite store equals the one made from every thread."""
    path = tmp_path_factory.mktemp("listing") / "threads.db"
    with open_store(f"sqlite:///{path}") as store:
        for action, index, limit in steps:
            thread_id = f"thread-{index}"
            exists = store.exists(thread_id)
            state = store.state_at(thread_id) if exists else None
            if action in ("run", "pause") and (state is None or state.status.value == "finished"):
                run(store, thread_id, pause=action == "pause")
            elif action == "fork" and exists:
                store.fork(thread_id, at_version=1)
            elif action == "abandon" and state is not None and state.status.value != "abandoned":
                ThreadService(store).abandon(thread_id, "given up")
            elif action == "list":
                assert listed(store, limit) == expected(store)
        assert listed(store, 2) == expected(store)


@pytest.mark.parametrize(
    "spoil",
    [
        "UPDATE stored_events_summaries SET summary = x'c1c2c3'",
        "UPDATE stored_events_summaries SET originator_id = 'x' WHERE position = 1",
        "UPDATE stored_events_summaries SET version = 'v', seen = 's' WHERE position = 2",
        "UPDATE stored_events_summaries SET seen = 1000000000000",
        "DELETE FROM stored_events_summaries WHERE position = 1",
    ],
)
def test_a_spoiled_summary_table_is_made_again(tmp_path: Path, spoil: str) -> None:
    """Summaries another writer spoiled (unreadable, or claiming a log position the log
    has not reached, which would hide new writes) are made again from the threads: the
    listing still says what the threads say, and later writes show."""
    path = tmp_path / "threads.db"
    with open_store(f"sqlite:///{path}") as store:
        run(store, "a")
        run(store, "b", pause=True)
        store.list_threads()
    with sqlite3.connect(path) as database:
        database.execute(spoil)
    database.close()
    with open_store(f"sqlite:///{path}") as store:
        listed(store, 10)
        run(store, "c")
        found = listed(store, 10)
        assert {row[0] for row in found} >= {"b", "c"}
        assert [row for row in found if row[0] != "a"] == [
            row for row in expected(store) if row[0] != "a"
        ]


def test_an_encrypted_stores_summaries_are_sealed(tmp_path: Path) -> None:
    """The summaries of an encrypted store name neither thread nor status in the clear."""
    path = tmp_path / "threads.db"
    with open_store(f"sqlite:///{path}", cipher_key=create_cipher_key()) as store:
        run(store, "secret-thread-name")
        assert listed(store, 10) == expected(store)
    with sqlite3.connect(path) as database:
        rows = database.execute("SELECT originator_id, summary FROM stored_events_summaries")
        found = rows.fetchall()
    database.close()
    assert len(found) == 1
    stream, summary = found[0]
    assert b"secret-thread-name" not in summary and b"finished" not in summary
    assert stream != thread_aggregate_id("secret-thread-name").hex


@pytest.mark.parametrize("limit", [0, -1, 10_001, True, "5"])
def test_a_page_size_out_of_bounds_is_refused(store: Store, limit: Any) -> None:
    """A page lists 1 to 10,000 threads: any other limit is refused, naming it."""
    with pytest.raises(ConfigurationError, match="1 to 10000 threads"):
        store.list_threads(limit=limit)


def test_the_command_line_lists_a_page_and_names_the_next(tmp_path: Path) -> None:
    """``threads --limit N`` prints N threads and, on standard error, the ``--after``
    that lists the next page; the pages together are every thread once."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url) as store:
        for index in range(5):
            run(store, f"thread-{index}")
    command = [sys.executable, "-m", "covonaut_es", "threads", "--store", url, "--json"]
    seen: list[str] = []
    after: list[str] = []
    while True:
        result = subprocess.run(
            [*command, "--limit", "2", *after], capture_output=True, text=True, check=True
        )
        seen += [row["thread_id"] for row in json.loads(result.stdout)]
        if "--after" not in result.stderr:
            break
        after = ["--after", result.stderr.split("--after")[1].split()[0]]
    assert seen == [f"thread-{index}" for index in range(5)]


def test_a_stored_number_no_summary_carries_is_a_typed_error(tmp_path: Path) -> None:
    """A thread whose stored turn another writer made one beyond 64 bits: the listing
    raises StoredRowError naming the thread, not msgpack's OverflowError."""
    path = tmp_path / "threads.db"
    with open_store(f"sqlite:///{path}") as store:
        converse(store, "t")
        mapper = store._app.mapper
        stream = sqlite_key(thread_aggregate_id("t"))
        with sqlite3.connect(path) as conn:
            rows = conn.execute(
                "SELECT originator_version, state FROM stored_events WHERE originator_id = ?",
                (stream,),
            ).fetchall()
            for version, state in reversed(rows):  # the newest turn is the thread's
                payload = json.loads(mapper.plain_payload(_Row(state)))  # type: ignore[attr-defined]
                if "turn" in payload:
                    payload["turn"] = 2**64
                    stored = mapper.stored_payload(json.dumps(payload).encode())  # type: ignore[attr-defined]
                    conn.execute(
                        "UPDATE stored_events SET state = ? WHERE originator_id = ? AND "
                        "originator_version = ?",
                        (stored, stream, version),
                    )
                    break
    with open_store(f"sqlite:///{path}") as store, pytest.raises(StoredRowError, match="'t'"):
        store.list_threads()


class _Row:
    """A stored record's payload, for the mapper's reader of payloads."""

    topic = "covonaut.thread.TurnAnsweredWithCalls"

    def __init__(self, state: bytes) -> None:
        self.state = state
