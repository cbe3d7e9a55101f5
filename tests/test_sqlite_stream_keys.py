"""A SQLite store created now keeps each stream id as its 16 bytes, in every table keyed
by stream, and those tables refuse any other key: a version that keys streams as hex
(covonaut-es before ADR 0074) or a writer around the library cannot start a second
stream beside a thread's. A store written before keeps its hex, in the tables made for
it later too, and is read and written as it was (ADR 0074)."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import Store, open_store
from covonaut_es.domain import thread_aggregate_id
from covonaut_es.errors import ForeignSchemaError, StoredRowError
from test_audit import conversation

GOLDEN = Path(__file__).parent / "fixtures" / "golden"
STREAM_TABLES = ("stored_events", "stored_snapshots", "stored_events_heads", "stored_events_leases")


def written(path: Path) -> Store:
    """A store at ``path`` holding thread ``t`` with a snapshot and a run lease taken."""
    store = open_store(f"sqlite:///{path}")
    conversation(store, "t", turns=40)
    store.snapshot_if_due(store.load("t"))  # unless the run took one
    with store.lease("t"):
        pass
    return store


def keys(path: Path, table: str) -> tuple[str, set[tuple[str, int]]]:
    """The declaration of ``table``'s stream id, and the type and length of each one
    its rows hold."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
        found = conn.execute(
            f"SELECT DISTINCT typeof(originator_id), length(originator_id) FROM {table}"
        ).fetchall()
    return sql, set(found)


def test_a_new_store_keys_each_stream_by_its_16_bytes_in_every_table(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with written(path):
        pass
    for table in STREAM_TABLES:
        sql, found = keys(path, table)
        assert "originator_id BLOB CHECK" in sql, sql
        assert found == {("blob", 16)}, (table, found)


def other_keys(stream: uuid.UUID) -> Any:
    """Keys a store created now must refuse: the thread's id as an older version or a
    hand-written statement would key it, and anything else but 16 bytes."""
    return st.one_of(
        st.sampled_from([stream.hex, str(stream), stream.urn, stream.hex.upper()]),
        st.text(max_size=40),
        st.binary(max_size=40).filter(lambda value: len(value) != 16),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.floats(allow_nan=False),
        st.none(),
    )


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "store.db"
    with written(path):
        pass
    return path


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data(), table=st.sampled_from(STREAM_TABLES))
def test_every_stream_table_of_a_new_store_refuses_a_key_of_any_other_shape(
    template: Path, tmp_path: Path, data: st.DataObject, table: str
) -> None:
    """A row keyed otherwise, inserted or changed by a writer of the file (or by an
    older version's save, which keys by hex), is refused by the table; the thread
    still loads and verifies as it was, and is listed once."""
    path = tmp_path / f"{uuid.uuid4().hex}.db"
    shutil.copy(template, path)
    key = data.draw(other_keys(thread_aggregate_id("t")), label="key")
    update = data.draw(st.booleans(), label="update in place")
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        if update:
            statement = f"UPDATE {table} SET originator_id = ?"
            params: tuple[Any, ...] = (key,)
        else:
            (width,) = conn.execute(f"SELECT count(*) FROM pragma_table_info('{table}')").fetchone()
            copied = ", ".join(["?"] + ["NULL"] * (width - 1))
            statement = f"INSERT INTO {table} VALUES ({copied})"
            params = (key,)
            if table in ("stored_events", "stored_snapshots"):
                statement = (
                    f"INSERT INTO {table} SELECT ?, originator_version + 1000, topic, state "
                    f"FROM {table} LIMIT 1"
                )
        with pytest.raises(sqlite3.IntegrityError, match="constraint failed"):
            conn.execute(statement, params)
    with open_store(f"sqlite:///{path}") as store:
        assert list(store.thread_ids()) == ["t"]
        assert store.verify("t").ok
        assert store.load("t").status.value == "finished"


