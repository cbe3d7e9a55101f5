"""Audit replay and verification: summaries from the log alone, a hash chain that
shows tampering, checkpoints and snapshots checked against a replay."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import psycopg
import pytest
from eventsourcing.persistence import StoredEvent
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    ScriptedProvider,
    Store,
    Tool,
    ToolContext,
    open_store,
)
from covonaut_es.audit import export_thread, import_threads
from covonaut_es.domain import AgentThread, CheckpointReason, thread_aggregate_id
from covonaut_es.errors import (
    ConfigurationError,
    MissingToolCallError,
    StoredRowError,
    ThreadConflictError,
    ToolCallsInDoubtError,
    TransferError,
)
from covonaut_es.messages import Message
from covonaut_es.service import ThreadService
from covonaut_es.store import _zstd
from covonaut_es.store._chain import UNCHAINED, chain_hash, scheme_of
from covonaut_es.store._snapshot_seals import unsealed
from covonaut_es.store._topic_codes import full_topic
from support import (
    OBJECT_SCHEMA,
    answer,
    call,
    echo_tool,
    review_tool,
    sqlite_key,
    start_bare_run,
    ticking_clock,
)

STARTED_TOPICS = {
    AgentThread.Started.TOPIC,
    AgentThread.StartedWithInput.TOPIC,
    AgentThread.StartedFromState.TOPIC,
}


def conversation(
    store: Store, thread_id: str = "t", turns: int = 3, *, save_on_turn_start: bool = False
) -> Agent:
    """A run of ``turns`` calls of ``echo`` and an answer. With ``save_on_turn_start``
    each turn begins with its own ``TurnStarted``, and each call's intent is a
    ``ToolCalled`` of its own (ADR 0072)."""
    script = [call((f"c{i}", "echo", '{"text": "hello"}')) for i in range(turns)]
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([*script, answer("all done")]),
            tools=[echo_tool(), review_tool()],
            max_turns=200,
            checkpoint=CheckpointSettings(
                store=store, thread_id=thread_id, save_on_turn_start=save_on_turn_start
            ),
            clock=ticking_clock(),
        )
    )
    agent.run("say hello")
    return agent


def long_thread(store: Store, thread_id: str, messages: int) -> AgentThread:
    """A thread of ``messages`` messages with a checkpoint every ten, saved in batches
    of 50 and snapshotted as a run would be, built without a model."""
    now = datetime.now(UTC)
    thread = AgentThread.start(thread_id, now=now)
    start_bare_run(thread, now=now)
    for i in range(1, messages + 1):
        thread.append_message(Message(role="user", content=f"message {i}"), now=now)
        if i % 10 == 0:
            thread.save_checkpoint(CheckpointReason.MANUAL, retain=0, now=now)
        if i % 50 == 0:
            store.save(thread)
            store.snapshot_if_due(thread)
    store.save(thread)
    return thread


def test_verify_is_one_pass_that_loads_no_state_per_checkpoint(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify() compares each checkpoint and snapshot with the fold as it passes them,
    instead of loading the thread's state at every checkpoint (quadratic in length)."""
    long_thread(store, "long", 400)
    loads: list[int | None] = []
    real_load = store.load

    def counting_load(thread_id: str, version: int | None = None) -> AgentThread:
        loads.append(version)
        return real_load(thread_id, version=version)

    monkeypatch.setattr(store, "load", counting_load)
    report = store.verify("long")
    assert report.ok, report.findings
    assert (report.events, report.checkpoints_checked) == (442, 40)
    assert report.snapshots_checked >= 1  # the database back ends keep only the newest
    # The checkpoints' list, and the state a load gives at the head the pass reached.
    assert loads == [None, 442]


@pytest.mark.parametrize("compress", [False, True])
def test_verify_decrypts_and_decodes_each_stored_record_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compress: bool
) -> None:
    """Each record verify reads (its pass over the events, and the loads it compares)
    is decrypted and decoded once, not once for its chain link and again for its event."""
    from covonaut_es import create_cipher_key

    url = f"sqlite:///{tmp_path / 'secret.db'}"
    with open_store(url, cipher_key=create_cipher_key(), compress=compress) as store:
        conversation(store, turns=5)
        mapper = store._records.mapper
        reads: dict[int, int] = {}
        seen: list[StoredEvent] = []  # every record kept alive, so that no id is reused
        real_plain = mapper.plain_payload

        def counting_plain(record: StoredEvent) -> bytes:
            seen.append(record)
            reads[id(record)] = reads.get(id(record), 0) + 1
            return real_plain(record)

        monkeypatch.setattr(mapper, "plain_payload", counting_plain)
        records: list[StoredEvent] = []
        real_iter = store._records.iter_stored_records

        def kept(thread_id: str, *, lte: int | None = None) -> Any:
            for record in real_iter(thread_id, lte=lte):
                records.append(record)
                yield record

        monkeypatch.setattr(store._records, "iter_stored_records", kept)
        report = store.verify("t")
    assert report.ok, report.findings
    assert len(records) == report.events > 10
    assert [reads.get(id(record)) for record in records] == [1] * len(records)


