"""The msgspec mapper: typed round trips, schema versions, compression, encryption."""

from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import msgspec
import pytest
import zstandard
from eventsourcing.compressor import ZlibCompressor
from eventsourcing.persistence import StoredEvent

from covonaut_es import (
    AgentThread,
    Message,
    Role,
    SchemaVersionError,
    SerializationError,
    ThreadStatus,
    ToolCall,
)
from covonaut_es.domain import (
    CheckpointReason,
    Compaction,
    Decision,
    Interrupt,
    Label,
    PauseKind,
    ReviewLimit,
    ReviewRequest,
    ReviewRules,
    RunMode,
    StateDocument,
    ThreadSnapshot,
    ToolOutcome,
    ToolPin,
    TypedOutput,
    thread_aggregate_id,
)
from covonaut_es.domain._named_states import StateSaved, state_stream_id
from covonaut_es.errors import MissingUpcasterError
from covonaut_es.messages import Usage
from covonaut_es.migrations._registry import EVENT_UPCASTERS
from covonaut_es.store import _codec, _zstd
from covonaut_es.store._chain import chain_hash, chain_of
from covonaut_es.store._codec import codec_for
from covonaut_es.store._dictionary import ZstdDictionaryCompressor
from covonaut_es.store._mapper import MsgspecMapper
from support import start_bare_run

NOW = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
ID = thread_aggregate_id("t")

_PIN = ToolPin.of(
    server="files",
    origin="stdio:python files.py",
    tool="delete",
    description="Delete a file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}},
)

