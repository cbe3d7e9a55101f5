"""The library's schema registry, check_upcasters(), and golden fixtures of older data."""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from eventsourcing.persistence import StoredEvent
from hypothesis import given
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    FileStateStore,
    Message,
    Role,
    ScriptedProvider,
    Store,
    ThreadStatus,
    ToolCall,
    open_store,
)
from covonaut_es.audit import check_store
from covonaut_es.domain import Interrupt, ThreadSnapshot, thread_aggregate_id
from covonaut_es.domain._calls import event_key
from covonaut_es.errors import MissingUpcasterError
from covonaut_es.messages import Usage
from covonaut_es.migrations import Schema, check_upcasters
from covonaut_es.migrations._registry import event_classes, registry
from covonaut_es.store import StateStore
from covonaut_es.store._mapper import MsgspecMapper
from covonaut_es.store._topic_codes import full_topic
from support import ERROR_KINDS, answer, error_of, golden_database, put_raw_snapshot


def test_the_librarys_registry_has_every_step() -> None:
    """check_upcasters() passes for the registry this code ships (run by the suite)."""
    check_upcasters()


def test_the_registry_covers_every_stored_type() -> None:
    """Every event type, the snapshot and the state document have a schema."""
    names = {schema.name for schema in registry()}
    assert {cls.__qualname__ for cls in event_classes()} <= names
    assert {"ThreadSnapshot", "StateDocument"} <= names


def test_check_upcasters_names_every_gap() -> None:
    """A registry with gaps raises MissingUpcasterError naming each type and step."""
    schemas = [Schema("A", 3, {2: lambda d: {**d, "_v": 3}}), Schema("B", 2), Schema("C", 1)]
    with pytest.raises(MissingUpcasterError, match=r"A 1 -> 2, B 1 -> 2;"):
        check_upcasters(schemas)