def test_replay_reads_the_log_with_versions_times_and_summaries(store: Store) -> None:
    """replay() yields every event with version, time and a one-line summary, and never
    calls a model or a tool (the store alone is enough)."""
    agent = conversation(store)
    entries = list(store.replay("t"))
    assert [e.version for e in entries] == list(range(1, agent.state.version + 1))
    assert all(e.thread_id == "t" for e in entries)
    kinds = [e.kind for e in entries]
    assert kinds[:2] == ["StartedWithInput", "TurnAnsweredWithCalls"]
    summaries = {e.kind: e.summary for e in entries}
    assert summaries["StartedWithInput"] == ("thread 't' started; run started with user: say hello")
    assert summaries["TurnAnswered"] == "turn 4: assistant: all done"
    assert summaries["TurnAnsweredWithCalls"] == (
        "turn 3: assistant: [calls echo], each call's intent recorded"
    )
    assert summaries["ToolResultCheckpointed"] == (
        'echo succeeded: {"echo":"hello"}, checkpoint saved (turn_end)'
    )
    assert summaries["RunFinishedCheckpointed"] == (
        "answered: all done, checkpoint saved (turn_end)"
    )
    conversation(store, "stepped", turns=1, save_on_turn_start=True)
    stepped = {e.kind: e.summary for e in store.replay("stepped")}
    assert stepped["ToolCalled"] == 'intent to call echo({"text": "hello"})'
    times = [e.recorded_at for e in entries]
    assert times == sorted(times)


def test_replay_of_a_fork_names_the_thread_of_each_event(store: Store) -> None:
    """A fork's inherited events are attributed to the parent."""
    conversation(store, "root", 1)
    fork = store.fork("root", at_version=5, new_thread_id="f")
    entries = list(store.replay(fork))
    assert {e.thread_id for e in entries[:5]} == {"root"}
    assert entries[5].summary == "forked from 'root' at version 5"


def test_verify_passes_on_an_intact_thread_and_fork(store: Store) -> None:
    """verify() finds nothing on untouched threads, forks included."""
    conversation(store, "root", 40)  # long enough for snapshots
    store.fork("root", at_version=30, new_thread_id="f")
    for thread_id in ("root", "f"):
        report = store.verify(thread_id)
        assert report.ok, report.findings
        assert report.chained == report.events
        assert report.checkpoints_checked > 0
        assert not report.notes  # the head is anchored on every store
    assert store.verify("root").snapshots_checked >= 1


def tamper_sqlite(db: Path, version: int, change: Any) -> None:
    with sqlite3.connect(db) as conn:
        rowid, state = conn.execute(
            "SELECT rowid, state FROM stored_events WHERE originator_version = ?", (version,)
        ).fetchone()
        conn.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", (change(state), rowid))


def test_tampering_with_one_sqlite_record_is_reported_at_its_version(tmp_path: Path) -> None:
    """Altering one stored event's bytes breaks the hash chain exactly there."""
    db = tmp_path / "threads.db"
    with open_store(f"sqlite:///{db}", compress=False) as store:  # text a writer can edit
        conversation(store)
    tamper_sqlite(db, 7, lambda state: state.replace(b"hello", b"HELLO"))  # the last result
    with open_store(f"sqlite:///{db}") as store:
        report = store.verify("t")
    assert not report.ok
    assert [f.version for f in report.findings] == [7]
    assert "hash chain broken" in report.findings[0].problem
    assert report.chained == 6


def test_an_unreadable_record_is_reported_not_raised(tmp_path: Path) -> None:
    """Bytes that no longer decode are a finding at their version."""
    db = tmp_path / "threads.db"
    with open_store(f"sqlite:///{db}") as store:
        conversation(store)
    tamper_sqlite(db, 7, lambda state: b"\x00" + state)
    with open_store(f"sqlite:///{db}") as store:
        report = store.verify("t")
    assert [f.version for f in report.findings] == [7]
    assert "unreadable" in report.findings[0].problem


def test_a_record_nested_deeper_than_the_decoder_follows_is_reported_not_raised(
    tmp_path: Path,
) -> None:
    """A record rewritten to nest deeper than msgspec recurses is a finding too."""
    db = tmp_path / "threads.db"
    with open_store(f"sqlite:///{db}") as store:
        conversation(store)
    tamper_sqlite(db, 7, lambda state: b'{"x": ' + b"[" * 100_000)
    with open_store(f"sqlite:///{db}") as store:
        report = store.verify("t")
    assert [f.version for f in report.findings] == [7]
    assert "unreadable" in report.findings[0].problem


def test_tampering_with_postgres_is_reported(postgres_database: str) -> None:
    """The same on PostgreSQL."""
    with open_store(postgres_database, compress=False) as store:
        conversation(store)
    with psycopg.connect(postgres_database) as conn:
        conn.execute(
            "UPDATE covonaut_events SET state = convert_to(replace("
            "convert_from(state, 'UTF8'), 'hello', 'HELLO'), 'UTF8') WHERE originator_version = 7"
        )
    with open_store(postgres_database) as store:
        assert [f.version for f in store.verify("t").findings] == [7]


