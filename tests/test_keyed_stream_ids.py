"""Stream ids of an encrypted store are keyed: nothing in its database or beside it
names a thread's or a named state's unkeyed stream id, so a guessed thread id cannot be
confirmed from the file alone; every operation works as on a plain store, and stores
written before (no ``stream_ids`` setting) keep their ids (ADR 0031)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    ReviewQueue,
    ScriptedProvider,
    Store,
    ThreadBusyError,
    create_cipher_key,
    open_store,
)
from covonaut_es.audit import check_store, export_thread, import_threads
from covonaut_es.domain import ThreadSnapshot, thread_aggregate_id
from covonaut_es.domain._named_states import state_stream_id
from covonaut_es.errors import StoreSettingsError
from covonaut_es.store._backends._sqlite_leases import lease_directory
from covonaut_es.store._settings import settings_table
from covonaut_es.store._stream_ids import KEYED, STREAM_IDS, KeyedStreamIds
from covonaut_es.workers._ready import TRACKED, ReadyThreads
from support import answer, call, review_tool
from test_chain_laundering import run_sql

NOW = datetime(2026, 1, 1, tzinfo=UTC)
GOLDEN = Path(__file__).parent / "fixtures" / "golden" / "v4"
GOLDEN_KEY = "Y292b25hdXQtZ29sZGVuLVRFU1QtT05MWS1rZXktMzI="
CHAIN_KEY = "keyed-stream-ids-chain-key"

ids = st.from_regex(r"[a-z][a-z0-9_-]{0,14}", fullmatch=True)


def unkeyed_forms(stream: uuid.UUID) -> tuple[bytes, ...]:
    """Every way a database or a file name could spell an unkeyed stream id."""
    return (stream.hex.encode(), str(stream).encode(), stream.bytes)


def pause(store: Store, thread_id: str) -> None:
    """Run a thread until its review tool interrupts it (a checkpoint and a review)."""
    Agent(
        AgentConfig(
            provider=ScriptedProvider([call(("r1", "review", "{}")), answer("done")]),
            tools=[review_tool()],
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
        )
    ).run("go")


def exercise(store: Store, threads: list[str], state_key: str, cipher_key: str | None) -> str:
    """Write through every path that names a stream: saves, a paused run and its review
    in the queue's view, a fork, a snapshot, a named state, a lease, and the adoption
    of a chain key. Returns the fork's thread id."""
    for thread_id in threads:
        store.save(AgentThread.start(thread_id, now=NOW))
    pause(store, threads[0])
    fork = store.fork(threads[0], new_thread_id=threads[0] + "~f", now=NOW)
    thread = store.load(threads[0])
    store._backend.replace_snapshot(store._app.snapshots, ThreadSnapshot.take(thread))
    store.write_state(state_key, {"n": 1})
    with store.lease(threads[-1]):
        pass
    queue = ReviewQueue(store.url, cipher_key=cipher_key)
    with queue.follow():
        queue.wait_until_current(store)
    return fork


def database_bytes(store: Store, url: str) -> tuple[bytes, list[str]]:
    """Everything a reader of the database sees, and the names of the files beside it:
    a SQLite file's bytes (and its journal's), a PostgreSQL database's every table
    dumped, a memory store's every recorder and table."""
    if url.startswith("sqlite:"):
        path = Path(url.removeprefix("sqlite:///"))
        store.close()
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        names = [p.name for p in path.parent.rglob("*")]
        directory = lease_directory(str(path))
        names += os.listdir(directory) if directory.exists() else []
        return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*")), names
    if url.startswith("postgresql:"):
        dumped: list[bytes] = []
        with psycopg.connect(url) as conn:
            tables = conn.execute(
                "SELECT table_schema, table_name FROM information_schema.tables "
                "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
            ).fetchall()
            for schema, table in tables:
                dumped.append(table.encode())
                for row in conn.execute(f'SELECT * FROM "{schema}"."{table}"'):
                    for value in row:
                        dumped.append(value if isinstance(value, bytes) else str(value).encode())
        return b"\n".join(dumped), [table for _, table in tables]
    recorder = store._app.recorder
    snapshots = store._app.snapshots.recorder
    records = [*recorder._stored_events, *snapshots._stored_events]
    dumped = [str(r.originator_id).encode() + r.state for r in records]
    dumped += [str(s).encode() for s in (*recorder.thread_heads, *recorder.lease_tokens)]
    dumped += [f"{k}={v}".encode() for k, v in store._app.factory.settings.items()]
    return b"\n".join(dumped), []