def test_a_version_bumped_without_its_upcaster_fails_when_a_store_opens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A class_version raised without an upcaster is refused before any data is read,
    not when old data turns up."""
    monkeypatch.setattr(AgentThread.TurnStarted, "class_version", 2, raising=False)
    with pytest.raises(MissingUpcasterError, match=r"AgentThread.TurnStarted 1 -> 2"):
        open_store("memory://")


NOW = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
ID = thread_aggregate_id("t")
texts = st.text(max_size=12)
messages = st.builds(
    Message,
    role=st.sampled_from(Role),
    content=texts,
    tool_calls=st.lists(st.builds(ToolCall, id=texts, name=texts, arguments=texts), max_size=2).map(
        tuple
    ),
    name=st.none() | texts,
)
usages = st.none() | st.builds(Usage, st.integers(0, 2**40), st.integers(0, 2**40))


@given(message=messages, usage=usages)
def test_upcast_then_load_equals_load_of_fresh_data(message: Message, usage: Usage | None) -> None:
    """A MessageAppended as v1 code wrote it (usage beside the message) reads as the
    event this code writes for the same answer (usage inside the message)."""
    written_by_v1 = {
        "timestamp": NOW.isoformat(),
        "message": msgspec.to_builtins(message),
        "usage": msgspec.to_builtins(usage),
        "_v": 1,
    }
    record = StoredEvent(
        ID, 2, AgentThread.MessageAppended.TOPIC, msgspec.json.encode(written_by_v1)
    )
    fresh = AgentThread.MessageAppended(
        originator_id=ID,
        originator_version=2,
        timestamp=NOW,
        message=msgspec.structs.replace(message, usage=usage),
    )
    mapper = MsgspecMapper()
    assert mapper.to_domain_event(record) == fresh
    assert mapper.to_domain_event(mapper.to_stored_event(fresh)) == fresh


# Golden fixtures: data written by the older code (tests/fixtures/write_golden.py) ------

GOLDEN = Path(__file__).parent / "fixtures" / "golden"
REVIEW = Interrupt("payment needs a review", {"amount": 40}, "r1", "review")


@pytest.fixture
def golden_v1(store_url: str, open_test_store: Callable[..., Store]) -> Store:
    """The v1 golden store on each kind of store."""
    return golden_store("v1", store_url, open_test_store)


@pytest.fixture
def golden_v2(store_url: str, open_test_store: Callable[..., Store]) -> Store:
    """The v2 golden store (JSON snapshots, tool calls recorded with their arguments)
    on each kind of store."""
    return golden_store("v2", store_url, open_test_store)


def golden_store(name: str, store_url: str, open_test_store: Callable[..., Store]) -> Store:
    """A golden store on each kind of store: the SQLite file itself, or its records
    copied byte for byte into a memory or PostgreSQL store, which records no compression
    as the golden one was written."""
    fixture = GOLDEN / name / "threads.db"
    if store_url.startswith("sqlite"):
        shutil.copyfile(fixture, store_url.removeprefix("sqlite:///"))
        return open_test_store()
    store = open_test_store(compress="none")
    with tempfile.TemporaryDirectory() as directory:
        shutil.copyfile(fixture, Path(directory) / "threads.db")
        with open_store(f"sqlite:///{directory}/threads.db", create_tables=False) as source:
            copy_records(source, store)
    return store


def copy_records(source: Store, target: Store) -> None:
    records = list(source._records.all_stored_records())
    events = [r for r in records if full_topic(r.topic) != ThreadSnapshot.TOPIC]
    snapshots = [r for r in records if full_topic(r.topic) == ThreadSnapshot.TOPIC]
    target._app.recorder.insert_events([copy(r) for r in events])
    for snapshot in snapshots:
        put_raw_snapshot(target, copy(snapshot))


def copy(record: StoredEvent) -> StoredEvent:
    return StoredEvent(record.originator_id, record.originator_version, record.topic, record.state)


def test_golden_v1_threads_upgrade_field_by_field(
    golden_v1: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """The v1 store's threads load with per-message usage moved into their messages;
    the v1 snapshot is rebuilt from the events, and says so."""
    with caplog.at_level(logging.INFO, logger="covonaut_es"):
        long = golden_v1.state_at("golden-long")
    assert "ThreadSnapshot v1 predates per-message usage" in caplog.text
    assert (long.status, long.turn, long.interrupts, long.open_calls) == (
        ThreadStatus.FINISHED,
        25,
        (),
        (),
    )
    assert long.messages[0] == Message(Role.USER, "Echo every step.")
    for i in range(24):
        asked, answered = long.messages[1 + 2 * i], long.messages[2 + 2 * i]
        assert asked.tool_calls == (ToolCall(f"e{i}", "echo", f'{{"text": "step {i}"}}'),)
        assert asked.usage == Usage(10 + i, 1)
        assert answered == Message(
            Role.TOOL, f'{{"echo":"step {i}"}}', tool_call_id=f"e{i}", name="echo"
        )
    assert long.messages[-1] == Message(Role.ASSISTANT, "All steps echoed.", usage=Usage(50, 5))
    assert long.usage == Usage(sum(range(10, 34)) + 50, 24 + 5)
    assert [c.sequence for c in long.checkpoints] == list(range(1, 26))

    review = golden_v1.state_at("golden-review")
    assert (review.status, review.turn, review.usage) == (
        ThreadStatus.INTERRUPTED,
        2,
        Usage(27, 7),
    )
    assert review.interrupts == (REVIEW,)
    assert [(m.role, m.content, m.usage) for m in review.messages] == [
        (Role.SYSTEM, "You pay invoices carefully.", None),
        (Role.USER, "Is the invoice in?", None),
        (Role.ASSISTANT, "Checking the invoice first.", Usage(7, 3)),
        (Role.USER, "The invoice is in.", None),
        (Role.ASSISTANT, "", Usage(20, 4)),
        (Role.TOOL, review.messages[5].content, None),
    ]
    assert review.messages[5].content.startswith("Paused for review: payment needs a review.")


def test_golden_v1_threads_audit_intact_across_the_upgrade(golden_v1: Store) -> None:
    """The hash chains written by the older code still verify: upcasting happens after
    the audit reads the stored payloads, so a migration never looks like tampering."""
    for thread_id in ("golden-long", "golden-review"):
        report = golden_v1.verify(thread_id)
        assert report.ok, report.findings
        assert report.chained == report.events


def test_golden_v1_thread_resumes_to_a_final_answer(golden_v1: Store) -> None:
    """A thread paused by the older code is restored, steered and resumed by this code;
    what it appends is written at the current versions."""
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([answer("Paid.", tokens=2)]),
            checkpoint=CheckpointSettings(store=golden_v1, thread_id="golden-review"),
        )
    )
    agent.restore_latest_checkpoint()
    agent.steer("Approved by the reviewer.")
    assert agent.resume() == "Paid."
    assert agent.messages[-1].usage == Usage(2, 2)
    assert agent.usage == Usage(29, 9)
    assert check_store(golden_v1).counts["AgentThread.MessageAppended", 2] == 1


def test_golden_v2_threads_load_from_their_snapshot_as_from_their_events(
    golden_v2: Store,
) -> None:
    """The long v2 thread restores from the snapshot that code wrote to the very state
    its events make, and its chain still verifies."""
    aggregate_id = thread_aggregate_id("golden-long")
    assert golden_v2._app.snapshots is not None
    assert list(golden_v2._app.snapshots.get(aggregate_id)), "the fixture holds a snapshot"
    restored = golden_v2.load("golden-long")
    replayed: AgentThread | None = None
    for event in golden_v2.history("golden-long"):
        replayed = event.mutate(replayed)
    assert replayed is not None
    assert restored.state == replayed.state
    assert restored.state.messages[-1] == Message(
        Role.ASSISTANT, "All steps echoed.", usage=Usage(50, 5)
    )
    for thread_id in ("golden-long", "golden-review"):
        report = golden_v2.verify(thread_id)
        assert report.ok, report.findings


@pytest.mark.parametrize(
    ("source", "stored_version"),
    [("v0 file", 0), ("v1 file", 1), ("v1 in the store", 1)],
)
def test_golden_state_documents_load_and_continue_to_a_final_answer(
    golden_v1: Store, source: str, stored_version: int
) -> None:
    """The v0 and v1 named states load through this code, field by field, and the new
    thread resumes to a final answer; its first event records the stored version."""
    states: StateStore = golden_v1
    if source.endswith("file"):
        states = FileStateStore(GOLDEN / source.split()[0] / "states")
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider([answer("Paid.")]),
            checkpoint=CheckpointSettings(store=golden_v1, thread_id="unused"),
            state_store=states,
        )
    )
    state = agent.load_state("golden-review", thread_id="continued")
    original = golden_v1.state_at("golden-review")
    assert (state.status, state.turn, state.usage, state.interrupts) == (
        ThreadStatus.INTERRUPTED,
        2,
        Usage(27, 7),
        (REVIEW,),
    )
    # Documents from before per-message usage keep none on their messages.
    assert state.messages == tuple(
        msgspec.structs.replace(m, usage=None) for m in original.messages
    )
    started = golden_v1.history("continued")[0]
    assert isinstance(started, AgentThread.StartedFromState)
    assert (started.stored_version, started.document.thread_id) == (stored_version, "golden-review")
    agent.steer("Approved.")
    assert agent.resume() == "Paid."


def test_a_checkpoint_migrator_can_keep_golden_v1_snapshots(golden_v1: Store) -> None:
    """An application that accepts v1 snapshots without per-message usage replaces
    the library's rebuild with its own 1 -> 2 step, and restores from the snapshot."""
    used: list[int] = []

    def keep(state: dict[str, Any]) -> dict[str, Any]:
        used.append(state["turn"])
        return {**state, "_v": 2}

    settings = CheckpointSettings(store=golden_v1, thread_id="golden-long", migrators={1: keep})
    agent = Agent(AgentConfig(provider=ScriptedProvider([]), checkpoint=settings))
    agent.restore_latest_checkpoint()
    assert used and used[0] < 25
    replayed = golden_v1.replay_state("golden-long")
    assert agent.state.messages[-1] == replayed.messages[-1]  # after the snapshot: from events
    assert agent.state.messages[1].usage is None  # in the snapshot: as the migrator kept it