SAMPLES: dict[type, dict[str, Any]] = {
    AgentThread.Started: {"thread_id": "t", "originator_topic": "covonaut.thread"},
    AgentThread.StartedWithInput: {
        "thread_id": "t",
        "originator_topic": "covonaut.thread",
        "mode": RunMode.RUN,
        "message": Message(Role.USER, "first é"),
    },
    AgentThread.StartedFromState: {
        "thread_id": "t",
        "originator_topic": "covonaut.thread",
        "key": "review-pending",
        "document": StateDocument(
            thread_id="source",
            version=9,
            saved_at=NOW,
            status=ThreadStatus.INTERRUPTED,
            messages=(Message(Role.USER, "pay"), Message(Role.TOOL, "paused", tool_call_id="c1")),
            turn=2,
            usage=Usage(5, 6),
            interrupts=(Interrupt("why", {"amount": 40}, "c1", "review"),),
            compaction=Compaction("earlier", 1),
            error=None,
        ),
        "stored_version": 0,
    },
    AgentThread.RunStarted: {"mode": RunMode.RESUME},
    AgentThread.MessageAppended: {
        "message": Message(
            Role.ASSISTANT,
            "hi",
            tool_calls=(ToolCall("c1", "echo", '{"a": 1}'),),
            name="bot",
            usage=Usage(3, 4),
        ),
    },
    AgentThread.TurnAnswered: {
        "message": Message(Role.ASSISTANT, "hi", tool_calls=(ToolCall("c1", "echo", "{}"),)),
        "turn": 2,
    },
    AgentThread.TurnAnsweredWithCalls: {
        "message": Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "echo", "{}"),)),
        "turn": 2,
    },
    AgentThread.ToolCalled: {"tool_call_id": "c1"},
    AgentThread.ToolResultRecorded: {
        "tool_call_id": "c1",
        "tool_name": "echo",
        "content": "ok",
        "outcome": ToolOutcome.FAILED,
    },
    AgentThread.ToolCallSettled: {
        "tool_call_id": "c1",
        "tool_name": "echo",
        "content": "found in the ledger",
        "outcome": ToolOutcome.SETTLED,
        "settled_by": "alice",
    },
    AgentThread.ToolResultCheckpointed: {
        "tool_call_id": "c1",
        "tool_name": "echo",
        "content": "ok",
        "outcome": ToolOutcome.SUCCEEDED,
        "retain": 3,
    },
    AgentThread.ToolCallRetried: {"tool_call_id": "c1"},
    AgentThread.RetryRequested: {"tool_call_id": "c1", "requested_by": "alice"},
    AgentThread.InterruptAnswered: {
        "tool_call_id": "c1",
        "answer": "the blue one",
        "answered_by": "alice",
    },
    AgentThread.Forked: {
        "thread_id": "f",
        "parent_thread_id": "t",
        "parent_version": 1,
        "interrupts": (Interrupt("why", {"a": 1}, "c1", "review", PauseKind.REVIEW),),
    },
    AgentThread.Labelled: {"label": Label("best", 3)},
    AgentThread.Abandoned: {"reason": "customer left", "abandoned_by": "alice"},
    AgentThread.Interrupted: {
        "interrupt": Interrupt(
            "why", {"nested": [1, {"x": None}]}, "c1", "review", PauseKind.IN_DOUBT
        )
    },
    AgentThread.Steered: {"message": Message(Role.USER, "approved?"), "answer_to": "c1"},
    AgentThread.Resumed: {},
    AgentThread.RunStartedWithInput: {"mode": RunMode.RUN, "message": Message(Role.USER, "hi é")},
    AgentThread.TurnStarted: {"turn": 2},
    AgentThread.Compacted: {"compaction": Compaction("sum", 3), "usage": None},
    AgentThread.RunFinished: {
        "output": '{"a": [1, 2.5, null, "x"]}',
        "typed": TypedOutput({"a": [1, 2.5, None, "x"]}),
    },
    AgentThread.RunFinishedCheckpointed: {"output": "done", "typed": None, "retain": 0},
    AgentThread.RunFailed: {"error_type": "ProviderError", "message": "boom"},
    AgentThread.CheckpointSaved: {"reason": CheckpointReason.INTERRUPT, "retain": 3},
    AgentThread.ReviewRequested: {
        "request": ReviewRequest(
            "r1",
            "t",
            "pay",
            {"amount": 40.5, "to": ["a"]},
            "d",
            "c1",
            run_on_approval=True,
            deadline=NOW,
            rules=ReviewRules(
                decisions=(Decision.APPROVED, Decision.REJECTED),
                editable=("amount",),
                description="Pay 40.50 to a",
                scopes=("payments",),
                limits=(ReviewLimit("amount", 1000, ("payments:large",)),),
                four_eyes=True,
            ),
        )
    },
    AgentThread.ToolPinned: {"tool_call_id": "c1", "tool": _PIN},
    AgentThread.ReviewDecided: {
        "review_id": "r1",
        "digest": "d",
        "reviewer": "alice",
        "decision": Decision.REJECTED,
        "comment": "too much",
    },
    AgentThread.ApprovalUsed: {"review_id": "r1", "tool_call_id": "c2", "idempotency_key": "k"},
    AgentThread.ReviewApprovedWithEdits: {
        "review_id": "r1",
        "digest": "d2",
        "reviewer": "alice",
        "decision": Decision.APPROVED,
        "comment": "halved",
        "arguments": {"amount": 20, "to": ["a"]},
    },
    AgentThread.ReviewApprovedInPart: {
        "review_id": "r1",
        "digest": "d2",
        "reviewer": "alice",
        "comment": "first of two",
        "arguments": {"amount": 20},
    },
    AgentThread.ReviewResponded: {
        "review_id": "r1",
        "digest": "d",
        "reviewer": "alice",
        "decision": Decision.RESPONDED,
        "comment": "the balance is 12 EUR",
    },
    AgentThread.ReviewExpired: {
        "review_id": "r1",
        "digest": "d",
        "reviewer": "",
        "decision": Decision.EXPIRED,
        "comment": "",
        "deadline": NOW,
    },
    AgentThread.ReviewDeadlineNear: {
        "thread_id": "t",
        "review_id": "r1",
        "tool_name": "pay",
        "deadline": NOW,
    },
}


def event_classes() -> list[type]:
    return [
        value
        for value in vars(AgentThread).values()
        if isinstance(value, type)
        and issubclass(value, AgentThread.Event)
        and value is not AgentThread.Event
    ]


def make_event(cls: type, version: int = 2) -> Any:
    return cls(originator_id=ID, originator_version=version, timestamp=NOW, **SAMPLES[cls])


def assert_same_types(left: Any, right: Any) -> None:
    assert type(left) is type(right)
    if isinstance(left, msgspec.Struct):
        for field in left.__struct_fields__:
            assert_same_types(getattr(left, field), getattr(right, field))
    elif isinstance(left, list | tuple):
        for a, b in zip(left, right, strict=True):
            assert_same_types(a, b)
    elif isinstance(left, dict):
        for key in left:
            assert_same_types(left[key], right[key])