def test_a_snapshot_that_disagrees_with_the_events_is_reported(tmp_path: Path) -> None:
    """A stored snapshot whose state differs from the replay is a finding."""
    db = tmp_path / "threads.db"
    with open_store(f"sqlite:///{db}") as store:
        conversation(store, turns=40)
    with sqlite3.connect(db) as conn:
        version, state = conn.execute(
            "SELECT originator_version, state FROM stored_snapshots LIMIT 1"
        ).fetchone()
        # Written unsealed, as before seals: a store with no key trusts such a snapshot
        # as far as its chain head goes, which this one keeps.
        body = unsealed(state)[1]
        payload = msgspec.msgpack.decode(_zstd.decompress(body, limit=len(body) * 100))
        for record in [payload["state"], *payload["state"]["checkpoints"]]:
            record["turn"] += 100
        conn.execute(
            "UPDATE stored_snapshots SET state = ? WHERE originator_version = ?",
            (_zstd.compress(msgspec.msgpack.encode(payload)), version),
        )
    with open_store(f"sqlite:///{db}") as store:
        report = store.verify("t")
    differs = "snapshot state differs from the state replayed from events in: turn, checkpoints"
    assert [f.version for f in report.findings if f.problem == differs] == [version]
    # the one snapshot kept is the head's: the checkpoint records and the head state
    # read through it differ too, and are reported
    others = {f.problem.split()[0] for f in report.findings if f.problem != differs}
    assert others == {"checkpoint", "the"}


@pytest.mark.parametrize("compress", [False, True])
def test_verify_works_through_encryption(tmp_path: Path, compress: bool) -> None:
    """The chain is computed over the plaintext payload, so it verifies under a cipher,
    with the thread's compressed snapshot checked too; the thread exports and imports
    into another such store, where it verifies and loads the same."""
    from covonaut_es import create_cipher_key

    url = f"sqlite:///{tmp_path / 'secret.db'}"
    copy_url = f"sqlite:///{tmp_path / 'copy.db'}"
    with (
        open_store(url, cipher_key=create_cipher_key(), compress=compress) as store,
        open_store(copy_url, cipher_key=create_cipher_key(), compress=compress) as copy,
    ):
        conversation(store, turns=40)
        report = store.verify("t")
        assert report.ok and report.snapshots_checked == 1
        assert import_threads(copy, export_thread(store, "t")) == ["t"]
        assert copy.verify("t").ok
        assert copy.load("t").state == store.load("t").state


def forge(store: Store, source: str, target: str, change: Any) -> None:
    """Write ``source``'s records as thread ``target`` after ``change(version, topic,
    payload)``, as someone with write access to the database could. The copy names
    ``target`` in its first event and is sealed again as the store would have sealed
    it (a copy naming ``source`` is a finding), so that ``change`` alone is the attack."""
    records, previous = [], UNCHAINED
    for record in store._records.stored_records(source):
        payload = msgspec.json.decode(store._records.mapper.plain_payload(record))
        version = record.originator_version
        if full_topic(record.topic) in STARTED_TOPICS:
            payload["thread_id"] = target
        if sealed := payload.get("chain", UNCHAINED):
            key = store._records.chain_key if scheme_of(sealed).keyed else None
            payload["chain"] = previous = chain_hash(previous, record.topic, version, payload, key)
        payload = change(version, record.topic, payload)
        state = msgspec.json.encode(payload)
        stream = thread_aggregate_id(target)
        records.append(StoredEvent(stream, version, record.topic, state))
    store._records.insert_records(records)


def test_an_altered_event_whose_chain_was_stripped_with_all_later_ones_is_found(
    store: Store,
) -> None:
    """Removing the hash from the altered event and every later one does not make the
    thread look like one written before tamper evidence: an event without a hash after
    one with a hash is a finding at its version."""
    conversation(store)

    def strip_from_nine(version: int, topic: str, payload: dict[str, Any]) -> dict[str, Any]:
        if version < 9:
            return payload
        payload.pop("chain")
        return {
            k: (v.replace("hello", "HELLO") if isinstance(v, str) else v)
            for k, v in payload.items()
        }

    forge(store, "t", "copy", lambda version, topic, payload: payload)
    assert store.verify("copy").ok
    forge(store, "t", "stripped", strip_from_nine)
    report = store.verify("stripped")
    assert [f.version for f in report.findings] == [9]
    assert "hash chain missing after a chained event" in report.findings[0].problem


def exported(store: Store, thread_id: str, strip_from: int | None) -> list[str]:
    """The thread's export with the chain hash removed from version ``strip_from`` on
    (None: kept), without its trailer, whose chain head the removal would belie (import
    it with ``allow_untrailed``)."""
    lines = []
    for line in list(export_thread(store, thread_id))[:-1]:
        event = json.loads(line)
        if strip_from is not None and event["version"] >= strip_from:
            del event["payload"]["chain"]
        lines.append(json.dumps(event))
    return lines


def test_import_refuses_lines_without_a_chain_hash_unless_told_they_are_legacy(
    store: Store,
) -> None:
    """An export without hashes is refused, naming the line and version, unless the
    caller says it is a trusted export from before tamper evidence; then it imports,
    and verify counts its events as unchained."""
    conversation(store)
    unchained = exported(store, "t", strip_from=1)
    with open_store("memory://") as target:
        with pytest.raises(
            TransferError, match=r"line 1 \(thread 't' version 1\).*allow_unchained"
        ):
            import_threads(target, unchained)
        assert not target.exists("t")
        imported = import_threads(target, unchained, allow_unchained=True, allow_untrailed=True)
        assert imported == ["t"]
        report = target.verify("t")
        assert report.ok and report.unchained == report.events


