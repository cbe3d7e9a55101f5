"""Generated: a load folds the events after its snapshot as a replay of every event
does, and refuses a stream that lost an event it needs, wherever the gap falls; a row
copied in or changed behind the library is refused by a load and by verify alike."""

from __future__ import annotations

import contextlib
import io
import re
import sqlite3
import tempfile
from collections.abc import Callable
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import msgspec
import pytest
from eventsourcing.persistence import StoredEvent
from hypothesis import example, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    Message,
    Role,
    ScriptedProvider,
    Store,
    Tool,
    open_store,
)
from covonaut_es.cli import main as cli_main
from covonaut_es.domain import AgentThread, ThreadSnapshot, ThreadState, thread_aggregate_id
from covonaut_es.errors import (
    CovonautError,
    MissingEventError,
    MissingFirstEventError,
    StoredRowError,
    ThreadNotFoundError,
)
from covonaut_es.runtime import HmacReviewerVerifier
from covonaut_es.store._chain import UNCHAINED, chain_hash
from support import answer, call, postgres_database_of, sqlite_key
from test_audit import conversation

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@settings(max_examples=20, deadline=None)
@given(
    messages=st.integers(min_value=2, max_value=10),
    snapshot_at=st.integers(min_value=0, max_value=11),
    deleted=st.integers(min_value=0, max_value=11),
)
def test_a_load_folds_as_a_replay_and_refuses_a_gap_it_reads(
    messages: int, snapshot_at: int, deleted: int
) -> None:
    """A thread of ``messages`` steered messages (versions 1 to ``messages + 1``), with
    a sealed snapshot at ``snapshot_at`` (none at 0) and its event at ``deleted`` removed
    behind the library (none unless between its first and its last): the load equals
    the thread as written, unless the events it folds skip the deleted version, which
    it then names."""
    head = messages + 1
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "store.db"
        with open_store(f"sqlite:///{path}") as store:
            thread = AgentThread.start("t", now=NOW)
            for index in range(messages):
                thread.steer(Message(Role.USER, f"message {index}"), now=NOW)
            store.save(thread)
            snapshot = 1 <= snapshot_at <= head
            if snapshot:
                base = store._reader.replay("t", version=snapshot_at)
                assert store._app.snapshots is not None
                store._app.snapshots.put([ThreadSnapshot.take(base)])
            gap = 2 <= deleted < head
            if gap:
                with closing(sqlite3.connect(path)) as conn, conn:
                    conn.execute(
                        "DELETE FROM stored_events WHERE originator_id = ? "
                        "AND originator_version = ?",
                        (sqlite_key(thread_aggregate_id("t")), deleted),
                    )
            # A snapshot at or above the gap (its own event gone: passed over) still
            # leaves the load the gap to fold; one above it spares the load the gap.
            folds_gap = gap and not (snapshot and deleted < snapshot_at)
            if folds_gap:
                with pytest.raises(MissingEventError) as raised:
                    store.load("t")
                assert (raised.value.thread_id, raised.value.version) == ("t", deleted)
                return
            loaded = store.load("t")
            assert loaded.state == thread.state
            assert loaded.version == head
            assert loaded.chain_head == thread.chain_head  # the store set it on the save


def _thread(thread_id: str, messages: int) -> AgentThread:
    thread = AgentThread.start(thread_id, now=NOW)
    for index in range(messages):
        thread.steer(Message(Role.USER, f"{thread_id} message {index}"), now=NOW)
    return thread


def _state_stream(path: Path) -> bytes:
    """The stream id of the one stream in the store that is no thread's (a named state's)."""
    threads = {sqlite_key(thread_aggregate_id(t)) for t in ("t", "u")}
    with closing(sqlite3.connect(path)) as conn:
        streams = {row[0] for row in conn.execute("SELECT originator_id FROM stored_events")}
    (state,) = streams - threads
    return bytes(state)