def test_every_event_type_has_a_sample() -> None:
    """Adding an event type without a round-trip sample fails here."""
    assert set(event_classes()) == set(SAMPLES)


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("cls", list(SAMPLES), ids=lambda c: c.__name__)
def test_event_round_trip_is_equal_including_types(cls: type, compress: bool) -> None:
    """Every event decodes to an equal event whose nested values have their types."""
    mapper = MsgspecMapper(compressor=ZlibCompressor() if compress else None)
    event = make_event(cls)
    decoded = mapper.to_domain_event(mapper.to_stored_event(event))
    assert decoded == event
    assert type(decoded) is cls
    for name, value in vars(event).items():
        assert_same_types(value, getattr(decoded, name))


@pytest.mark.parametrize("cls", list(SAMPLES), ids=lambda c: c.__name__)
def test_event_pickles_under_its_name_on_the_aggregate(cls: type) -> None:
    """Every event is named AgentThread.<Name>, where pickle finds its class, though the
    class is defined in covonaut_es.domain._thread."""
    event = make_event(cls)
    assert cls.__qualname__ == f"AgentThread.{cls.__name__}"
    assert pickle.loads(pickle.dumps(event)) == event


@pytest.mark.parametrize("compress", [False, True])
def test_named_state_record_round_trip_keeps_the_document_as_given(compress: bool) -> None:
    """A StateSaved record decodes to the JSON object it was given, nested values
    included, whatever the document's own schema version."""
    mapper = MsgspecMapper(compressor=ZlibCompressor() if compress else None)
    document = {"_v": 0, "messages": [{"role": "user", "content": "hi"}], "extra": None}
    event = StateSaved(
        originator_id=state_stream_id("k"),
        originator_version=3,
        timestamp=NOW,
        key="k",
        document=document,
    )
    decoded = mapper.to_domain_event(mapper.to_stored_event(event))
    assert decoded == event
    assert type(decoded) is StateSaved


def test_snapshot_round_trip_restores_the_typed_thread() -> None:
    """A snapshot decodes to a thread whose state equals the original, types included."""
    thread = AgentThread.start("t", now=NOW)
    start_bare_run(thread, now=NOW)
    thread.append_message(Message(Role.USER, "hi"), now=NOW)
    thread.append_message(
        Message(Role.ASSISTANT, tool_calls=(ToolCall("c1", "echo", "{}"),), usage=Usage(1, 2)),
        now=NOW,
    )
    thread.call_tools([ToolCall("c1", "echo", "{}")], now=NOW)
    thread.interrupt(Interrupt("why", {"a": 1}, "c1", "echo"), now=NOW)
    thread.save_checkpoint(CheckpointReason.INTERRUPT, retain=0, now=NOW)
    thread.compact(Compaction("s", 1), usage=Usage(5, 5), now=NOW)
    thread.append_message(
        Message(Role.ASSISTANT, tool_calls=(ToolCall("c2", "pay", '{"amount": 4}'),)), now=NOW
    )
    thread.call_tools([ToolCall("c2", "pay", '{"amount": 4}')], now=NOW)
    thread.request_review(ToolCall("c2", "pay", '{"amount": 4}'), {"amount": 4}, now=NOW)
    (review,) = thread.reviews.pending
    thread.decide_review(
        review.request.review_id, Decision.APPROVED, reviewer="alice", comment="", now=NOW
    )
    thread.finish('{"k": [1.5, null]}', typed=TypedOutput({"k": [1.5, None]}), now=NOW)
    mapper = MsgspecMapper()
    snapshot = ThreadSnapshot.take(thread)
    decoded = mapper.to_domain_event(mapper.to_stored_event(snapshot))
    restored = decoded.mutate(None)
    assert isinstance(restored, AgentThread)
    assert restored.state == thread.state
    assert restored.version == thread.version
    assert_same_types(restored.state, thread.state)
    assert restored.modified_on == thread.modified_on