@pytest.mark.parametrize("returned", [None, 0, 1, 3, 99, True, "2"])
def test_a_checkpoint_migrator_returning_another_version_passes_the_snapshot_over(
    golden_v1: Store, returned: object
) -> None:
    """A snapshot migrator that returns another version than the next (or none) is the
    migrator's mistake, not data from newer code: the snapshot is passed over and the
    thread rebuilt from its events, as the docs promise of a snapshot that cannot be
    upgraded."""

    def wrong(state: dict[str, Any]) -> dict[str, Any]:
        state = {key: value for key, value in state.items() if key != "_v"}
        return state if returned is None else {**state, "_v": returned}

    settings = CheckpointSettings(store=golden_v1, thread_id="golden-long", migrators={1: wrong})
    agent = Agent(AgentConfig(provider=ScriptedProvider([]), checkpoint=settings))
    agent.restore_latest_checkpoint()
    assert agent.state == golden_v1.replay_state("golden-long")


def test_a_checkpoint_migrator_failing_with_any_error_passes_the_snapshot_over(
    golden_v1: Store,
) -> None:
    """A snapshot migrator that raises any error, one of covonaut-es's own included (a
    ConfigurationError, say), cannot upgrade its snapshot: it is passed over and the
    thread rebuilt from its events, as the docs promise; the load does not fail."""
    replayed = golden_v1.replay_state("golden-long")
    for kind in ERROR_KINDS:

        def fails(state: dict[str, Any], kind: type[Exception] = kind) -> dict[str, Any]:
            raise error_of(kind, "this migrator cannot read it")

        restored = golden_v1.load("golden-long", snapshot_migrators={1: fails})
        assert restored.state == replayed, kind


