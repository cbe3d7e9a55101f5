"""A key given twice in a tool call's arguments: msgspec, like most readers, keeps the
last, so the tool would run on one reading of the text while a reviewer or a log reader
may take the other. The call is refused with a message to the model naming the key, and
the tool does not run, whichever provider brought the call."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import anthropic_wire
import openai_wire
from covonaut_es import Agent, AgentConfig, ProviderResponse, Role, ScriptedProvider, Tool
from covonaut_es.messages import ToolCall
from covonaut_es.tools import ArgumentsError, ToolContext, parse_arguments
from provider_wire import SYSTEM, WEATHER, WEATHER_SCHEMA
from wire_server import Reply, WireServer, json_reply, sse_reply

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
    naming a key twice reaches the model as an error result, and the tool never runs."""
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


_VALUES = st.sampled_from(["1", "1000", '"x"', "NaN", "Infinity", "-Infinity", "1e999"])


def _replies(path: str, text: str) -> list[Reply]:
    """The vendor's answers, on ``path``, that call the tool ``any`` with ``text``,
    then answer."""
    call = ToolCall("toolu_1", "any", "")
    if path == "openai complete":
        function = {"name": "any", "arguments": text}
        calls = [{"id": "c1", "type": "function", "function": function}]
        body = openai_wire.completion({"content": None, "tool_calls": calls}, "tool_calls", (1, 1))
        return [json_reply(body), openai_wire.ANSWER_REPLY]
    if path == "openai stream":
        function = {"name": "any", "arguments": text}
        fragment = {"index": 0, "id": "c1", "type": "function", "function": function}
        chunks = [
            openai_wire.chunk(openai_wire.delta({"tool_calls": [fragment]})),
            openai_wire.chunk(openai_wire.delta({}, "tool_calls")),
        ]
        return [sse_reply((None, c) for c in chunks), openai_wire.TEXT_STREAM_REPLY]
    if path == "anthropic complete":
        usage = anthropic_wire.usage_body(1, 1)
        body = anthropic_wire.message([anthropic_wire.tool_use(call, {})], "tool_use", usage)
        # The input spliced in as the model wrote it, which json.dumps could not write.
        raw = json.dumps(body).replace('"input": {}', f'"input": {text}').encode()
        return [Reply(body=raw), anthropic_wire.ANSWER_REPLY]
    events = [
        anthropic_wire.message_start(1),
        anthropic_wire.block_start(0, anthropic_wire.tool_use(call, {})),
        anthropic_wire.partial_json(0, text),
        anthropic_wire.block_stop(0),
        *anthropic_wire.message_end("tool_use", 1),
    ]
    return [sse_reply(events), anthropic_wire.TEXT_STREAM_REPLY]


def _tool_result(path: str, text: str) -> tuple[str, list[dict[str, Any]]]:
    """What the tool's result says when the model calls it with ``text`` on ``path``,
    and the arguments the tool ran with."""
    ran: list[dict[str, Any]] = []
    tool = Tool("any", "Takes anything", {"type": "object"}, lambda ctx, a: ran.append(a) or "ok")
    streams = path.endswith("stream")
    with contextlib.ExitStack() as stack:
        if path == "scripted":
            provider: Any = ScriptedProvider(
                [ProviderResponse(tool_calls=(ToolCall("c1", "any", text),)), ProviderResponse()]
            )
        else:
            wire: Any = openai_wire if path.startswith("openai") else anthropic_wire
            server = stack.enter_context(WireServer())
            server.reply(*_replies(path, text))
            provider = stack.enter_context(wire.provider(server.url, sleep=lambda _: None))
        config = AgentConfig(
            provider=provider,
            model="m",
            tools=[tool],
            on_delta=(lambda _: None) if streams else None,
        )
        with Agent(config) as agent:
            agent.run("go")
            results = [m.content for m in agent.messages if m.role is Role.TOOL]
    assert len(results) == 1
    return results[0], ran


@settings(max_examples=30, deadline=None)
@given(pairs=st.lists(st.tuples(st.sampled_from(["a", "b"]), _VALUES), min_size=1, max_size=3))
def test_arguments_are_refused_alike_whichever_path_brought_the_call(
    pairs: list[tuple[str, str]],
) -> None:
    """Property: arguments naming a key twice or holding a number that is not finite
    are refused with the same words, and the tool does not run, whether the call came
    from OpenAI or Anthropic, answered whole or streamed, or from the scripted provider.
    (Anthropic's SDK reads a key given twice and NaN leniently; the adapter reads the
    input as the model wrote it.)"""
    text = "{" + ", ".join(f'"{key}": {value}' for key, value in pairs) + "}"
    keys = [key for key, _ in pairs]
    refused = len(set(keys)) < len(keys) or any(
        value in {"NaN", "Infinity", "-Infinity", "1e999"} for _, value in pairs
    )
    paths = ["scripted", "openai complete", "openai stream"]
    paths += ["anthropic complete", "anthropic stream"]
    outcomes = {path: _tool_result(path, text) for path in paths}
    # Anthropic's whole answer is re-read without its whitespace: offsets may differ.
    results = {re.sub(r"byte \d+", "byte N", result) for result, _ in outcomes.values()}
    assert len(results) == 1, outcomes
    for result, ran in outcomes.values():
        assert (result != "ok") == refused
        assert ran == ([] if refused else [json.loads(text)])
