"""The tool calls an AG-UI front end is told of: whatever ids and names a model
streams, in whatever pieces, each call is started once under an id no other call was
told, named, and each result is told under the id of the call it answers (helper-220:
a call whose name streamed after its first piece was started unnamed, and its result
told under another call's id)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import ag_ui.core as agui
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from covonaut_es import Agent, AgentConfig, ScriptedProvider, Tool
from covonaut_es.agui._events import RunEvents
from covonaut_es.messages import StreamDelta, ToolCallDelta

_NAMES = ("t1", "t2")


def _tool(name: str) -> Tool:
    def answer(ctx: Any, args: dict[str, Any]) -> str:
        return f"{name} {json.dumps(args, sort_keys=True)}"

    return Tool(name, name, {"type": "object"}, answer)


@st.composite
def _streamed_answer(draw: st.DrawFn) -> tuple[StreamDelta, ...]:
    """One answer's calls, each in two pieces: its id (often one another call has, or
    none) in the first, its name in the first or the second, its arguments cut anywhere;
    the first pieces of all calls before their second ones."""
    calls = draw(st.integers(1, 3))
    first, second = [], []
    for index in range(calls):
        call_id = draw(st.sampled_from(["", "c1", "c1-2", "call", "call-2"]))
        name = draw(st.sampled_from(_NAMES))
        # No arguments streamed at all, as Anthropic streams a call of a tool without
        # parameters: the provider commits "{}".
        text = draw(st.sampled_from(["", json.dumps({"v": draw(st.integers(0, 2))})]))
        cut = draw(st.integers(0, len(text)))
        late = draw(st.booleans())
        first.append(
            ToolCallDelta(index=index, id=call_id, name="" if late else name, arguments=text[:cut])
        )
        second.append(ToolCallDelta(index=index, name=name if late else "", arguments=text[cut:]))
    return tuple(StreamDelta(tool_call_deltas=(piece,)) for piece in first + second)


def _told(answers: list[tuple[StreamDelta, ...]]) -> list[agui.BaseEvent]:
    script: list[Any] = [*answers, (StreamDelta(content="done"),)]
    tools = [_tool(name) for name in _NAMES]
    agent = Agent(AgentConfig(provider=ScriptedProvider(script), tools=tools, max_turns=10))
    events: list[agui.BaseEvent] = []

    async def follow() -> None:
        telling = RunEvents(agent.messages)
        async for item in agent.astream("go"):
            events.extend(telling.of(item))

    asyncio.run(follow())
    return events


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers=st.lists(_streamed_answer(), min_size=1, max_size=3))
@example(  # three calls of id call_0, the third named in its second piece
    answers=[
        (
            StreamDelta(
                tool_call_deltas=(
                    ToolCallDelta(index=0, id="call_0", name="t1", arguments='{"v": 1}'),
                )
            ),
            StreamDelta(
                tool_call_deltas=(
                    ToolCallDelta(index=1, id="call_0", name="t1", arguments='{"v": 2}'),
                )
            ),
            StreamDelta(
                tool_call_deltas=(
                    ToolCallDelta(index=2, id="call_0", name="", arguments='{"v": 0}'),
                )
            ),
            StreamDelta(tool_call_deltas=(ToolCallDelta(index=2, id="", name="t1", arguments=""),)),
        )
    ]
)
def test_every_call_is_started_named_once_and_its_result_told_under_its_id(
    answers: list[tuple[StreamDelta, ...]],
) -> None:
    """Each call started once, under an id no other started call has, with its name
    and the arguments it committed; each result told under a started call's id, one
    result per id, and that call is the one the result answers; no call started that
    gets no result (one streamed with no arguments was started twice: helper-224)."""
    started: dict[str, str] = {}
    arguments: dict[str, str] = {}
    results: list[agui.ToolCallResultEvent] = []
    for event in _told(answers):
        if isinstance(event, agui.ToolCallStartEvent):
            assert event.tool_call_id not in started, f"two calls told as {event.tool_call_id}"
            assert event.tool_call_name in _NAMES, event
            started[event.tool_call_id] = event.tool_call_name
            arguments[event.tool_call_id] = ""
        elif isinstance(event, agui.ToolCallArgsEvent):
            arguments[event.tool_call_id] += event.delta
        elif isinstance(event, agui.ToolCallResultEvent):
            results.append(event)
    told = [result.tool_call_id for result in results]
    assert len(told) == len(set(told)), told
    assert set(told) == set(started), (told, started)  # no call told that never answers
    for result in results:
        name, args = result.content.split(" ", 1)
        assert started[result.tool_call_id] == name, (result, started)
        assert json.loads(arguments[result.tool_call_id] or "{}") == json.loads(args), result