def test_import_refuses_hashes_stripped_after_chained_lines_even_as_legacy(store: Store) -> None:
    """Lines without a hash after lines with one are an altered export, legacy or not."""
    conversation(store)
    stripped = exported(store, "t", strip_from=6)
    with open_store("memory://") as target:
        for allow in (False, True):
            with pytest.raises(TransferError, match=r"line 6 \(thread 't' version 6\).*removed"):
                import_threads(target, stripped, allow_unchained=allow, allow_untrailed=True)
        assert not target.exists("t")
        whole = exported(store, "t", strip_from=None)
        assert import_threads(target, whole, allow_untrailed=True) == ["t"]
        report = target.verify("t")
        assert report.ok and not report.notes  # imports anchor the head too


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
@pytest.mark.parametrize("which", ["thread", "fork"])
def test_import_refuses_lines_that_name_another_thread_than_their_events(
    store_url: str, keyed: bool, which: str
) -> None:
    """A file whose lines name thread ``Q`` while its events are those of
    ``customer-42`` is refused, on every store and with a chain key too, and nothing is
    written: imported, ``Q``'s tools would act as ``customer-42``."""
    chain_key = "k" * 32 if keyed else None
    with open_store("memory://", chain_key=chain_key) as source:
        conversation(source, thread_id="customer-42")
        source.fork("customer-42", at_version=3, new_thread_id="customer-42-b")
        exported_id = "customer-42" if which == "thread" else "customer-42-b"
        lines = list(export_thread(source, exported_id, with_ancestors=which == "fork"))
    renamed = [line.replace(f'"thread_id":"{exported_id}"', '"thread_id":"Q"', 1) for line in lines]
    assert renamed != lines
    with open_store(store_url, chain_key=chain_key) as target:
        with pytest.raises(TransferError, match="names thread 'Q', but its events are those"):
            import_threads(target, renamed)
        assert list(target.thread_ids()) == []


def test_import_refuses_a_line_that_does_not_decode(store: Store) -> None:
    """A line whose payload no read could decode is refused before anything is written:
    imported, it would break every listing of the store afterwards. (The chain does not
    stop it: an unkeyed chain's hashes are public, and legacy exports have none.)"""
    conversation(store)
    lines = exported(store, "t", strip_from=1)
    broken = json.loads(lines[1])
    broken["payload"]["message"] = 42  # a message that is a number
    lines[1] = json.dumps(broken)
    with open_store("memory://") as target:
        with pytest.raises(TransferError, match=r"line 2 \(thread 't' version 2\) does not decode"):
            import_threads(target, lines, allow_unchained=True)
        assert list(target.thread_ids()) == []


def run_sql(url: str, sqlite_statement: str, postgres_statement: str, stream: str = "") -> None:
    """Run a statement on a store's database behind the library's back; ``{events}`` and
    ``{heads}`` name its tables, and its parameter (if any) is the stream's id."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(
                sqlite_statement.format(events="stored_events", heads="stored_events_heads"),
                (sqlite_key(stream),) if stream else (),
            )
    else:
        with psycopg.connect(url) as conn:
            conn.execute(
                postgres_statement.format(events="covonaut_events", heads="covonaut_events_heads"),
                (stream,) if stream else None,
            )


def delete_sql(url: str, table: str, where: str, stream: str) -> None:
    statement = f"DELETE FROM {{{table}}} WHERE originator_id = ? {where}"
    run_sql(url, statement, statement.replace("?", "%s"), stream)


def test_deleting_the_newest_events_is_found_against_the_head_anchor(shared_url: str) -> None:
    """The newest events deleted leave a stream that still chains; its head anchor,
    written with the events, says where it ended."""
    with open_store(shared_url) as store:
        conversation(store)
        head = store.state_at("t").version
        assert not store.verify("t").notes
    kept = head - 3
    where = f"AND originator_version > {kept}"
    delete_sql(shared_url, "events", where, str(thread_aggregate_id("t")))
    with open_store(shared_url) as store:
        report = store.verify("t")
    assert [f.version for f in report.findings] == [kept]
    assert report.findings[0].problem == (
        f"stream ends at version {kept} but its head was anchored at version {head}: "
        "the newest events were deleted"
    )


_WRITES_AFTER_A_DELETION: dict[str, Callable[[Store, str], object]] = {
    "label": lambda store, thread: ThreadService(store).label(thread, "later"),
    "abandon": lambda store, thread: ThreadService(store).abandon(thread, "not needed"),
    "run": lambda store, thread: Agent(
        AgentConfig(
            provider=ScriptedProvider([answer("again")]),
            checkpoint=CheckpointSettings(store=store, thread_id=thread),
        )
    ).run("once more"),
}


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(deleted=st.integers(1, 3), write=st.sampled_from(sorted(_WRITES_AFTER_A_DELETION)))
def test_no_save_hides_a_deletion_of_the_newest_events(
    shared_url: str, deleted: int, write: str
) -> None:
    """The newest events of a thread deleted behind the library (a recorded rejection
    or abandonment among them), then any write of the thread: it is refused naming the
    stream and both versions, nothing is written, and verify still finds the deletion
    (the save moved the anchor to its own head, and the thread verified intact:
    helper-222)."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    with open_store(shared_url) as store:
        conversation(store, thread)
        head = store.state_at(thread).version
    kept = head - deleted
    stream = str(thread_aggregate_id(thread))
    delete_sql(shared_url, "events", f"AND originator_version > {kept}", stream)
    refused = f"anchored at version {head}, but its stored events end at version {kept}"
    with open_store(shared_url) as store:
        # A thread left with a call in doubt is refused by the thread itself first.
        with pytest.raises((StoredRowError, ToolCallsInDoubtError)) as raised:
            _WRITES_AFTER_A_DELETION[write](store, thread)
        if isinstance(raised.value, StoredRowError):
            assert refused in str(raised.value)
        assert store.state_at(thread).version == kept
        assert not store.verify(thread).ok


