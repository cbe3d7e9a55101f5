"""A key given twice in a tool call's arguments: msgspec, like most readers, keeps the
last, so the tool would run on one reading of the text while a reviewer or a log reader
may take the other. The call is refused with a message to the model naming the key, and
the tool does not run, whichever provider brought the call."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import openai_wire
from covonaut_es import Agent, AgentConfig, Role, Tool
from covonaut_es.messages import ToolCall
from covonaut_es.tools import ArgumentsError, ToolContext, parse_arguments
from provider_wire import SYSTEM, WEATHER, WEATHER_SCHEMA
from wire_server import WireServer, json_reply

OPEN = Tool("any", "Takes anything", {"type": "object"}, lambda ctx, args: "ok")


@pytest.mark.parametrize(
    "text",
    [
        '{"amount": 1, "amount": 1000}',
        '{"to": "bob", "nested": {"x": 1, "x": 2}}',
        '{"list": [{"a": 1}, {"b": 2, "b": 3}]}',
        '{"amount": 1, "\\u0061mount": 2}',  # the same key, spelt with an escape
    ],
)
def test_a_key_given_twice_is_refused_naming_it(text: str) -> None:
    """A key given twice at any depth, however it is spelt, refuses the call, and the
    message to the model names the key."""
    duplicated = "amount" if "amount" in text else ("x" if '"x"' in text else "b")
    with pytest.raises(ArgumentsError, match=f"'{duplicated}' appears more than once"):
        parse_arguments(OPEN, ToolCall("c1", "any", text))


_KEYS = st.text(alphabet="abc", min_size=1, max_size=2)
_PAIRS = st.lists(st.tuples(_KEYS, st.integers(0, 9)), max_size=5)


@settings(max_examples=60, deadline=None)
@given(pairs=_PAIRS, inner=_PAIRS)
def test_arguments_are_read_or_refused_by_whether_a_key_repeats(
    pairs: list[tuple[str, int]], inner: list[tuple[str, int]]
) -> None:
    """Property: arguments whose objects each name a key once are read as written;
    any object naming a key twice refuses the call."""
    members = [f"{json.dumps(k)}: {v}" for k, v in pairs]
    members.append('"inner": {' + ", ".join(f"{json.dumps(k)}: {v}" for k, v in inner) + "}")
    text = "{" + ", ".join(members) + "}"
    keys = [k for k, _ in pairs] + ["inner"]
    repeats = len(set(keys)) < len(keys) or len({k for k, _ in inner}) < len(inner)
    try:
        args = parse_arguments(OPEN, ToolCall("c1", "any", text))
    except ArgumentsError as exc:
        assert repeats
        assert "appears more than once" in str(exc)
        return
    assert not repeats
    assert args == {**dict(pairs), "inner": dict(inner)}


def test_a_key_twice_from_the_openai_wire_is_refused_and_the_tool_does_not_run(
    server: WireServer, sleeps: list[float]
) -> None:
    """Through the OpenAI adapter, whose arguments come as the model's text: a call
    naming a key twice reaches the model as an error result, and the tool never runs.
    (Anthropic's SDK hands the adapter the call's input already parsed, so a key given
    twice there is resolved by the SDK before covonaut_es sees it.)"""
    completion = json.loads(json.dumps(openai_wire.TOOL_CALL_COMPLETION))
    function = completion["choices"][0]["message"]["tool_calls"][0]["function"]
    function["arguments"] = '{"city": "Paris", "city": "Lyon"}'
    server.reply(json_reply(completion), openai_wire.ANSWER_REPLY)
    ran: list[dict[str, Any]] = []

    def get_weather(ctx: ToolContext, args: dict[str, Any]) -> str:
        ran.append(args)
        return "sunny"

    tool = Tool("get_weather", WEATHER.description, WEATHER_SCHEMA, get_weather)
    with openai_wire.provider(server.url, sleep=sleeps.append) as provider:
        config = AgentConfig(
            provider=provider, model=openai_wire.MODEL, tools=[tool], system_prompt=SYSTEM
        )
        with Agent(config) as agent:
            assert agent.run(openai_wire.QUESTION) == openai_wire.ANSWER
            results = [m.content for m in agent.messages if m.role is Role.TOOL]
    assert ran == []
    assert len(results) == 1
    assert "'city' appears more than once" in results[0]