def test_migrate_check_passes_on_the_golden_store(golden_v1: Store) -> None:
    """Every record of the golden store upgrades; its v1 snapshot is counted as one to
    rebuild, not as a failure."""
    report = check_store(golden_v1, state_files=FileStateStore(GOLDEN / "v0" / "states"))
    assert report.ok, report.failures
    assert report.counts["AgentThread.MessageAppended", 1] == 30
    assert report.counts["StateDocument", 0] == 1
    assert report.counts["StateDocument", 1] == 1
    assert report.stale_snapshots == {1: 1}
    assert report.current["AgentThread.MessageAppended"] == 2


def test_the_golden_manifest_records_what_wrote_it() -> None:
    """Each golden directory names its source and the class versions it was written at."""
    manifest = json.loads((GOLDEN / "v1" / "manifest.json").read_text())
    assert manifest["source"].startswith("covonaut-es 731724f")
    assert manifest["class_versions"]["AgentThread.MessageAppended"] == 1
    assert manifest["class_versions"]["AgentThread"] == 1
    assert manifest["class_versions"]["StateDocument"] == 1


@pytest.mark.parametrize("name", ["v1", "v2"])
def test_every_golden_idempotency_key_is_the_one_tool_called_v2_derives(name: str) -> None:
    """ToolCalled v2 stores no key: each key the older code stored is the one derived
    from its thread, its version and the call id, so tools see the same key after the
    upgrade."""
    with golden_database(GOLDEN / name / "threads.db") as db:
        rows = db.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events "
            "ORDER BY originator_id, originator_version"
        ).fetchall()
    thread_ids: dict[str, str] = {}
    keys = []
    for stream, version, topic, state in rows:
        payload = json.loads(state)
        thread_ids.setdefault(stream, payload.get("thread_id"))
        if full_topic(topic) == AgentThread.ToolCalled.TOPIC:
            derived = event_key(thread_ids[stream], version, payload["call"]["id"])
            keys.append((payload["idempotency_key"], derived))
    assert len(keys) >= 25
    assert all(stored == derived for stored, derived in keys)


def test_golden_v2_calls_read_from_their_messages_as_they_were_stored(golden_v2: Store) -> None:
    """At each v1 ToolCalled of the golden store, the open call read from the message
    that asked for it is the call and key the record repeats."""
    checked = 0
    for thread_id in ("golden-long", "golden-review"):
        for record in golden_v2._records.stored_records(thread_id):
            if record.topic == AgentThread.ToolCalled.TOPIC:
                stored = json.loads(record.state)
                state = golden_v2.state_at(thread_id, record.originator_version)
                (pending,) = state.open_calls
                assert msgspec.to_builtins(pending.call) == stored["call"]
                assert pending.idempotency_key == stored["idempotency_key"]
                checked += 1
    assert checked == 25