def test_deleting_a_threads_head_anchor_is_found_not_taken_for_an_old_store(
    shared_url: str,
) -> None:
    """In a store that anchors heads, a thread without an anchor had it deleted."""
    with open_store(shared_url) as store:
        conversation(store, "t")
        conversation(store, "other")
    delete_sql(shared_url, "heads", "", str(thread_aggregate_id("t")))
    with open_store(shared_url) as store:
        assert "head anchor missing" in store.verify("t").findings[0].problem
        assert store.verify("other").ok


def test_a_store_from_before_head_anchors_verifies_and_is_anchored_when_opened(
    shared_url: str,
) -> None:
    """Without the head table (a store written by older code, opened without creating
    tables), verify passes with a note; opening it normally anchors every thread at
    its present version, after which deleting its newest events is found."""
    with open_store(shared_url) as store:
        conversation(store)
    run_sql(shared_url, "DROP TABLE {heads}", "DROP TABLE {heads}")
    with open_store(shared_url, create_tables=False) as store:
        report = store.verify("t")
        assert report.ok and report.notes[0].startswith("no head anchor")
    with open_store(shared_url) as store:
        report = store.verify("t")
        assert report.ok and not report.notes
    delete_sql(shared_url, "events", "AND originator_version > 8", str(thread_aggregate_id("t")))
    with open_store(shared_url) as store:
        assert "the newest events were deleted" in store.verify("t").findings[0].problem


CHAIN_KEY = "a secret of thirty-two characters"


def resealed_from(first: int) -> Any:
    """A forge change altering the events from version ``first`` on and sealing them
    again with the public hash function, as a writer without the chain key can."""
    previous = [""]

    def change(version: int, topic: str, payload: dict[str, Any]) -> dict[str, Any]:
        if version >= first:
            payload = {
                k: v.replace("hello", "HELLO") if isinstance(v, str) else v
                for k, v in payload.items()
            }
            payload["chain"] = chain_hash(previous[0], topic, version, payload)
        previous[0] = payload["chain"]
        return payload

    return change


def test_a_keyed_chain_verifies_with_its_key_and_only_with_it(
    open_test_store: Callable[..., Store], store_url: str
) -> None:
    """A store opened with a chain key seals every event, forks included, with
    HMAC-SHA256; verify passes with the key and says the key is needed without it."""
    keyed = open_test_store(chain_key=CHAIN_KEY)
    conversation(keyed, "root", 3)
    keyed.fork("root", at_version=5, new_thread_id="f")
    for thread_id in ("root", "f"):
        report = keyed.verify(thread_id)
        assert report.ok, report.findings
        assert report.chained == report.events
    if store_url != "memory://":  # an anonymous memory store is not opened twice
        unkeyed = open_test_store(create_tables=False)  # to write, it needs the key
        report = unkeyed.verify("root")
        assert "open it with chain_key" in report.findings[0].problem
        assert "keyed seals cannot be checked" in report.notes[0]


@pytest.mark.parametrize("first", [1, 9])
def test_events_resealed_without_the_chain_key_are_found(
    open_test_store: Callable[..., Store], store_url: str, first: int
) -> None:
    """A writer without the key who alters events and seals them again with the public
    hash is found: after keyed events, or at the first event when the whole thread was
    redone (the store adopted its key before the thread began)."""
    store = open_test_store(chain_key=CHAIN_KEY)
    conversation(store)
    forge(store, "t", "resealed", resealed_from(first))
    report = store.verify("resealed")
    assert [f.version for f in report.findings] == [first]
    if first == 1:
        assert "after the store adopted it" in report.findings[0].problem
    else:
        assert "re-sealed by someone without the key" in report.findings[0].problem
    if store_url != "memory://":  # an anonymous memory store is not opened twice
        unkeyed = open_test_store(create_tables=False)  # a rewrite from the start passes
        assert unkeyed.verify("resealed").ok is (first == 1)


def test_a_short_chain_key_is_refused() -> None:
    """A chain key must be a secret, not a word."""
    with pytest.raises(ConfigurationError, match="at least 16 characters, found 5"):
        open_store("memory://", chain_key="short")