def test_snapshot_from_before_reviews_decodes_with_no_reviews() -> None:
    """A snapshot whose state predates the review ledger decodes with an empty one."""
    thread = AgentThread.start("t", now=NOW)
    mapper = MsgspecMapper()
    record = mapper.to_stored_event(ThreadSnapshot.take(thread))
    payload = mapper.payload_fields(record)  # written as JSON, as snapshots were then
    del payload["state"]["reviews"]
    older = StoredEvent(ID, record.originator_version, record.topic, msgspec.json.encode(payload))
    restored = mapper.to_domain_event(older).mutate(None)
    assert restored.state == thread.state
    assert restored.state.reviews == ()


def test_snapshot_from_before_typed_answers_decodes_with_no_output() -> None:
    """A snapshot whose state predates typed answers decodes with no output."""
    thread = AgentThread.start("t", now=NOW)
    mapper = MsgspecMapper()
    record = mapper.to_stored_event(ThreadSnapshot.take(thread))
    payload = mapper.payload_fields(record)
    del payload["state"]["output"]
    older = StoredEvent(ID, record.originator_version, record.topic, msgspec.json.encode(payload))
    restored = mapper.to_domain_event(older).mutate(None)
    assert restored.state == thread.state
    assert restored.state.output is None


def stored(cls: type, payload: dict[str, Any]) -> StoredEvent:
    return StoredEvent(
        originator_id=ID,
        originator_version=2,
        topic=cls.TOPIC,
        state=msgspec.json.encode(payload),
    )


def test_data_newer_than_the_code_is_refused() -> None:
    """A stored version above the code's raises SchemaVersionError naming both."""
    payload = {"timestamp": NOW.isoformat(), "turn": 1, "_v": 7}
    with pytest.raises(
        SchemaVersionError, match=r"TurnStarted data has schema version 7.*up to version 1"
    ):
        MsgspecMapper().to_domain_event(stored(AgentThread.TurnStarted, payload))


def test_data_without_a_version_is_version_zero() -> None:
    """A payload without class_version is version 0, upgraded to 1 unchanged."""
    payload = {"timestamp": NOW.isoformat(), "turn": 4}
    event = MsgspecMapper().to_domain_event(stored(AgentThread.TurnStarted, payload))
    assert isinstance(event, AgentThread.TurnStarted)
    assert event.turn == 4


def later_turn_started(monkeypatch: pytest.MonkeyPatch, upcasters: dict[int, Any]) -> type:
    """A TurnStarted at version 3 with the given upcasters in the registry."""

    class Later(AgentThread.TurnStarted):
        class_version = 3

    monkeypatch.setitem(EVENT_UPCASTERS, Later, upcasters)
    return Later


def test_stored_events_are_upgraded_by_the_registrys_upcasters_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A v1 event passes through 1 -> 2, then 2 -> 3, on read."""
    later = later_turn_started(
        monkeypatch,
        {
            1: lambda state: {**state, "turn": state["turn"] * 10, "_v": 2},
            2: lambda state: {**state, "turn": state["turn"] + 1, "_v": 3},
        },
    )
    payload = msgspec.json.encode({"timestamp": NOW.isoformat(), "turn": 2, "_v": 1})
    assert codec_for(later).decode(payload, where="test")["turn"] == 21


def test_a_missing_step_fails_when_the_event_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading data that needs a step without an upcaster names the step."""
    later = later_turn_started(monkeypatch, {2: lambda state: {**state, "_v": 3}})
    payload = msgspec.json.encode({"timestamp": NOW.isoformat(), "turn": 1, "_v": 1})
    with pytest.raises(
        MissingUpcasterError, match=r"Later has no upcaster for schema version 1 -> 2"
    ):
        codec_for(later).decode(payload, where="test")


def test_snapshot_migrators_see_the_thread_state_with_its_version() -> None:
    """A snapshot migrator gets the aggregate's state (not the envelope) with its
    stored version, and what it returns is what the thread is restored from."""
    thread = AgentThread.start("t", now=NOW)
    thread.start_turn(now=NOW)
    mapper = MsgspecMapper()
    record = mapper.to_stored_event(ThreadSnapshot.take(thread))
    older = {**mapper.payload_fields(record), "_v": 1}  # JSON, as v1 snapshots were
    seen: list[dict[str, Any]] = []

    def migrate(state: dict[str, Any]) -> dict[str, Any]:
        seen.append(dict(state))
        return {**state, "turn": 7, "_v": 2}

    old = StoredEvent(ID, record.originator_version, record.topic, msgspec.json.encode(older))
    restored = mapper.decode(old, migrators={1: migrate}).mutate(None)
    assert seen[0]["_v"] == 1 and seen[0]["thread_id"] == "t" and "state" not in seen[0]
    assert isinstance(restored, AgentThread)
    assert restored.turn == 7


