"""The intent to call each tool an answer asks for is recorded with the answer, in one
``TurnAnsweredWithCalls`` event, where the answer is stored as one ``TurnAnswered``
would be and no call is of a pinned tool; otherwise each call keeps its ``ToolCalled``
(ADR 0072). Checked over generated runs: every call's intent is recorded exactly once,
before its result; no ``ToolCalled`` is stored where the answer could have carried it;
each call's idempotency key is the one its recording event derives; and the thread
folded from the store is the thread the agent holds."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covonaut_es import (
    Agent,
    AgentConfig,
    AgentThread,
    CheckpointSettings,
    ProviderResponse,
    ScriptedProvider,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)
from covonaut_es.domain._calls import event_key
from covonaut_es.domain._tool_pins import ToolPin
from covonaut_es.errors import ProviderError
from covonaut_es.messages import Message, Role
from support import GOLDEN, OBJECT_SCHEMA, answer, ticking_clock

NOTE, STEER, PINNED = "note", "steer", "pinned"
PIN = ToolPin.of(
    server="files", origin="stdio:files", tool="pinned", description="Pinned", parameters={}
)

calls = st.lists(
    st.tuples(st.sampled_from((NOTE, STEER, PINNED)), st.sampled_from(("c0", "c1", ""))),
    min_size=1,
    max_size=3,
)
"""One answer's calls: the tool, and the id the model sent (repeated and empty ids are
made unique by the thread)."""

Plan = tuple[list[list[tuple[str, str]]], str]
"""A run's answers that call tools, each a list of (tool, id), then how it ends."""

run_plans = st.tuples(st.lists(calls, max_size=3), st.sampled_from(("answer", "fail")))
"""One run: the answers that call tools, then a last answer or a failed model call."""


def _agent(
    store: Any, plan: tuple[list[list[tuple[str, str]]], str], keys: dict[str, str]
) -> Agent:
    answers, last = plan
    script: list[Any] = [
        ProviderResponse(tool_calls=tuple(ToolCall(i, tool, "{}") for tool, i in turn))
        for turn in answers
    ]
    script.append(ProviderResponse(content="done") if last == "answer" else RuntimeError("down"))
    agent: Agent

    def noted(ctx: ToolContext, args: dict[str, Any]) -> str:
        keys[ctx.tool_call_id] = ctx.idempotency_key
        if ctx.tool_name == STEER:
            agent.steer("and mind the budget")
        return "noted"

    tools = [
        Tool(NOTE, "Note", OBJECT_SCHEMA, noted),
        Tool(STEER, "Steer the next turn", OBJECT_SCHEMA, noted),
        Tool(PINNED, "Pinned", OBJECT_SCHEMA, noted, pin=PIN),
    ]
    agent = Agent(
        AgentConfig(
            provider=ScriptedProvider(script),
            tools=tools,
            checkpoint=CheckpointSettings(store=store, thread_id="t1"),
            clock=ticking_clock(),
        )
    )
    return agent


def _intents(history: list[Any]) -> dict[str, int]:
    """The version each call's intent was recorded at, by call id."""
    recorded: dict[str, int] = {}
    for event in history:
        if isinstance(event, AgentThread.TurnAnsweredWithCalls):
            for call in event.message.tool_calls:
                assert call.id not in recorded, history
                recorded[call.id] = event.originator_version
        elif isinstance(event, AgentThread.ToolCalled):
            assert event.tool_call_id not in recorded, history
            recorded[event.tool_call_id] = event.originator_version
    return recorded


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=st.lists(run_plans, min_size=1, max_size=3))
def test_every_calls_intent_is_recorded_once_with_its_answer_where_nothing_keeps_it_apart(
    runs: list[Plan],
) -> None:
    keys: dict[str, str] = {}
    with open_store("memory://") as store:
        for plan in runs:
            agent = _agent(store, plan, keys)
            if plan[1] == "fail":
                with pytest.raises(ProviderError):
                    agent.run("go")
            else:
                assert agent.run("go") == "done"
        history = list(store.history("t1"))
        thread = store.load("t1")

        asked = Counter(
            call.id
            for event in history
            if isinstance(event, AgentThread.MessageAppended)
            for call in event.message.tool_calls
        )
        intents = _intents(history)
        assert Counter(intents.keys()) == asked  # each call asked for, recorded once
        for event, after in zip(history, [*history[1:], None], strict=True):
            if type(event) is AgentThread.TurnAnswered and event.message.tool_calls:
                # Kept apart only by a pinned tool, whose intent its pin follows.
                assert any(call.name == PINNED for call in event.message.tool_calls), history
                assert isinstance(after, AgentThread.ToolCalled), history
            if isinstance(event, AgentThread.TurnAnsweredWithCalls):
                assert all(call.name != PINNED for call in event.message.tool_calls), history
            if isinstance(event, AgentThread.ToolResultRecorded):
                assert intents[event.tool_call_id] < event.originator_version, history
        for call_id, key in keys.items():
            assert key == event_key("t1", intents[call_id], call_id)
        assert tuple(thread.messages) == agent.messages
        assert store.state_at("t1") == store.replay_state("t1")
        assert store.verify("t1").ok
        assert len(list(store.replay("t1"))) == len(history)


