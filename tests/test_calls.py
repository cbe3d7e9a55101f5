"""ToolCalled names its call by id: the call is stored once, in the assistant message
that asked for it, and its idempotency key is derived as it always was."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import msgspec
import pytest
from eventsourcing.persistence import StoredEvent

from covonaut_es import Message, Role, Store, ToolCall, open_store
from covonaut_es.domain import AgentThread, PendingToolCall, ToolOutcome, thread_aggregate_id
from covonaut_es.errors import UpcasterError
from covonaut_es.store._mapper import MsgspecMapper
from covonaut_es.store._topic_codes import full_topic
from support import converse

NOW = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
ID = thread_aggregate_id("t")


def test_a_tool_call_is_stored_once_in_the_message_that_asked_for_it(store: Store) -> None:
    """The ToolCalled payload holds the call id alone; the name and arguments are in the
    assistant message before it. Where the answer's event records the call's intent
    (ADR 0072), no other row names the call."""
    converse(store, "folded")
    topics = [full_topic(r.topic) for r in store._records.stored_records("folded")]
    assert AgentThread.TurnAnsweredWithCalls.TOPIC in topics
    assert AgentThread.ToolCalled.TOPIC not in topics
    converse(store, "t", save_on_turn_start=True)
    records = {r.originator_version: r for r in store._records.stored_records("t")}
    (called,) = [r for r in records.values() if full_topic(r.topic) == AgentThread.ToolCalled.TOPIC]
    payload = msgspec.json.decode(store._records.mapper.plain_payload(called))
    assert set(payload) == {"timestamp", "tool_call_id", "chain", "_v"}
    assert (payload["tool_call_id"], payload["_v"]) == ("c1", 2)
    asked = msgspec.json.decode(
        store._records.mapper.plain_payload(records[called.originator_version - 1])
    )
    assert asked["message"]["tool_calls"] == [
        {"id": "c1", "name": "echo", "arguments": '{"text": "x"}'}
    ]


def v1_called(version: int, call: ToolCall) -> StoredEvent:
    """A ToolCalled as code before version 2 stored it: the call repeated, and its key."""
    material = f"t\x00{version}\x00{call.id}".encode()
    payload = {
        "timestamp": NOW.isoformat(),
        "call": msgspec.to_builtins(call),
        "idempotency_key": hashlib.sha256(material).hexdigest()[:32],
        "_v": 1,
    }
    return StoredEvent(ID, version, AgentThread.ToolCalled.TOPIC, msgspec.json.encode(payload))


def test_v1_calls_read_from_their_messages_with_the_keys_tools_saw() -> None:
    """Upcast v1 records resolve to the calls they repeated, with their stored keys: a
    call id reused in a later turn is that turn's call, and of an id repeated within one
    message (as code before unique ids recorded it) the later call stays open."""
    first, again = ToolCall("c1", "echo", '{"turn": 1}'), ToolCall("c1", "echo", '{"turn": 2}')
    twin, twin_2 = ToolCall("d", "echo", '{"n": 1}'), ToolCall("d", "echo", '{"n": 2}')
    thread = AgentThread.start("t", now=NOW)
    thread.append_message(Message(Role.ASSISTANT, tool_calls=(first,)), now=NOW)
    mapper = MsgspecMapper()
    records = [mapper.to_stored_event(e) for e in thread.collect_events()]
    result = AgentThread.ToolResultRecorded(
        originator_id=ID,
        originator_version=4,
        timestamp=NOW,
        tool_call_id="c1",
        tool_name="echo",
        content="ok",
        outcome=ToolOutcome.SUCCEEDED,
    )
    later = AgentThread.MessageAppended(
        originator_id=ID,
        originator_version=5,
        timestamp=NOW,
        message=Message(Role.ASSISTANT, tool_calls=(again, twin, twin_2)),
    )
    records += [v1_called(3, first), mapper.to_stored_event(result)]
    records += [mapper.to_stored_event(later), v1_called(6, again)]
    records += [v1_called(7, twin), v1_called(8, twin_2)]
    with open_store("memory://", compress="none") as store:  # as the mapper wrote them
        store._app.recorder.insert_events(records)
        state = store.replay_state("t")
    keys = {
        r.originator_version: msgspec.json.decode(r.state)["idempotency_key"]
        for r in records
        if full_topic(r.topic) == AgentThread.ToolCalled.TOPIC
    }
    assert state.open_calls == (PendingToolCall(again, keys[6]), PendingToolCall(twin_2, keys[8]))


@pytest.mark.parametrize(
    ("call", "found"),
    [
        ('"c1"', "found str"),
        ('{"name": "echo"}', "found an object without one"),
        ("null", "found NoneType"),
    ],
)
def test_a_v1_call_without_an_id_is_a_clear_upcaster_error(call: str, found: str) -> None:
    """A damaged v1 record names what its call should have been and what it was."""
    data = f'{{"timestamp": "{NOW.isoformat()}", "call": {call}, "idempotency_key": "k", "_v": 1}}'
    record = StoredEvent(ID, 2, AgentThread.ToolCalled.TOPIC, data.encode())
    with pytest.raises(UpcasterError, match=f"an object with a string 'id'; {found}"):
        MsgspecMapper().to_domain_event(record)