@settings(max_examples=40, deadline=None)
@given(
    key=st.one_of(
        st.binary(min_size=16),
        st.integers(),
        st.lists(st.text(min_size=16), max_size=2),
        st.builds(
            lambda text, at: text[:at] + "\udcff" + text[at:],
            st.text(min_size=16, max_size=40),
            st.integers(0, 40),
        ),
    )
)
def test_a_chain_key_that_is_no_text_is_refused_by_name_and_never_shown(key: object) -> None:
    """A chain key of another type, or a str holding a lone surrogate (bytes that are
    no UTF-8, read from a variable), is a ConfigurationError naming ``chain_key``,
    never the cipher key's error or an untyped one, and the key is never shown."""
    with pytest.raises(ConfigurationError, match=r"^chain_key ") as refused:
        open_store("memory://", chain_key=key)  # type: ignore[arg-type]  # what is tried
    if isinstance(key, str | bytes):
        assert str(key)[:16] not in str(refused.value)


MESSAGE_TOPICS = (AgentThread.MessageAppended.TOPIC, AgentThread.TurnAnswered.TOPIC)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_call_removed_from_its_message_fails_the_load_and_is_a_finding(
    kind: str, tmp_path: Path
) -> None:
    """ToolCalled names its call by id: when a writer removes the call from the message
    that asked for it and seals the chain again, a load raises MissingToolCallError
    naming the call, verify reports it at the ToolCalled, and replay says so."""
    url = "memory://" if kind == "memory" else f"sqlite:///{tmp_path}/t.db"
    with open_store(url) as store:
        conversation(store, turns=1, save_on_turn_start=True)
        previous = [""]

        def drop_calls(version: int, topic: str, payload: dict[str, Any]) -> dict[str, Any]:
            if full_topic(topic) in (
                AgentThread.MessageAppended.TOPIC,
                AgentThread.TurnAnswered.TOPIC,
            ):
                payload["message"]["tool_calls"] = []
            payload["chain"] = previous[0] = chain_hash(previous[0], topic, version, payload)
            return payload

        forge(store, "t", "forged", drop_calls)
        called = next(e for e in store.history("t") if isinstance(e, AgentThread.ToolCalled))
        with pytest.raises(MissingToolCallError, match="records tool call 'c0', but no") as info:
            store.replay_state("forged")
        assert (info.value.tool_call_id, info.value.version) == ("c0", called.originator_version)
        finding = store.verify("forged").findings[0]
        assert finding.version == called.originator_version
        assert "event does not apply" in finding.problem
        summaries = [e.summary for e in store.replay("forged") if e.kind == "ToolCalled"]
        assert summaries == ["intent to call c0, which no assistant message asked for"]


@settings(max_examples=12, deadline=None)
@given(role=st.sampled_from(["user", "system", "tool"]), turns=st.integers(0, 2))
def test_a_turn_answered_by_other_than_the_model_fails_the_load_and_is_a_finding(
    role: str, turns: int
) -> None:
    """A ``TurnAnswered`` is the model's answer: when a writer gives one another role
    and seals the chain again, a load raises StoredRowError at it and verify reports it
    there (the library never writes one: ``answer_turn`` takes an assistant's alone)."""
    with open_store("memory://") as store:
        conversation(store, turns=turns)
        answered = [e for e in store.history("t") if isinstance(e, AgentThread.TurnAnswered)]
        forged_at = answered[-1].originator_version
        message = f"assistant message, not a {role} one"
        refused_where_resealed(store, forged_at, lambda payload: payload.update(role=role), message)


@settings(max_examples=12, deadline=None)
@given(
    role=st.sampled_from(["assistant", "system", "tool"]) | st.none(),
    mode=st.sampled_from(["continue", "resume"]) | st.none(),
    first=st.booleans(),
)
def test_a_run_started_with_other_than_a_users_input_fails_the_load_and_is_a_finding(
    role: str | None, mode: str | None, first: bool
) -> None:
    """A ``RunStartedWithInput`` is a ``run()`` given a user's message, and so is a new
    thread's ``StartedWithInput``: when a writer gives either another role or another
    mode and seals the chain again, a load raises StoredRowError at it and verify
    reports it there (``start_run`` takes a user's message for a ``run`` alone)."""
    assume(role is not None or mode is not None)
    with open_store("memory://") as store:
        conversation(store, turns=0)
        Agent(
            AgentConfig(
                provider=ScriptedProvider([answer("more")]),
                checkpoint=CheckpointSettings(store=store, thread_id="t"),
                clock=ticking_clock(),
            )
        ).run("say more")
        starts = [e for e in store.history("t") if isinstance(e, AgentThread.RunStartedWithInput)]
        assert [type(e) for e in starts] == [
            AgentThread.StartedWithInput,
            AgentThread.RunStartedWithInput,
        ]
        started = starts[0 if first else 1]

        def edit(payload: dict[str, Any]) -> None:
            if role is not None:
                payload["message"]["role"] = role
            if mode is not None:
                payload["mode"] = mode

        message = "a run started with input is a run given a user's message"
        refused_where_resealed(store, started.originator_version, edit, message, part=None)