def test_a_turn_that_calls_a_tool_is_two_events_and_its_audit_line_says_so() -> None:
    keys: dict[str, str] = {}
    with open_store("memory://") as store:
        _agent(store, ([[(NOTE, "c0")]], "answer"), keys).run("go")
        kinds = [type(e).__name__ for e in store.history("t1")]
        assert kinds.count("TurnAnsweredWithCalls") == 1
        assert "ToolCalled" not in kinds
        (line,) = [e.summary for e in store.replay("t1") if e.kind == "TurnAnsweredWithCalls"]
        assert line == "turn 1: assistant: [calls note], each call's intent recorded"


def test_answering_with_calls_checks_the_calls_as_call_tools_does() -> None:
    now = ticking_clock()
    thread = AgentThread.start("t1", now=now())
    call = ToolCall("c1", NOTE, "{}")
    thread.answer_turn_calling(Message(Role.ASSISTANT, "", tool_calls=(call,)), now=now())
    version = thread.version
    with pytest.raises(ValueError, match="already used"):
        thread.answer_turn_calling(Message(Role.ASSISTANT, "", tool_calls=(call,)), now=now())
    with pytest.raises(ValueError, match="asks for tools"):
        thread.answer_turn_calling(Message(Role.ASSISTANT, "no calls"), now=now())
    with pytest.raises(ValueError, match="assistant message, not a user one"):
        user = Message(Role.USER, "", tool_calls=(ToolCall("c2", NOTE, "{}"),))
        thread.answer_turn_calling(user, now=now())
    assert thread.version == version and list(thread.open_calls) == ["c1"]


def test_a_thread_written_before_goes_on_with_its_calls_folded(tmp_path: Path) -> None:
    """A golden thread of the code before, whose calls each have a ``ToolCalled``, runs
    on: its next call's intent goes with its answer, and the thread verifies."""
    shutil.copy(GOLDEN / "v8-turn-answered" / "plain.db", tmp_path / "threads.db")
    with open_store(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        before = store.load("golden-values")
        agent = Agent(
            AgentConfig(
                provider=ScriptedProvider(
                    [ProviderResponse(tool_calls=(ToolCall("v1", "echo", "{}"),)), answer("again")]
                ),
                tools=[Tool("echo", "Echo", OBJECT_SCHEMA, lambda ctx, args: ctx.idempotency_key)],
                checkpoint=CheckpointSettings(store=store, thread_id="golden-values"),
                clock=ticking_clock(),
            )
        )
        assert agent.run("once more") == "again"
        history = store.history("golden-values")
        assert any(isinstance(e, AgentThread.ToolCalled) for e in history[: before.version])
        (folded,) = [
            e for e in history[before.version :] if isinstance(e, AgentThread.TurnAnsweredWithCalls)
        ]
        (call,) = folded.message.tool_calls
        assert call.id == "v1-2"  # the id the golden thread already used is made unique
        result = next(m for m in reversed(agent.messages) if m.role is Role.TOOL)
        assert result.content == event_key("golden-values", folded.originator_version, call.id)
        assert store.verify("golden-values").ok
        assert store.replay_state("golden-values") == store.state_at("golden-values")