@pytest.mark.parametrize("golden", ["v1/threads.db", "v10-turn-checkpoint/plain.db"])
def test_a_store_written_before_keeps_hex_in_every_table_as_it_runs_on(
    tmp_path: Path, golden: str
) -> None:
    """A store from before head anchors (v1: the head and lease tables are made when it
    is opened) and one from just before 16-byte keys (v10) run a new thread and a
    snapshot in hex, in the tables they had and those made for them."""
    path = tmp_path / "store.db"
    shutil.copy(GOLDEN / golden, path)
    with open_store(f"sqlite:///{path}") as store:
        before = set(store.thread_ids())
        conversation(store, "new", turns=40)
        store.snapshot_if_due(store.load("new"))  # unless the run took one
        with store.lease("new"):
            pass
        assert set(store.thread_ids()) == before | {"new"}
        assert all(store.verify(thread).ok for thread in before | {"new"})
    for table in STREAM_TABLES:
        sql, found = keys(path, table)
        assert "originator_id TEXT" in sql, sql
        assert found == {("text", 32)}, (table, found)


def test_a_table_made_first_by_another_process_keys_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older version makes the events table (hex) between a new store's first look
    for it and its own creation: the store keys every table by hex, as that table
    declares, and its thread is listed and loaded once, run again or not."""
    from covonaut_es.store._backends import sqlite as backend

    path, looked = tmp_path / "store.db", backend.declared_key_type

    def raced(cursor: Any, table: str, *, absent: Any) -> Any:
        found = looked(cursor, table, absent=absent)
        if table == "stored_events" and found == absent:  # the first look: not there yet
            with contextlib.closing(sqlite3.connect(path)) as other, other:
                other.execute(
                    f"CREATE TABLE {table} (originator_id TEXT, originator_version INTEGER, "
                    "topic TEXT, state BLOB, PRIMARY KEY (originator_id, originator_version))"
                )
        return found

    monkeypatch.setattr(backend, "declared_key_type", raced)
    with open_store(f"sqlite:///{path}") as store:
        conversation(store, "t", turns=1)
    monkeypatch.setattr(backend, "declared_key_type", looked)
    with open_store(f"sqlite:///{path}") as store:
        assert list(store.thread_ids()) == ["t"]
        conversation(store, "t", turns=1)
        assert list(store.thread_ids()) == ["t"] and store.verify("t").ok
    for table in ("stored_events", "stored_events_heads", "stored_events_leases"):
        sql, found = keys(path, table)
        assert "originator_id TEXT" in sql and found <= {("text", 32)}, (table, sql, found)


def hex_declared(path: Path) -> None:
    """Declare a new store's events table TEXT, its 16-byte rows left as they are, as a
    writer of the file's schema can."""
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute(
            "UPDATE sqlite_master SET sql = replace(sql, ?, 'originator_id TEXT') "
            "WHERE name = 'stored_events'",
            (
                "originator_id BLOB CHECK (typeof(originator_id) = 'blob' AND "
                "length(originator_id) = 16)",
            ),
        )


def bytes_copied(path: Path) -> None:
    """Copy thread ``t``'s rows of a store keyed by hex under its 16 bytes, as the new
    version would have keyed them."""
    stream = thread_aggregate_id("t")
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            "INSERT INTO stored_events SELECT ?, originator_version, topic, state "
            "FROM stored_events WHERE originator_id = ?",
            (stream.bytes, stream.hex),
        )


@pytest.mark.parametrize("mixed", [hex_declared, bytes_copied])
def test_a_table_holding_a_key_it_does_not_declare_is_damage_never_a_second_thread(
    tmp_path: Path, template: Path, mixed: Any
) -> None:
    """A table declaring hex that holds a 16-byte key (its schema rewritten, or rows
    copied under the other form) lists nothing it cannot load: reading the log is a
    StoredRowError naming the row, and no run writes a second copy of the thread."""
    path = tmp_path / "store.db"
    if mixed is hex_declared:
        shutil.copy(template, path)
    else:  # a store keyed by hex, written before
        shutil.copy(GOLDEN / "v10-turn-checkpoint" / "plain.db", path)
        with open_store(f"sqlite:///{path}") as store:
            conversation(store, "t", turns=1)
    mixed(path)
    if mixed is hex_declared:  # its head and lease tables still declare 16 bytes
        with pytest.raises(ForeignSchemaError, match="keys streams as BLOB, its events"):
            open_store(f"sqlite:///{path}")
        return
    with (
        open_store(f"sqlite:///{path}") as store,
        pytest.raises(StoredRowError, match=r"originator_id is b'.*kept as str"),
    ):
        list(store.thread_ids())