def refused_where_resealed(
    store: Store,
    at: int,
    edit: Callable[[dict[str, Any]], None],
    message: str,
    *,
    part: str | None = "message",
) -> None:
    """Thread ``t`` copied as ``forged`` with ``edit`` made to the ``part`` (None: the
    whole payload) of its event at version ``at`` and the chain sealed again: a load
    raises StoredRowError matching ``message``, and verify's first finding is at that
    event."""
    previous = [""]

    def alter(version: int, topic: str, payload: dict[str, Any]) -> dict[str, Any]:
        if version == at:
            edit(payload if part is None else payload[part])
        payload["chain"] = previous[0] = chain_hash(previous[0], topic, version, payload)
        return payload

    forge(store, "t", "forged", alter)
    with pytest.raises(StoredRowError, match=message):
        store.replay_state("forged")
    finding = store.verify("forged").findings[0]
    assert finding.version == at
    assert "does not apply" in finding.problem


@settings(max_examples=12, deadline=None)
@given(data=st.data(), retain=st.integers(max_value=-1))
def test_a_checkpoint_told_to_keep_fewer_than_none_fails_the_load_and_is_a_finding(
    data: st.DataObject, retain: int
) -> None:
    """An event that saves a checkpoint keeps the newest ``retain`` (0: all): a writer
    who makes it negative and seals the chain again would have every checkpoint
    forgotten; a load raises StoredRowError at it and verify reports it there."""
    with open_store("memory://") as store:
        conversation(store, turns=1).save_checkpoint()  # a CheckpointSaved too
        savers = [e for e in store.history("t") if e.checkpoint_reason is not None]
        forged_at = data.draw(st.sampled_from(savers)).originator_version
        refused_where_resealed(
            store,
            forged_at,
            lambda payload: payload.update(retain=retain),
            f"version {forged_at} does not apply",
            part=None,
        )


class _Killed(BaseException):
    """The process dying while a tool runs."""


def _calls_left_in_doubt(store: Store, calls: int) -> None:
    """Thread ``t``: an answered call, then an answer asking for ``calls`` calls, the
    first of which kills the process as it runs: they are left in doubt."""

    def note(ctx: ToolContext, args: dict[str, Any]) -> str:
        if ctx.tool_call_id != "p0":
            raise _Killed
        return "noted"

    asked = tuple((f"c{i}", "note", "{}") for i in range(calls))
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([call(("p0", "note", "{}")), call(*asked)]),
            tools=[Tool("note", "Note", OBJECT_SCHEMA, note)],
            checkpoint=CheckpointSettings(store=store, thread_id="t"),
            clock=ticking_clock(),
        )
    )
    with pytest.raises(_Killed):
        agent.run("go")


_ID_EDITS: dict[str, Callable[[list[dict[str, Any]], int], None]] = {
    "every call taken out": lambda calls, i: calls.clear(),
    "an id emptied": lambda calls, i: calls[i].update(id=""),
    "an id repeated": lambda calls, i: calls[i].update(id=calls[i - 1]["id"]),
    "a call repeated": lambda calls, i: calls.append(dict(calls[i])),
    "an id of a review id's form": lambda calls, i: calls[i].update(id="ab" * 16),
}


@settings(max_examples=30, deadline=None)
@given(edit=st.sampled_from(sorted(_ID_EDITS)), calls=st.integers(1, 3), which=st.integers(0, 2))
def test_an_answer_whose_calls_the_library_would_not_record_fails_the_load_and_is_a_finding(
    edit: str, calls: int, which: int
) -> None:
    """A ``TurnAnsweredWithCalls`` opens each call its answer asks for: when a writer
    alters the calls of one whose calls are in doubt (so that no later result gives it
    away) into calls the library never records (none, an empty or repeated id, one of a
    review id's form) and seals the chain again, a load raises StoredRowError at it and
    verify reports it there, instead of the calls in doubt reading as other calls
    (``answer_turn_calling`` refuses such an answer too). Taking out some of the calls,
    giving the row another class's code, or an id an earlier call's result has (which a
    fold does not look for: ADR 0072) leave an answer that reads as written: only a
    chain key shows those edits."""
    with open_store("memory://") as store:
        _calls_left_in_doubt(store, calls)
        answers = [
            e for e in store.history("t") if isinstance(e, AgentThread.TurnAnsweredWithCalls)
        ]
        forged_at = answers[-1].originator_version

        def alter(message: dict[str, Any]) -> None:
            asked = message["tool_calls"]
            if edit != "an id repeated" or len(asked) > 1:
                _ID_EDITS[edit](asked, which % len(asked))
            else:  # one call: repeated with its own id
                _ID_EDITS["a call repeated"](asked, 0)

        refused_where_resealed(store, forged_at, alter, f"version {forged_at} does not apply")


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_verify_reports_every_deletion_and_never_raises(
    shared_url: str, data: st.DataObject
) -> None:
    """Events deleted anywhere in a thread's stream (the first, the newest, one,
    several) are reported from the first version lost, in the thread and in a fork that
    inherits it; verify never raises, and the command line's verification exits 1."""
    thread_id = f"t{uuid.uuid4().hex[:8]}"
    with open_store(shared_url) as store:
        conversation(store, thread_id=thread_id)
        fork = store.fork(thread_id, at_version=4, new_thread_id=f"{thread_id}-fork")
        top = store.state_at(thread_id).version
    lost = data.draw(st.sets(st.integers(1, top), min_size=1, max_size=3))
    first = min(lost)
    versions = ", ".join(str(v) for v in sorted(lost))
    stream = str(thread_aggregate_id(thread_id))
    delete_sql(shared_url, "events", f"AND originator_version IN ({versions})", stream)
    kept_after = any(v > first and v not in lost for v in range(1, top + 1))
    with open_store(shared_url) as store:
        report = store.verify(thread_id)
        # A gap is reported where it starts; the newest events gone, by the head anchor.
        assert report.findings[0].version == (first if kept_after else first - 1), report
        fork_report = store.verify(fork)
        assert fork_report.ok is (first > 4), fork_report
        if first <= 4:
            assert fork_report.findings[0].version == first, fork_report
    result = subprocess.run(
        [sys.executable, "-m", "covonaut_es", "replay", "--verify", "--store", shared_url,
         thread_id],
        capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent / "src")},
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr


