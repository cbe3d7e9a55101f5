"""Stores: URLs, errors, encryption and compression at rest, history, time travel."""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import psycopg
import pytest
from eventsourcing.cryptography import AESCipher
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import Environment

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    SchemaVersionError,
    ScriptedProvider,
    SerializationError,
    Store,
    StoreUnavailableError,
    StoreURLError,
    ThreadNotFoundError,
    create_cipher_key,
    open_store,
)
from covonaut_es.domain import ThreadSnapshot
from covonaut_es.errors import CipherKeyMismatchError, ConfigurationError, StaleSnapshotError
from covonaut_es.service import ThreadService
from covonaut_es.store import _zstd
from covonaut_es.store._mapper import MsgspecMapper
from covonaut_es.store._snapshot_seals import unsealed
from support import answer, call, echo_tool, put_raw_snapshot, raw_records, snapshotted_thread

SECRET = "TOP-SECRET-PLAINTEXT-4711"


def talk(store: Store, thread_id: str = "t") -> Agent:
    script = [call(("c1", "echo", f'{{"text": "{SECRET}"}}')), answer(f"I said {SECRET}")]
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            tools=[echo_tool()],
            checkpoint=CheckpointSettings(store=store, thread_id=thread_id),
        )
    )
    agent.run(f"Please repeat {SECRET}")
    return agent


def stored_bytes(store_url: str) -> bytes:
    """What the database holds, read behind the library's back."""
    if store_url.startswith("sqlite"):
        path = Path(store_url.removeprefix("sqlite:///"))
        found = path.parent.glob(path.name + "*")  # with the run leases' directory
        files = [f for p in found for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file()]
        return b"".join(f.read_bytes() for f in files)
    if store_url.startswith("postgresql"):
        with psycopg.connect(store_url) as conn:
            rows = conn.execute(
                "SELECT state FROM covonaut_events UNION ALL SELECT state FROM covonaut_snapshots"
            ).fetchall()
        return b"".join(bytes(row[0]) for row in rows)
    return b""


def test_plain_store_holds_plaintext(open_test_store: Callable[..., Store]) -> None:
    """Without a cipher or compression, the message is readable in the stored bytes
    (the control)."""
    store = open_test_store(compress="none")
    talk(store)
    assert any(SECRET.encode() in record for record in raw_records(store))


@pytest.mark.parametrize("compress", [False, True])
def test_encryption_leaves_no_plaintext_at_rest(
    store_url: str, open_test_store: Callable[..., Store], compress: bool
) -> None:
    """With cipher_key, no stored byte reveals a message, and the thread reads back."""
    key = create_cipher_key()
    store = open_test_store(cipher_key=key, compress=compress)
    agent = talk(store)
    assert not any(SECRET.encode() in record for record in raw_records(store))
    assert SECRET.encode() not in stored_bytes(store_url)
    assert store.state_at("t") == agent.state


def test_a_wrong_key_is_a_clear_error_not_garbage(
    store_url: str, open_test_store: Callable[..., Store]
) -> None:
    """Records read with another key raise SerializationError naming the event; a
    read-only open with another key (or none) is refused before anything is read."""
    store = open_test_store(cipher_key=create_cipher_key())
    talk(store)
    env = Environment("test", {"CIPHER_KEY": create_cipher_key()})
    mapper = MsgspecMapper(cipher=AESCipher(env))
    record = store._app.recorder.select_notifications(None, 1)[0]
    with pytest.raises(SerializationError, match="wrong key or corrupt data"):
        mapper.to_domain_event(record)
    if store_url == "memory://":
        return  # cannot be reopened
    with pytest.raises(CipherKeyMismatchError, match="the cipher key given is another"):
        open_store(store_url, cipher_key=create_cipher_key(), create_tables=False)
    with pytest.raises(CipherKeyMismatchError, match="opened without a cipher key"):
        open_store(store_url, create_tables=False)


def test_invalid_cipher_key_is_a_configuration_error(store_url: str) -> None:
    """A key that is not base64 of 16, 24 or 32 bytes is refused at open."""
    with pytest.raises(ConfigurationError, match="cipher key"):
        open_store(store_url, cipher_key="not-a-key")
    with pytest.raises(ConfigurationError, match="16, 24 or 32"):
        create_cipher_key(7)


def test_a_key_the_cipher_reads_leniently_as_another_is_refused(tmp_path: Path) -> None:
    """eventsourcing's AES cipher drops characters outside base64's alphabet: a key
    whose text is the bytes of the store's key, with such characters added, encrypts
    under another AES key while the bytes a strict reading falls back to are the store's.
    It is refused at open, before anything is written, and the store stays whole."""
    other = "QUJDREVGR0hJSktMTU5PUA==" + "!" * 8  # AES-128 to the cipher
    key = base64.b64encode(other.encode()).decode()  # the store's AES-256 key
    store_url = f"sqlite:///{tmp_path / 'keyed.db'}"
    with open_store(store_url, cipher_key=key) as store:
        talk(store, "kept")
    for given in (other, key + "\n", " " + key):
        with pytest.raises(ConfigurationError, match="it is not base64") as refused:
            open_store(store_url, cipher_key=given)
        assert "QUJD" not in str(refused.value)
    with open_store(store_url, cipher_key=key) as store:
        assert list(store.thread_ids()) == ["kept"]