def talked_thread() -> AgentThread:
    thread = AgentThread.start("t", now=NOW)
    start_bare_run(thread, now=NOW)
    for i in range(20):
        thread.append_message(Message(Role.USER, f"message {i} " * 20), now=NOW)
    return thread


COMPRESSORS: dict[str, Any] = {
    "none": lambda: None,
    "zlib": ZlibCompressor,
    "zstd": ZstdDictionaryCompressor,
}
"""Each compressor a store may record, by its name there."""


@pytest.mark.parametrize("compress", sorted(COMPRESSORS))
def test_a_snapshot_is_one_zstd_frame_and_one_written_as_json_still_reads(compress: str) -> None:
    """A snapshot is stored as msgpack in a zstd frame, which the store's own compressor
    leaves alone; a JSON snapshot as written before, or when msgpack cannot hold its
    state (compressed by the store or not, a zstd frame naming the store's dictionary
    too), decodes to the same thread."""
    thread = talked_thread()
    mapper = MsgspecMapper(compressor=COMPRESSORS[compress]())
    record = mapper.to_stored_event(ThreadSnapshot.take(thread))
    assert record.state.startswith(_zstd.MAGIC)
    assert _zstd.dictionary_id(record.state) == 0
    json_snapshot = mapper.stored_payload(msgspec.json.encode(mapper.payload_fields(record)))
    older = StoredEvent(ID, record.originator_version, record.topic, json_snapshot)
    assert older.state.startswith({"none": b"{", "zlib": b"x", "zstd": _zstd.MAGIC}[compress])
    for stored in (record, older):
        restored = mapper.to_domain_event(stored).mutate(None)
        assert restored.state == thread.state
        assert_same_types(restored.state, thread.state)


def test_a_state_msgpack_cannot_hold_is_stored_as_json() -> None:
    """An integer beyond 64 bits in a JSON value is kept by a JSON snapshot."""
    thread = AgentThread.start("t", now=NOW)
    start_bare_run(thread, now=NOW)
    thread.interrupt(Interrupt("why", {"n": 2**70}), now=NOW)
    mapper = MsgspecMapper()
    record = mapper.to_stored_event(ThreadSnapshot.take(thread))
    assert record.state.startswith(b"{")
    assert mapper.to_domain_event(record).mutate(None).state == thread.state