@pytest.fixture
def fresh_url(store_url: str) -> Iterator[Callable[[], str]]:
    """New empty stores of the back end of ``store_url``, one per call."""
    made: list[str] = []

    def fresh() -> str:
        if store_url.startswith("memory"):
            return f"memory://keyed-{uuid.uuid4().hex}"
        if store_url.startswith("sqlite"):
            directory = tempfile.mkdtemp(prefix="covonaut-keyed-")
            made.append(directory)
            return f"sqlite:///{directory}/threads.db"
        name = f"k_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(store_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        made.append(name)
        return store_url.rsplit("/", 1)[0] + f"/{name}"

    yield fresh
    for thing in made:
        if thing.startswith("k_"):
            with psycopg.connect(store_url, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {thing} WITH (FORCE)")
        else:
            shutil.rmtree(thing, ignore_errors=True)


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(threads=st.lists(ids, min_size=1, max_size=3, unique=True), state_key=ids)
def test_no_unkeyed_stream_id_is_stored_in_an_encrypted_store(
    fresh_url: Callable[[], str], threads: list[str], state_key: str
) -> None:
    """No row, table, file or file name of an encrypted store holds the unkeyed stream
    id of any thread, fork or named state it keeps, in any spelling."""
    url, key = fresh_url(), create_cipher_key()
    with open_store(url, cipher_key=key) as store:
        fork = exercise(store, threads, state_key, key)
        with open_store(url, cipher_key=key, chain_key=CHAIN_KEY) as adopting:
            assert adopting.state_at(threads[0]) == store.state_at(threads[0])
            found, names = database_bytes(store, url)
    streams = [thread_aggregate_id(t) for t in (*threads, fork)] + [state_stream_id(state_key)]
    for stream in streams:
        for form in unkeyed_forms(stream):
            assert form not in found, (stream, form)
            assert not any(form.decode("latin-1") in name for name in names), (stream, names)


def summary(store: Store, cipher_key: str | None) -> dict[str, Any]:
    """What every reading operation says of a store's threads."""
    threads = sorted(store.thread_ids())
    queue = ReviewQueue(store.url, cipher_key=cipher_key)
    with queue.follow():
        queue.wait_until_current(store)
    ready = ReadyThreads(store._records.thread_id_of)
    for notification in store._records.notifications(*TRACKED, after=0):
        ready.apply(store._records.mapper.to_domain_event(notification))
    return {
        "threads": threads,
        "versions": {t: store.head_version(t) for t in threads},
        "history": {t: [type(e).__name__ for e in store.history(t)] for t in threads},
        "states": {t: store.state_at(t).status for t in threads},
        "at_one": {t: store.state_at(t, 1).status for t in threads},
        "verified": {t: store.verify(t).ok for t in threads},
        "forks": sorted((f.thread_id, f.parent) for f in store.forks()),
        "parents": {t: store.parent(t) for t in threads},
        "queue": sorted((i.thread_id, i.item_id) for i in queue.pending()),
        "ready": sorted(str(ready.thread_id(stream)) for stream in list(ready.ready)),
        "state": store.read_state("k"),
        "checked": check_store(store).ok,
    }


def test_every_operation_reads_a_keyed_store_as_a_plain_one(
    fresh_url: Callable[[], str],
) -> None:
    """Loading, history, state at a version, verify, forks, the queue's listing,
    workers' ready threads, named states and the store's check say the same of a
    keyed store as of a plain one written alike; both record what they are."""
    key = create_cipher_key()
    said = []
    for cipher_key in (None, key):
        url = fresh_url()
        with open_store(url, cipher_key=cipher_key) as store:
            exercise(store, ["a", "b"], "k", cipher_key)
        with open_store(url, cipher_key=cipher_key) as store:
            recorded = settings_table(store._app).read()
            assert recorded.get(STREAM_IDS) == (KEYED if cipher_key else None)
            said.append(summary(store, cipher_key))
        with open_store(url, cipher_key=cipher_key, create_tables=False) as read_only:
            assert sorted(read_only.thread_ids()) == said[-1]["threads"]
    assert said[0] == said[1]


def test_an_export_of_a_keyed_store_imports_into_keyed_and_plain_stores(
    fresh_url: Callable[[], str],
) -> None:
    """An export from a keyed store imports into another keyed store (its own key)
    and into a plain one, and exports again to the same text."""
    key = create_cipher_key()
    with open_store(fresh_url(), cipher_key=key) as source:
        exercise(source, ["a"], "k", key)
        text = "".join(f"{line}\n" for line in export_thread(source, "a~f", with_ancestors=True))
    for target_key in (create_cipher_key(), None):
        with open_store(fresh_url(), cipher_key=target_key) as target:
            assert import_threads(target, text.splitlines(keepends=True)) == ["a", "a~f"]
            assert target.verify("a~f").ok
            again = export_thread(target, "a~f", with_ancestors=True)
            assert "".join(f"{line}\n" for line in again) == text


def test_a_lease_is_exclusive_on_a_keyed_store(fresh_url: Callable[[], str]) -> None:
    """A thread's run lease on a keyed store refuses a second holder, and each new
    lease gets a greater token, as on a plain store."""
    url, key = fresh_url(), create_cipher_key()
    with open_store(url, cipher_key=key) as store, open_store(url, cipher_key=key) as other:
        store.save(AgentThread.start("t", now=NOW))

        def take(holder: Store) -> int:  # in a thread of its own: a runner elsewhere
            with holder.lease("t") as lease:
                return lease.token

        with ThreadPoolExecutor(1) as runner:
            with store.lease("t") as first, pytest.raises(ThreadBusyError):
                runner.submit(take, other).result()
            assert runner.submit(take, other).result() > first.token


@pytest.mark.parametrize("name", ["encrypted", "encrypted-compressed-keyed"])
def test_golden_encrypted_stores_keep_unkeyed_ids_and_take_writes_in_them(
    name: str, tmp_path: Path
) -> None:
    """An encrypted store written before keyed ids records no scheme: it loads,
    verifies, exports and takes new threads under unkeyed ids, as it always has."""
    copy = tmp_path / f"{name}.db"
    shutil.copyfile(GOLDEN / f"{name}.db", copy)
    options: dict[str, Any] = {"cipher_key": GOLDEN_KEY}
    if "keyed" in name:
        options["chain_key"] = "covonaut-golden-TEST-ONLY-chain-key"
    url = f"sqlite:///{copy}"
    with open_store(url, **options) as store:
        assert STREAM_IDS not in settings_table(store._app).read()
        threads = sorted(store.thread_ids())
        assert threads and all(store.verify(t).ok for t in threads)
        assert "".join(export_thread(store, threads[0], with_ancestors=True))
        store.save(AgentThread.start("written-now", now=NOW))
        store.fork("written-now", new_thread_id="written-now~f", now=NOW)
    with sqlite3.connect(copy) as conn:
        stored = {row[0] for row in conn.execute("SELECT originator_id FROM stored_events")}
    for thread_id in (*threads, "written-now", "written-now~f"):
        assert thread_aggregate_id(thread_id).hex in stored
    with open_store(url, **options) as store:
        assert sorted(store.thread_ids()) == sorted([*threads, "written-now", "written-now~f"])


def test_a_plain_store_keeps_unkeyed_ids(fresh_url: Callable[[], str]) -> None:
    """A store without a cipher key records no scheme and keeps each thread under its
    unkeyed id, as before."""
    url = fresh_url()
    with open_store(url) as store:
        store.save(AgentThread.start("t", now=NOW))
        assert STREAM_IDS not in settings_table(store._app).read()
        found, _ = database_bytes(store, url)
    assert any(form in found for form in unkeyed_forms(thread_aggregate_id("t")))


def test_a_sealed_queue_view_written_before_still_finds_its_threads(tmp_path: Path) -> None:
    """A sealed queue view written before its rows were keyed (a thread's row under
    its unkeyed aggregate id) still names that thread."""
    key, url = create_cipher_key(), f"sqlite:///{tmp_path / 'threads.db'}"
    with open_store(url, cipher_key=key) as store:
        queue = ReviewQueue(url, cipher_key=key)
        with queue.follow():
            queue.wait_until_current(store)
        view, aggregate = queue.view(), thread_aggregate_id("old").hex
        assert view.thread_id_of(aggregate) is None
        sealed = queue._sealer.seal(b"old")
        with view.datastore.transaction(commit=True) as cursor:
            cursor.execute(
                "INSERT INTO covonaut_sealed_queue_threads (aggregate_id, thread_id) VALUES (?, ?)",
                (aggregate, sealed),
            )
        assert view.thread_id_of(aggregate) == "old"
        queue.close()


def test_a_store_recording_an_unknown_scheme_of_stream_ids_is_refused(tmp_path: Path) -> None:
    """A store whose settings name a scheme of stream ids this version does not know
    (written by a later one) is refused at open, saying which, before anything is read
    or written."""
    key, path = create_cipher_key(), tmp_path / "threads.db"
    with open_store(f"sqlite:///{path}", cipher_key=key) as store:
        store.save(AgentThread.start("t", now=NOW))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE covonaut_settings SET value = 'keyed-v9' WHERE name = 'stream_ids'")
    before = path.read_bytes()
    for create_tables in (True, False):
        with pytest.raises(StoreSettingsError, match="'keyed-v9'"):
            open_store(f"sqlite:///{path}", cipher_key=key, create_tables=create_tables)
    assert path.read_bytes() == before


SETTINGS_ROWS = ("cipher", "compression", STREAM_IDS)


def settings_mutations() -> st.SearchStrategy[tuple[str, tuple[Any, ...]]]:
    """Every single-row change a writer without the key can make to a store's settings
    (a statement with ``?`` placeholders and its parameters), and the whole table gone."""
    rows = st.sampled_from(SETTINGS_ROWS)
    values = st.sampled_from([None, "", "text", "42", "none", "zstd", KEYED, "hmac-sha256:00"])
    names = st.sampled_from([None, "", "x", "stream_ids_", *SETTINGS_ROWS])
    table = "covonaut_settings"
    return st.one_of(
        rows.map(lambda r: (f"DELETE FROM {table} WHERE name = ?", (r,))),
        st.tuples(names, rows).map(lambda a: (f"UPDATE {table} SET name = ? WHERE name = ?", a)),
        st.tuples(values, rows).map(lambda a: (f"UPDATE {table} SET value = ? WHERE name = ?", a)),
        st.tuples(rows, rows).map(
            lambda a: (
                f"UPDATE {table} SET value = (SELECT value FROM {table} WHERE name = ?) "
                "WHERE name = ?",
                a,
            )
        ),
        st.just((f"DELETE FROM {table} WHERE name <> ?", ("",))),
        st.just((f"DROP TABLE {table}", ())),
    )


def run_statement(url: str, sql: str, params: tuple[Any, ...]) -> bool:
    """Run ``sql`` on the database of ``url`` as a writer of it can; whether the
    database took it (a constraint may refuse it)."""
    try:
        run_sql(url, sql, *params)
    except (sqlite3.IntegrityError, psycopg.errors.IntegrityError):
        return False
    return True


def stored_rows(url: str) -> list[tuple[Any, ...]]:
    """Every stream id and version stored, and the settings recorded, of a store."""
    table = "stored_events" if url.startswith("sqlite") else "covonaut_events"
    query = f"SELECT originator_id, originator_version FROM {table} ORDER BY 1, 2"
    settings = "SELECT name, value FROM covonaut_settings ORDER BY 1"
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            rows = conn.execute(query).fetchall()
            with contextlib.suppress(sqlite3.OperationalError):
                rows += conn.execute(settings).fetchall()
            return rows
    with psycopg.connect(url) as conn:
        rows = conn.execute(query).fetchall()
        with contextlib.suppress(psycopg.errors.UndefinedTable):
            rows += conn.execute(settings).fetchall()
        return rows


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(mutation=settings_mutations(), with_events=st.booleans())
# A memory store's settings are not written behind its back: SQLite and PostgreSQL only.
@pytest.mark.parametrize(
    "store_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_no_change_to_an_encrypted_stores_settings_makes_it_write_unkeyed_ids(
    fresh_url: Callable[[], str], mutation: tuple[str, tuple[Any, ...]], with_events: bool
) -> None:
    """Whatever single row of an encrypted store's settings a writer without its key
    deletes, renames or changes (or the whole table), an open with the key either keeps
    the store's keyed ids and reads what it holds, or is refused with a
    ``StoreSettingsError``, nothing written; no thread is ever written under its
    unkeyed id (ADR 0095). (A compression row deleted or changed was taken, and every
    event then failed to read.)"""
    key, url = create_cipher_key(), fresh_url()
    with open_store(url, cipher_key=key) as store:
        if with_events:
            store.save(AgentThread.start("t", now=NOW))
    assume(run_statement(url, *mutation))
    before = stored_rows(url)
    try:
        store = open_store(url, cipher_key=key)
    except StoreSettingsError:
        assert stored_rows(url) == before
        return
    with store:
        assert isinstance(store._app.recorder.stream_ids, KeyedStreamIds)
        assert store.exists("t") is with_events
        if with_events:
            store.load("t")
        store.save(AgentThread.start("new", now=NOW))
    found = {str(row[0]).replace("-", "") for row in stored_rows(url)}
    assert thread_aggregate_id("new").hex not in found