@pytest.mark.parametrize(
    "url",
    ["", "redis://localhost", "sqlite://", "sqlite:///", "postgresql://host-only", "memory:"],
)
def test_bad_store_urls_are_refused_with_the_expected_forms(url: str) -> None:
    """An unknown or incomplete URL raises StoreURLError naming what is expected."""
    with pytest.raises(StoreURLError, match="store URL"):
        open_store(url)


def test_sqlite_url_with_missing_directory_is_refused(tmp_path: Path) -> None:
    """A SQLite path in a directory that does not exist is refused, not created."""
    with pytest.raises(StoreURLError, match="does not exist"):
        open_store(f"sqlite:///{tmp_path / 'missing' / 'x.db'}")


def test_missing_thread_is_a_lookup_error(store: Store) -> None:
    """Loading an unknown thread raises ThreadNotFoundError (a LookupError)."""
    with pytest.raises(ThreadNotFoundError, match="'ghost' not found"):
        store.load("ghost")
    with pytest.raises(LookupError):
        store.history("ghost")
    assert store.find("ghost") is None
    assert not store.exists("ghost")


def test_every_read_and_command_missing_a_thread_says_the_same(store: Store) -> None:
    """Loading, reading the history, replaying, forking and a leased command of the
    service all refuse an unknown thread with one message naming it and the store."""
    misses: list[Callable[[], object]] = [
        lambda: store.load("ghost"),
        lambda: store.history("ghost"),
        lambda: store.replay_state("ghost"),
        lambda: store.fork("ghost"),
        lambda: ThreadService(store).pause_calls_in_doubt("ghost"),
    ]
    for miss in misses:
        with pytest.raises(ThreadNotFoundError) as raised:
            miss()
        assert str(raised.value) == f"thread 'ghost' not found in store {store.url}"
    with pytest.raises(ThreadNotFoundError, match=r"'ghost' not found at version 2 in store"):
        store.load("ghost", version=2)


def test_history_lists_events_in_order_with_versions_and_times(store: Store) -> None:
    """history() returns every event, versions 1..n, timestamps non-decreasing."""
    agent = talk(store)
    history = store.history("t")
    assert [e.originator_version for e in history] == list(range(1, agent.state.version + 1))
    times = [e.timestamp for e in history]
    assert times == sorted(times)
    assert isinstance(history[0], AgentThread.Started)


def test_state_at_any_version_is_read_only_time_travel(store: Store) -> None:
    """state_at(thread, v) is the state as of event v; the thread is unchanged."""
    agent = talk(store)
    states = [store.state_at("t", v) for v in range(1, agent.state.version + 1)]
    assert [s.version for s in states] == list(range(1, agent.state.version + 1))
    assert [len(s.messages) for s in states] == sorted(len(s.messages) for s in states)
    assert states[-1] == agent.state
    with pytest.raises(ThreadNotFoundError):
        store.state_at("t", 0)


def test_thread_ids_lists_every_thread(store: Store) -> None:
    """thread_ids() lists threads in creation order."""
    for name in ("b", "a", "c"):
        talk(store, name)
    assert list(store.thread_ids()) == ["b", "a", "c"]


def test_postgres_table_names_are_explicit(postgres_database: str) -> None:
    """PostgreSQL tables are named after the store, not after Python classes."""
    with open_store(postgres_database) as store:
        talk(store)
    with psycopg.connect(postgres_database) as conn:
        names = {
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
        }
    assert {"covonaut_events", "covonaut_snapshots"} <= names


def test_unreachable_postgres_is_store_unavailable() -> None:
    """A PostgreSQL server that refuses connections raises StoreUnavailableError."""
    import socket

    with socket.socket() as probe:  # a loopback port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(StoreUnavailableError, match="cannot connect"):
        open_store(f"postgresql://postgres@127.0.0.1:{port}/nothing")


# Snapshots as a cache -------------------------------------------------------------------


def put_snapshot(store: Store, thread_id: str, edit: Callable[[dict[str, Any]], object]) -> None:
    """Store a snapshot of the thread's head whose payload ``edit`` has changed."""
    mapper = MsgspecMapper()
    record = mapper.to_stored_event(ThreadSnapshot.take(store.load(thread_id)))
    payload = mapper.payload_fields(record)
    edit(payload)
    packed = _zstd.compress(msgspec.msgpack.encode(payload))
    put_raw_snapshot(
        store, StoredEvent(record.originator_id, record.originator_version, record.topic, packed)
    )