def hostile_frames() -> dict[str, bytes]:
    """Damaged or hostile zstd snapshots, by what is wrong with them."""
    packed = msgspec.msgpack.encode(MsgspecMapper().payload_fields(snapshot_record()))
    frame = _zstd.compress(packed)
    streamed = zstandard.ZstdCompressor().compressobj()
    return {
        "truncated": frame[: len(frame) // 2],
        "magic only": _zstd.MAGIC,
        "garbled": frame[:12] + bytes(b ^ 0x5A for b in frame[12:]),
        "bomb": _zstd.compress(bytes(2 * 1024 * 1024)),
        "bomb without a declared size": streamed.compress(bytes(2 * 1024 * 1024))
        + streamed.flush(),
        "not msgpack": _zstd.compress(b"\xc1" * 100),
        "not a map": _zstd.compress(msgspec.msgpack.encode([1, 2])),
        "foreign extension": _zstd.compress(msgspec.msgpack.encode(msgspec.msgpack.Ext(5, b"x"))),
        "nested too deep": _zstd.compress(b"\x91" * 100_000 + b"\x00"),
    }


def snapshot_record() -> StoredEvent:
    return MsgspecMapper().to_stored_event(ThreadSnapshot.take(talked_thread()))


@pytest.mark.parametrize("name", list(hostile_frames()))
def test_a_hostile_compressed_snapshot_is_a_serialization_error(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A damaged frame, one that holds more than the limit (declared or not), and one
    holding no snapshot are each a SerializationError naming the stream; nothing
    beyond the limit is allocated."""
    monkeypatch.setattr(_codec, "SNAPSHOT_SIZE_LIMIT", 1024 * 1024)  # the bomb holds 2 MiB
    record = snapshot_record()
    record = StoredEvent(ID, record.originator_version, record.topic, hostile_frames()[name])
    where = f"Snapshot.* of stream {ID} at version 22: stored"
    with pytest.raises(SerializationError, match=where):
        MsgspecMapper().to_domain_event(record)


@pytest.mark.parametrize(
    ("topic", "payload"),
    [
        (ThreadSnapshot.TOPIC, b"[" * 100_000),
        (AgentThread.TurnStarted.TOPIC, b'{"v": ' + b"[" * 100_000),
    ],
)
def test_json_nested_deeper_than_a_decoder_follows_is_a_serialization_error(
    topic: str, payload: bytes
) -> None:
    """A stored payload nested deeper than msgspec recurses is refused like any other
    unreadable record, naming it, not with the RecursionError of the decoder."""
    record = StoredEvent(ID, 2, topic, payload)
    with pytest.raises(SerializationError, match=f"of stream {ID} at version 2: stored"):
        MsgspecMapper().to_domain_event(record)


def test_snapshot_frames_are_written_and_read_from_many_threads_at_once() -> None:
    """Frames compressed and decompressed in threads at once (the async API and the
    inbox server save and load in threads) each round-trip, and the process survives."""
    payloads = [bytes(range(256)) * 40 * (1 + i) + bytes([i]) for i in range(4)]

    def round_trips(data: bytes) -> bool:
        return all(
            _zstd.decompress(_zstd.compress(data), limit=len(data)) == data for _ in range(400)
        )

    with ThreadPoolExecutor(len(payloads)) as pool:
        assert all(pool.map(round_trips, payloads))


def test_a_snapshot_frame_without_its_declared_size_is_read() -> None:
    """A frame that does not declare its size (as another zstd writer may make it) is
    read up to the limit: the snapshot is the same."""
    record = snapshot_record()
    packed = _zstd.decompress(record.state, limit=_codec.SNAPSHOT_SIZE_LIMIT)
    streamed = zstandard.ZstdCompressor().compressobj()
    undeclared = StoredEvent(
        ID, record.originator_version, record.topic, streamed.compress(packed) + streamed.flush()
    )
    assert zstandard.frame_content_size(undeclared.state) < 0
    mapper = MsgspecMapper()
    assert mapper.to_domain_event(undeclared).mutate(None).state == talked_thread().state


def test_corrupt_payload_is_a_serialization_error() -> None:
    """Bytes that are not JSON raise SerializationError naming the event."""
    bad = StoredEvent(ID, 2, "covonaut.thread.TurnStarted", b"\x00garbage")
    with pytest.raises(SerializationError, match="TurnStarted"):
        MsgspecMapper().to_domain_event(bad)


def test_unknown_topic_is_a_serialization_error() -> None:
    """A topic this code does not know raises SerializationError."""
    bad = StoredEvent(ID, 2, "covonaut.thread.Vanished", b"{}")
    with pytest.raises(SerializationError, match="unknown"):
        MsgspecMapper().to_domain_event(bad)


def test_ids_decode_as_uuid() -> None:
    """The originator id comes back as a UUID whether stored as UUID or text."""
    event = make_event(AgentThread.TurnStarted)
    record = MsgspecMapper().to_stored_event(event)
    text_record = StoredEvent(str(record.originator_id), 2, record.topic, record.state)
    decoded = MsgspecMapper().to_domain_event(text_record)
    assert isinstance(decoded.originator_id, UUID)


@pytest.mark.parametrize("key", [None, b"a secret of thirty-two characters"])
def test_the_chain_hash_sealed_once_is_stored_with_the_bytes_it_covers(key: bytes | None) -> None:
    """A sealed event's hash is stored with it and decoded back, and it is the hash of
    the payload as stored: an audit recomputing it from the record agrees."""
    thread = AgentThread.start("t", now=NOW)
    start_bare_run(thread, now=NOW)
    mapper = MsgspecMapper()
    previous = ""
    for event in thread.collect_events():
        record, chain = mapper.to_sealed_event(event, previous, key)
        assert chain_of(mapper.to_domain_event(record)) == chain != ""
        payload = mapper.payload_fields(record)
        assert chain_hash(previous, record.topic, record.originator_version, payload, key) == chain
        previous = chain