@settings(max_examples=30, deadline=None)
@given(
    source=st.sampled_from(
        ["own first", "other's first", "other's event", "other's snapshot", "a state's event"]
    ),
    place=st.integers(min_value=1, max_value=6),
    replace=st.booleans(),
)
def test_a_row_copied_into_a_stream_never_loads_as_another_state(
    source: str, place: int, replace: bool
) -> None:
    """Generated: a row copied behind the library into thread t's stream (its own first
    event again, another thread's first event, event or sealed snapshot, a named state's
    event), replacing the row at ``place`` or added there: every read of t (load, each
    version, history) returns thread t as its rows make it, or raises the library's
    typed error, and ``verify`` reports the damage (there is none when the first row is
    replaced by itself) instead of raising."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "store.db"
        with open_store(f"sqlite:///{path}") as store:
            store.save(_thread("t", 4))
            other = _thread("u", 4)
            store.save(other)
            assert store._app.snapshots is not None
            store._app.snapshots.put([ThreadSnapshot.take(store._reader.replay("u"))])
            store.write_state("k", {"plan": "a named state's document"})
        t, u = sqlite_key(thread_aggregate_id("t")), sqlite_key(thread_aggregate_id("u"))
        table, stream, version = {
            "own first": ("stored_events", t, 1),
            "other's first": ("stored_events", u, 1),
            "other's event": ("stored_events", u, 3),
            "other's snapshot": ("stored_snapshots", u, 5),
            "a state's event": ("stored_events", _state_stream(path), 1),
        }[source]
        with closing(sqlite3.connect(path)) as conn, conn:
            topic, state = conn.execute(
                f"SELECT topic, state FROM {table} "  # the test's own table names
                "WHERE originator_id = ? AND originator_version = ?",
                (stream, version),
            ).fetchone()
            if replace:
                conn.execute(
                    "DELETE FROM stored_events WHERE originator_id = ? AND originator_version = ?",
                    (t, place),
                )
            else:  # the rows from there one version on: out of the key's way, then back
                for shift, since in ((1000, place), (-999, place + 1000)):
                    conn.execute(
                        "UPDATE stored_events SET originator_version = originator_version + ? "
                        "WHERE originator_id = ? AND originator_version >= ?",
                        (shift, t, since),
                    )
            conn.execute(
                "INSERT INTO stored_events (originator_id, originator_version, topic, state) "
                "VALUES (?, ?, ?, ?)",
                (t, place, topic, state),
            )
        with open_store(f"sqlite:///{path}") as store:
            reads = [
                lambda: store.load("t"),
                lambda: store.history("t"),
                *(lambda v=v: store.state_at("t", v) for v in range(1, 8)),
            ]
            for read in reads:
                try:
                    found = read()
                except CovonautError:
                    continue
                if isinstance(found, AgentThread | ThreadState):
                    assert found.thread_id == "t"
            unchanged = (source, place, replace) == ("own first", 1, True)
            assert store.verify("t").ok is unchanged


@settings(max_examples=12, deadline=None)
@given(
    branch=st.integers(min_value=1, max_value=4),
    shift=st.integers(min_value=-3, max_value=3).filter(bool),
)
def test_a_fork_renumbered_behind_the_library_does_not_load(branch: int, shift: int) -> None:
    """Generated: a fork's rows moved ``shift`` versions behind the library (its first
    event no longer one past the version it branches from): every read of the fork
    raises the library's typed error, and ``verify`` reports it."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "store.db"
        with open_store(f"sqlite:///{path}") as store:
            store.save(_thread("t", 4))
            store.fork("t", at_version=branch, new_thread_id="f")
            fork = store.load("f")
            fork.steer(Message(Role.USER, "on the fork"), now=NOW)
            store.save(fork)
        f = sqlite_key(thread_aggregate_id("f"))
        with closing(sqlite3.connect(path)) as conn, conn:
            for step, where in ((1000, 0), (shift - 1000, 1000)):
                conn.execute(
                    "UPDATE stored_events SET originator_version = originator_version + ? "
                    "WHERE originator_id = ? AND originator_version >= ?",
                    (step, f, where),
                )
        with open_store(f"sqlite:///{path}") as store:
            with pytest.raises(CovonautError):
                store.load("f")
            with pytest.raises(CovonautError):
                store.history("f")
            assert not store.verify("f").ok


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The paths to every scalar inside a decoded payload, its chain hash left out."""
    if isinstance(value, dict):
        items = [(k, v) for k, v in value.items() if path or k != "chain"]
    elif isinstance(value, list):
        items = list(enumerate(value))
    else:
        return [path]
    return [leaf for key, item in items for leaf in _leaves(item, (*path, key))]


def _replace(payload: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        payload = payload[key]
    payload[path[-1]] = value


def _reseal(store: Store, path: Path, changed: StoredEvent, leaf: int, value: Any) -> None:
    """Change one value of the stored record ``changed`` and seal the chain again from
    it on, in its stream and in the fork ``f`` branching from ``t`` (its first event is
    sealed into ``t``'s chain), head anchors included, as a writer who knows the scheme
    would: the fold alone can then tell."""
    mapper, changed_at = store._records.mapper, changed.originator_version
    chains: dict[tuple[UUID, int], str] = {}
    updates, heads = [], {}
    for thread_id in ("t", "f"):
        previous = UNCHAINED
        for record in store._records.stored_records(thread_id):
            key = (record.originator_id, record.originator_version)
            if key in chains:  # a record of t read again as f's inherited: done
                previous = chains[key]
                continue
            payload = msgspec.json.decode(mapper.plain_payload(record))
            if key == (changed.originator_id, changed_at):
                found = _leaves(payload)
                _replace(payload, found[leaf % len(found)], value)
            if payload.get("chain", UNCHAINED) != UNCHAINED:
                payload["chain"] = chain_hash(previous, record.topic, key[1], payload)
            previous = chains[key] = payload.get("chain", UNCHAINED)
            state = mapper.stored_payload(msgspec.json.encode(payload))
            updates.append((state, sqlite_key(key[0]), key[1]))
            heads[sqlite_key(key[0])] = previous
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.executemany(
            "UPDATE stored_events SET state = ? WHERE originator_id = ? AND originator_version = ?",
            updates,
        )
        conn.executemany(
            "UPDATE stored_events_heads SET chain = ? WHERE originator_id = ?",
            [(chain, stream) for stream, chain in heads.items()],
        )


@settings(max_examples=150, deadline=None)
@given(
    damaged=st.sampled_from(["t", "f"]),
    read=st.sampled_from(["t", "f"]),
    row=st.integers(min_value=0, max_value=200),
    leaf=st.integers(min_value=0, max_value=10_000),
    value=st.one_of(
        st.integers(min_value=-2, max_value=40),
        st.sampled_from(["", "c0", "c1", "t", "f", "u", "assistant", "tool", "x" * 9]),
        st.booleans(),
        st.none(),
        st.just([]),
    ),
)
# The fork's parent id (its first row's second value) emptied, or made the fork's own.
@example(damaged="f", read="f", row=0, leaf=1, value="")
@example(damaged="f", read="f", row=0, leaf=1, value="f")
# A schema version of True, which equals 1 (found by CI: read as today's version).
@example(damaged="t", read="t", row=1, leaf=0, value=True)
def test_a_resealed_row_with_one_value_changed_is_refused_by_load_and_verify_alike(
    damaged: str, read: str, row: int, leaf: int, value: Any
) -> None:
    """Generated: one value anywhere in one stored row of thread t or of its fork f
    changed (a fork's parent, version or first event among them), and the chain sealed
    again around it so that only the fold can see it: a load of t or of f refuses
    exactly when verify reports it, and verify's first finding is the error the load
    raised, at the row it names; a read both accept gives the thread read, at its head."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "store.db"
        with open_store(f"sqlite:///{path}") as store:
            conversation(store, "t", turns=2)
            store.fork("t", at_version=5, new_thread_id="f")
            fork = store.load("f")
            fork.steer(Message(Role.USER, "on the fork"), now=NOW)
            store.save(fork)
            written = store.load(read)
            own = store._records.stored_records(damaged)
            own = tuple(r for r in own if r.originator_id == thread_aggregate_id(damaged))
            _reseal(store, path, own[row % len(own)], leaf, value)
        with open_store(f"sqlite:///{path}") as store:
            report = store.verify(read)
            try:
                loaded = store.load(read)
            except CovonautError as exc:
                assert not report.ok, exc
                finding = report.findings[0]
                assert str(exc).endswith(finding.problem.split(": ", 1)[1]), (exc, finding)
                assert getattr(exc, "version", finding.version) == finding.version, exc
                return
            assert report.ok, report.findings
            assert (loaded.thread_id, loaded.version) == (read, written.version)


@pytest.mark.parametrize("deleted", [(4,), (3, 4), (2, 3, 4)])
def test_a_fork_whose_parent_lost_its_newest_events_names_the_first_lost(
    deleted: tuple[int, ...],
) -> None:
    """A fork of t at version 4, after t's events from ``deleted[0]`` to 4 were removed
    behind the library (its later ones kept): a load of the fork raises
    MissingEventError naming t and the first version lost, and verify reports that
    same error there, instead of a fork that does not fit its parent."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "store.db"
        with open_store(f"sqlite:///{path}") as store:
            store.save(_thread("t", 5))
            store.fork("t", at_version=4, new_thread_id="f")
        with closing(sqlite3.connect(path)) as conn, conn:
            conn.executemany(
                "DELETE FROM stored_events WHERE originator_id = ? AND originator_version = ?",
                [(sqlite_key(thread_aggregate_id("t")), version) for version in deleted],
            )
        with open_store(f"sqlite:///{path}") as store:
            with pytest.raises(MissingEventError) as raised:
                store.load("f")
            assert (raised.value.thread_id, raised.value.version) == ("t", deleted[0])
            finding = store.verify("f").findings[0]
            assert finding.version == deleted[0]
            assert str(raised.value).endswith(finding.problem.split(": ", 1)[1])


@pytest.mark.parametrize("shift", [1, 2, 5])
def test_a_thread_renumbered_behind_the_library_is_refused_by_load_and_verify(
    shift: int,
) -> None:
    """A root thread's rows all moved ``shift`` versions up behind the library, its head
    anchor deleted: its first event is no longer at version 1, so a load refuses it,
    naming that event, and verify reports the same error there (a load used to return
    the thread at versions it never had)."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "store.db"
        with open_store(f"sqlite:///{path}") as store:
            store.save(_thread("t", 3))
        with closing(sqlite3.connect(path)) as conn, conn:
            for step in (1000, shift - 1000):
                conn.execute(
                    "UPDATE stored_events SET originator_version = originator_version + ?",
                    (step,),
                )
            conn.execute("DELETE FROM stored_events_heads")
        with open_store(f"sqlite:///{path}") as store:
            with pytest.raises(StoredRowError, match="another version than 1") as raised:
                store.load("t")
            assert f"Started at version {1 + shift} " in str(raised.value)
            finding = store.verify("t").findings[0]
            assert finding.version == 1 + shift
            assert str(raised.value).endswith(finding.problem.split(": ", 1)[1])


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_read_past_the_head_while_another_writer_appends_is_never_damage(
    request: pytest.FixtureRequest, backend: str, tmp_path: Path
) -> None:
    """A read at a version, taken while another writer appends to the thread up to it
    and past, gives the thread at that version or refuses it as not yet written (naming
    a head below it), as of some moment: never a MissingEventError for events committed
    between its statements (a store that lost nothing), nor the head for a version past
    it (helper-189)."""
    import threading

    url = (
        f"sqlite:///{tmp_path / 'store.db'}"
        if backend == "sqlite"
        else request.getfixturevalue("postgres_database")
    )
    now = datetime(2026, 1, 1, tzinfo=UTC)
    with open_store(url) as writer, open_store(url) as reader:
        writer.save(AgentThread.start("t", now=now))
        done, failures = threading.Event(), []

        def append() -> None:
            try:
                for n in range(60):
                    thread = writer.load("t")
                    thread.append_message(Message(Role.USER, f"message {n}"), now=now)
                    writer.save(thread)
            finally:
                done.set()

        appending = threading.Thread(target=append)
        appending.start()
        reads = 0
        while not done.is_set():
            try:
                read = reader.load("t", version=30).version
                if read != 30:
                    failures.append(f"version 30 read as {read}")
            except MissingEventError as exc:
                failures.append(str(exc))
            except ThreadNotFoundError as exc:
                # The head named, read after the fold, may have reached 30 since.
                head = re.match(r"thread 't' has versions 1 to (\d+);", str(exc))
                if not (int(head[1]) < 30 if head else "not found at version 30" in str(exc)):
                    failures.append(str(exc))
            reads += 1
        appending.join()
        assert reads and not failures, failures[:3]
        assert reader.load("t", version=30).version == 30
        assert reader.verify("t").ok


def _delete_events(url: str, thread_id: str, after: int) -> None:
    """Delete the thread's own events after version ``after`` behind the library, as a
    careless or hostile writer could (or row-level security hide them)."""
    stream = thread_aggregate_id(thread_id)
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
            conn.execute(
                "DELETE FROM stored_events WHERE originator_id = ? AND originator_version > ?",
                (sqlite_key(stream), after),
            )
        return
    import psycopg

    with psycopg.connect(url) as conn:
        conn.execute(
            "DELETE FROM covonaut_events WHERE originator_id = %s AND originator_version > %s",
            (stream, after),
        )


def _paused(store: Store, thread_id: str) -> None:
    """Thread ``thread_id``, paused on a review of a call."""
    pay = Tool("pay", "Pay", {"type": "object"}, lambda c, a: "paid", requires_approval=True)
    Agent(
        AgentConfig(
            provider=ScriptedProvider([call(("c1", "pay", "{}")), answer("done")]),
            tools=[pay],
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
            reviewer_verifier=HmacReviewerVerifier(b"k" * 32),
        )
    ).run("Pay.")


def _replayed(url: str, thread_id: str) -> tuple[int, str]:
    """``covonaut-es replay THREAD --verify``'s exit code and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(["replay", thread_id, "--verify", "--store", url])
    return code, out.getvalue() + err.getvalue()


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_thread_whose_events_are_all_gone_is_never_reported_not_found(
    request: pytest.FixtureRequest, backend: str
) -> None:
    """Generated (helper-139): a thread the store anchored (a plain one, one paused on a
    review, a fork's parent) whose own event rows are all deleted behind the library, or
    hidden from the reader, is refused by every read with MissingFirstEventError naming
    it and the backup advice, never ThreadNotFoundError, and verify and ``replay
    --verify`` (exit 1) report it; a listing (a cache of the log) is refused typed, or
    each thread it still lists reads as it is or is refused typed. As a control, deleting
    only its newest events gives a thread or a typed refusal too."""
    server = request.getfixturevalue("postgres_url") if backend == "postgres" else None

    @settings(max_examples=12, deadline=None)
    @given(
        kind=st.sampled_from(["plain", "paused", "fork's parent"]),
        messages=st.integers(min_value=1, max_value=4),
        every=st.booleans(),
    )
    def check(kind: str, messages: int, every: bool) -> None:
        with contextlib.ExitStack() as stack:
            if server is None:
                directory = stack.enter_context(tempfile.TemporaryDirectory())
                url = f"sqlite:///{Path(directory) / 'store.db'}"
            else:
                url = stack.enter_context(postgres_database_of(server))
            with open_store(url) as store:
                if kind == "paused":
                    _paused(store, "t")
                else:
                    store.save(_thread("t", messages))
                head = store.load("t").version
                if kind == "fork's parent":
                    store.fork("t", at_version=head, new_thread_id="f")
            _delete_events(url, "t", 0 if every else head - 1)
            with open_store(url) as store:
                reads: dict[str, Callable[[], object]] = {
                    "load": lambda: store.load("t"),
                    "find": lambda: store.find("t"),
                    "state_at": lambda: store.state_at("t", 1),
                    "history": lambda: store.history("t"),
                    "replay_state": lambda: store.replay_state("t"),
                    "replay": lambda: list(store.replay("t")),
                }
                if kind == "fork's parent":
                    reads["fork's load"] = lambda: store.load("f")
                    reads["fork's history"] = lambda: store.history("f")
                for name, read in reads.items():
                    try:
                        read()
                    except ThreadNotFoundError as exc:
                        pytest.fail(f"{name} says not found: {exc}")
                    except MissingEventError as exc:
                        assert exc.thread_id == "t", name
                        assert "restore the store from a backup" in str(exc), name
                        if every:
                            assert isinstance(exc, MissingFirstEventError), name
                            assert exc.version == head, name
                    else:
                        assert not every, name
                report = store.verify("t")
                assert not report.ok
                assert "the newest events were deleted" in report.findings[-1].problem
                try:  # made again from the threads the log names: a fork's load fails
                    listed = [s.thread_id for s in store.list_threads().threads]
                except MissingEventError as exc:
                    assert exc.thread_id == "t"
                    listed = []
                for thread_id in listed:
                    try:
                        store.load(thread_id)
                    except ThreadNotFoundError as exc:
                        pytest.fail(f"listed thread {thread_id!r} is not found: {exc}")
                    except MissingEventError:
                        pass
            code, printed = _replayed(url, "t")
            assert code == 1, printed
            assert "not found" not in printed
            assert "the newest events were deleted" in printed

    check()


def test_an_anchor_written_for_a_thread_never_held_refuses_its_id_and_says_how_to_free_it(
    tmp_path: Path,
) -> None:
    """A head anchor row a writer adds for an id the store never held (helper-153) makes
    every read and a run that would make the thread refuse it, naming the row to delete
    as well as the backup advice, since the anchor may be all that is left of events
    that existed: a new thread is never made over it. Deleting the row frees the id."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with open_store(url) as store:
        store.save(_thread("other", 1))
    stream = thread_aggregate_id("ticket-42")
    with closing(sqlite3.connect(tmp_path / "store.db")) as conn, conn:
        conn.execute(
            "INSERT INTO stored_events_heads (originator_id, version, chain) VALUES (?, 5, ?)",
            (sqlite_key(stream), "bogus"),
        )
    with open_store(url) as store:
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider([answer("hi")]),
                checkpoint=CheckpointSettings(store=store, thread_id="ticket-42"),
            )
        )
        for attempt in (lambda: store.load("ticket-42"), lambda: agent.run("Hello.")):
            with pytest.raises(MissingFirstEventError, match="delete that row") as refused:
                attempt()
            assert refused.value.thread_id == "ticket-42"
        with closing(sqlite3.connect(tmp_path / "store.db")) as conn, conn:
            conn.execute(
                "DELETE FROM stored_events_heads WHERE originator_id = ?", (sqlite_key(stream),)
            )
        assert agent.run("Hello.") == "hi"