def test_a_snapshot_that_cannot_be_read_falls_back_to_the_events(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A snapshot that does not decode is passed over with a log line, and the
    thread is rebuilt from its events: never wrong state."""
    state = talk(store).state
    put_snapshot(store, "t", lambda payload: payload["state"].update(turn="not a number"))
    with caplog.at_level(logging.WARNING, logger="covonaut_es"):
        assert store.state_at("t") == state
    assert "rebuilding the thread from its events" in caplog.text
    current = AgentThread.class_version
    assert f"ThreadSnapshot data (schema version {current}) does not decode" in caplog.text


def test_a_damaged_compressed_snapshot_falls_back_to_the_events(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A truncated zstd snapshot is passed over with a log line naming its stream, as
    any unreadable snapshot is."""
    state = talk(store).state
    record = MsgspecMapper().to_stored_event(ThreadSnapshot.take(store.load("t")))
    put_raw_snapshot(
        store,
        StoredEvent(
            record.originator_id, record.originator_version, record.topic, record.state[:40]
        ),
    )
    with caplog.at_level(logging.WARNING, logger="covonaut_es"):
        assert store.state_at("t") == state
    assert f"{record.originator_id} at version {record.originator_version}" in caplog.text
    assert "not a readable compressed snapshot" in caplog.text


@pytest.mark.parametrize("compress", [False, True])
def test_an_encrypted_snapshot_is_compressed_once_and_restores(
    open_test_store: Callable[..., Store], compress: bool
) -> None:
    """With a cipher key, compressed or not, the snapshot at rest is its seal and the
    codec's zstd frame, encrypted (not compressed a second time), and it restores the
    thread."""
    store = open_test_store(cipher_key=create_cipher_key(), compress=compress)
    thread = snapshotted_thread(store, text=SECRET)
    assert store._app.snapshots is not None
    [record] = store._app.snapshots.recorder.select_events(thread.id)
    assert SECRET.encode() not in record.state
    mapper = store._records.mapper
    assert mapper.cipher is not None
    seal, body = unsealed(mapper.cipher.decrypt(record.state))
    assert seal is not None and seal.scheme == "cipher"
    assert bytes(body).startswith(_zstd.MAGIC)
    assert mapper.to_domain_event(record).mutate(None).state == thread.state
    assert store.load("long").state == thread.state


def test_a_checkpoint_migrator_replaces_the_librarys_step(store: Store) -> None:
    """``CheckpointSettings(migrators={v: fn})`` upgrades snapshots at version v with fn
    instead of the library's upcaster: here the 0 -> 1 identity and the 1 -> 2 rebuild."""
    talk(store)
    put_snapshot(store, "t", lambda payload: payload.pop("_v"))

    def migrate(state: dict[str, Any]) -> dict[str, Any]:
        return {**state, "turn": 41, "_v": 1}

    def current(state: dict[str, Any]) -> dict[str, Any]:
        return {**state, "_v": 2}

    migrators = {0: migrate, 1: current}
    settings = CheckpointSettings(store=store, thread_id="t", migrators=migrators)
    agent = Agent(AgentConfig(provider=ScriptedProvider([]), checkpoint=settings))
    agent.restore_latest_checkpoint()
    assert agent.state.turn == 41
    assert store.state_at("t") == store.replay_state("t")  # the store keeps the library steps


def test_a_migrator_can_ask_for_a_rebuild_from_the_events(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A checkpoint migrator raising StaleSnapshotError makes the restore replay the
    events, and says so in a log line."""
    state = talk(store).state
    put_snapshot(store, "t", lambda payload: payload.pop("_v"))

    def stale(state: dict[str, Any]) -> dict[str, Any]:
        raise StaleSnapshotError("these snapshots predate our message format")

    settings = CheckpointSettings(store=store, thread_id="t", migrators={0: stale})
    agent = Agent(AgentConfig(provider=ScriptedProvider([]), checkpoint=settings))
    with caplog.at_level(logging.INFO, logger="covonaut_es"):
        agent.restore_latest_checkpoint()
    assert agent.state == state
    assert "predate our message format; rebuilding the thread from its events" in caplog.text


def test_a_snapshot_newer_than_the_code_is_an_error(store_url: str) -> None:
    """A snapshot written by newer code is refused, not passed over, naming the
    type and both versions; the thread's events are left as they were."""
    with open_store(store_url) as store:
        state = talk(store).state
        put_snapshot(store, "t", lambda payload: payload.update(_v=99))
        current = AgentThread.class_version
        refused = rf"ThreadSnapshot data has schema version 99.*up to version {current}"
        with pytest.raises(SchemaVersionError, match=refused):
            store.load("t")
        assert store.replay_state("t") == state


def test_checkpoint_migrators_for_steps_that_do_not_exist_are_refused(store: Store) -> None:
    """A migrator keyed by a version the snapshots never had is a ConfigurationError."""
    with pytest.raises(ConfigurationError, match=r"CheckpointSettings\.migrators: 5 is not a step"):
        CheckpointSettings(store=store, migrators={5: lambda state: state})