def test_the_imports_write_appends_to_no_thread_and_keeps_each_record_in_its_stream(
    store: Store,
) -> None:
    """``store.log.insert_threads``, the import's write, writes new threads only:
    records that would append to a stored thread (whose lease another runner may hold)
    are refused with ThreadConflictError, and a record outside its thread's stream with
    TransferError naming it; nothing is written (helper-167)."""
    conversation(store, "t1", turns=1)
    head = store.head_version("t1")
    assert head is not None
    last = store.log.stored_records("t1")[-1]
    end = store.last_log_position()
    plain = store.log.mapper.plain_payload(last)
    appended = StoredEvent(thread_aggregate_id("t1"), head + 1, last.topic, plain)
    with pytest.raises(ThreadConflictError, match="nothing was written"):
        store.log.insert_threads({"t1": [appended]})
    with pytest.raises(TransferError, match=r"'t2'.*not the thread's"):
        store.log.insert_threads({"t2": [appended]})
    assert store.head_version("t1") == head
    assert store.last_log_position() == end


_HOSTILE_FIELDS = st.one_of(
    st.tuples(
        st.just("originator_id"),
        st.one_of(st.none(), st.text(max_size=40), st.integers(), st.uuids(), st.binary()),
    ),
    st.tuples(
        st.just("originator_version"),
        st.one_of(
            st.none(),
            st.text(max_size=5),
            st.booleans(),
            st.floats(),
            st.integers(max_value=0),
            st.integers(min_value=2**63),
        ),
    ),
    st.tuples(
        st.just("topic"),
        st.one_of(
            st.none(), st.binary(max_size=20), st.text(max_size=40), st.just("\ud800"), st.just("")
        ),
    ),
    st.tuples(
        st.just("state"),
        st.one_of(st.none(), st.text(max_size=20), st.binary(max_size=40), st.integers()),
    ),
)
"""A column of a record and a value no record of a thread may hold there: no stream,
no version from 1 to 2**63-1, no event type, no payload's bytes of the event."""


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(hostile=_HOSTILE_FIELDS, spoiled=st.integers(min_value=0, max_value=5))
def test_the_imports_write_refuses_a_record_no_read_could_decode(
    store: Store, hostile: tuple[str, object], spoiled: int
) -> None:
    """``store.log.insert_threads`` given a thread's records, one of which holds a value
    no record may hold in one column (a stream that is no UUID, a version that is no
    integer from 1 to 2**63-1, a topic that is no event type, a payload that is no bytes
    of the event's JSON), raises TransferError naming the thread, and writes none of
    them. It raised ValueError, TypeError, AttributeError, OverflowError and
    UnicodeEncodeError, or wrote version "1", version 0, a payload that was no JSON or
    no topic, a thread every read then refused (helper-170, helper-171)."""
    if store.head_version("t1") is None:
        conversation(store, "t1", turns=1)
    stream = thread_aggregate_id("copy")
    records = [
        StoredEvent(stream, r.originator_version, r.topic, store.log.mapper.plain_payload(r))
        for r in store.log.stored_records("t1")
    ]
    index = spoiled % len(records)
    column, value = hostile
    records[index] = dataclasses.replace(records[index], **{column: value})
    end = store.last_log_position()
    with pytest.raises(TransferError, match=r"'copy'.*nothing was written"):
        store.log.insert_threads({"copy": records})
    assert store.last_log_position() == end
    assert "copy" not in set(store.thread_ids())


@pytest.mark.parametrize("past", [1, 12])
def test_a_snapshot_row_planted_past_the_head_is_reported(tmp_path: Path, past: int) -> None:
    """A snapshot row written around the library past the thread's head is reported
    (it matches no event): the pass reads snapshots up to the head anchored as it began,
    and passes over one past it only if the stream, read again, reaches its version (a
    snapshot a save took meanwhile). It was passed over whatever its version
    (helper-236)."""
    db = tmp_path / "threads.db"
    with open_store(f"sqlite:///{db}") as store:
        conversation(store, turns=40)
        head = store.head_version("t")
        assert store.verify("t").findings == ()
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.execute(
            "INSERT INTO stored_snapshots SELECT originator_id, ?, topic, state "
            "FROM stored_snapshots WHERE originator_version = "
            "(SELECT max(originator_version) FROM stored_snapshots)",
            (head + past,),
        )
    with open_store(f"sqlite:///{db}") as store:
        report = store.verify("t")
    assert head + past in {finding.version for finding in report.findings}, report
