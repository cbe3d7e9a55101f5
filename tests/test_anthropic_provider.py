"""What only AnthropicProvider does; what every adapter does is in
test_provider_contract.py."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import msgspec
import pytest
from anthropic.types import ToolChoiceParam, ToolParam
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

import anthropic_wire
from anthropic_wire import PARIS, block_start, block_stop, message, partial_json, usage_body
from covonaut_es import Agent, AgentConfig, Message, ProviderResponse, Role, Tool, ToolContext
from covonaut_es.errors import ProviderError, ProviderServerError
from covonaut_es.messages import MAX_TOKEN_COUNT, OutputSpec, Usage
from covonaut_es.providers import collect_stream
from covonaut_es.providers.anthropic import AnthropicProvider
from provider_wire import PARIS_RESULT, SYSTEM, WEATHER, WEATHER_BY_CITY, WEATHER_SCHEMA, ask
from wire_server import WireServer, json_reply, sse_reply


@pytest.fixture
def wire() -> ModuleType:
    """The vendor of the shared ``provider`` fixture."""
    return anthropic_wire


def test_system_messages_join_the_system_prompt(
    server: WireServer, provider: AnthropicProvider
) -> None:
    """Every system message, even a late one, goes into the system prompt in order; a
    user message after tool results joins their user message; empty messages are left out."""
    server.reply(anthropic_wire.ANSWER_REPLY)
    provider.complete(
        ask(
            anthropic_wire,
            Message(Role.ASSISTANT, "", tool_calls=(PARIS,)),
            Message(Role.TOOL, PARIS_RESULT, tool_call_id=PARIS.id),
            Message(Role.USER, "Only Paris, please."),
            Message(Role.ASSISTANT, ""),
            Message(Role.SYSTEM, "This is the last turn: answer now."),
            tools=(),
        )
    )
    body = server.bodies[0]
    assert body["system"] == f"{SYSTEM}\n\nThis is the last turn: answer now."
    assert "tools" not in body
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [anthropic_wire.tool_use(PARIS, {"city": "Paris"})],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": PARIS.id, "content": PARIS_RESULT},
                {"type": "text", "text": "Only Paris, please."},
            ],
        },
    ]


def test_usage_counts_cached_input(server: WireServer, provider: AnthropicProvider) -> None:
    """Input tokens include the prompt tokens read from or written to the cache."""
    tokens = usage_body(100, 7, cache_read=300)
    tokens["cache_creation_input_tokens"] = 20
    server.reply(json_reply(message([{"type": "text", "text": "Hi"}], "end_turn", tokens)))
    assert provider.complete(ask(anthropic_wire)).usage == Usage(input_tokens=420, output_tokens=7)


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("field", ["cache_read_input_tokens", "cache_creation_input_tokens"])
def test_a_negative_cache_count_refuses_the_response(
    server: WireServer, provider: AnthropicProvider, field: str, streamed: bool
) -> None:
    """A negative count of cached prompt tokens refuses the response with ProviderError
    naming it; it was subtracted from the input tokens, unseen (helper-173)."""
    tokens = usage_body(100, 7)
    tokens[field] = -30
    answer = message([{"type": "text", "text": "Hi"}], "end_turn", tokens)
    if streamed:
        start = {**answer, "content": [], "stop_reason": None}
        server.reply(sse_reply([("message_start", {"type": "message_start", "message": start})]))
    else:
        server.reply(json_reply(answer))
    with pytest.raises(ProviderError, match=f"-30 as usage.{field}"):
        if streamed:
            collect_stream(provider.stream(ask(anthropic_wire)))
        else:
            provider.complete(ask(anthropic_wire))


@settings(max_examples=30, deadline=None)
@given(
    counts=st.tuples(*[st.integers(0, MAX_TOKEN_COUNT)] * 3),
    streamed=st.booleans(),
)
def test_input_tokens_summed_past_the_bound_refuse_the_response(
    counts: tuple[int, int, int], streamed: bool
) -> None:
    """Property: the input tokens and the two cache counts, each within bounds, are
    taken as their sum when it is within MAX_TOKEN_COUNT, and refuse the response
    otherwise. The sum left the adapter past the bound (helper-182)."""
    tokens = usage_body(counts[0], 7, cache_read=counts[1])
    tokens["cache_creation_input_tokens"] = counts[2]
    answer = message([{"type": "text", "text": "Hi"}], "end_turn", tokens)
    start = {**answer, "content": [], "stop_reason": None}
    events = [("message_start", {"type": "message_start", "message": start})]
    events += anthropic_wire.message_end("end_turn", 7)
    with WireServer() as server, anthropic_wire.provider(server.url) as provider:
        server.reply(sse_reply(events) if streamed else json_reply(answer))

        def answered() -> ProviderResponse:
            if streamed:
                return collect_stream(provider.stream(ask(anthropic_wire)))
            return provider.complete(ask(anthropic_wire))

        if sum(counts) > MAX_TOKEN_COUNT:
            with pytest.raises(ProviderError, match=r"as usage\.input_tokens with its cache"):
                answered()
            return
        assert answered().usage == Usage(sum(counts), 7)


def test_max_tokens_defaults_to_the_providers(server: WireServer) -> None:
    """A request that sets no max_tokens gets the provider's, as the API needs one."""
    server.reply(anthropic_wire.ANSWER_REPLY)
    with AnthropicProvider(api_key="sk-ant-test", base_url=server.url, max_tokens=1024) as p:
        p.complete(ask(anthropic_wire))
    assert server.bodies[0]["max_tokens"] == 1024


def test_error_event_inside_a_stream(server: WireServer, provider: AnthropicProvider) -> None:
    """An error event after text has streamed raises a typed error and is not retried."""
    events = [*anthropic_wire.TEXT_STREAM[:4], ("error", anthropic_wire.OVERLOADED)]
    server.reply(sse_reply(events))
    stream = provider.stream(ask(anthropic_wire))
    assert next(stream).content == "Paris: 18°C"
    with pytest.raises(ProviderServerError, match="Overloaded") as caught:
        next(stream)
    assert caught.value.status_code == 529
    assert len(server.requests) == 1


class Forecast(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    city: str
    temp_c: int


FORECAST_INPUT = {"city": "Paris", "temp_c": 18}


def answer_use(answer_input: Any) -> dict[str, Any]:
    """The tool_use block of a typed answer."""
    return {"type": "tool_use", "id": "toolu_answer", "name": "final_answer", "input": answer_input}


def weather_tool(ctx: ToolContext, args: dict[str, Any]) -> Any:
    return WEATHER_BY_CITY[args["city"]]


def test_a_typed_answer_is_a_tool_the_model_must_call(server: WireServer, provider: Any) -> None:
    """A typed agent with tools offers the answer as one more tool and makes the model
    call some tool; the answer tool's input comes back as the typed output, not as a
    call. The tool and the choice are what the SDK's own types take."""
    server.reply(
        anthropic_wire.TOOL_CALL_REPLY,
        json_reply(message([answer_use(FORECAST_INPUT)], "tool_use", usage_body(600, 30))),
    )
    tool = Tool("get_weather", WEATHER.description, WEATHER_SCHEMA, weather_tool)
    config = AgentConfig(
        provider=provider, model=anthropic_wire.MODEL, tools=[tool], output_type=Forecast
    )
    with Agent(config) as agent:
        assert agent.run(anthropic_wire.QUESTION) == '{"city":"Paris","temp_c":18}'
        assert agent.output == Forecast("Paris", 18)
        assert agent.in_doubt == ()
    first, second = server.bodies
    answer_tool = first["tools"][-1]
    TypeAdapter(ToolParam).validate_python(answer_tool)
    assert answer_tool["name"] == "final_answer"
    assert answer_tool["input_schema"]["required"] == ["city", "temp_c"]
    assert first["tool_choice"] == second["tool_choice"] == {"type": "any"}
    TypeAdapter(ToolChoiceParam).validate_python(first["tool_choice"])


def test_the_answer_tool_is_forced_without_other_tools_and_on_the_last_turn(
    server: WireServer, provider: Any
) -> None:
    """With no other tool, or on the last turn, the choice names the answer tool; a
    refused answer goes back as text, followed by the reason."""
    server.reply(
        json_reply(message([answer_use({"city": 3})], "tool_use", usage_body(50, 5))),
        json_reply(message([answer_use(FORECAST_INPUT)], "tool_use", usage_body(90, 5))),
    )
    config = AgentConfig(provider=provider, model=anthropic_wire.MODEL, output_type=Forecast)
    with Agent(config) as agent:
        agent.run(anthropic_wire.QUESTION)
        assert agent.output == Forecast("Paris", 18)
    forced = {"type": "tool", "name": "final_answer"}
    assert [body["tool_choice"] for body in server.bodies] == [forced, forced]
    refused, reason = server.bodies[1]["messages"][-2:]
    assert refused == {"role": "assistant", "content": [{"type": "text", "text": '{"city":3}'}]}
    assert "Expected `str`, got `int`" in reason["content"][0]["text"]
    last_turn = ask(anthropic_wire, output=OutputSpec("final_answer", {"type": "object"}))
    server.reply(anthropic_wire.ANSWER_REPLY)
    provider.complete(msgspec.structs.replace(last_turn, tool_choice="none"))
    assert server.bodies[-1]["tool_choice"] == forced


def test_a_streamed_typed_answer_is_text(server: WireServer, provider: Any) -> None:
    """The input of a streamed answer tool arrives as text pieces and adds up to the
    answer; no call is made of it."""
    events = [
        anthropic_wire.message_start(40),
        block_start(0, {**answer_use({}), "input": {}}),
        partial_json(0, '{"city": "Pa'),
        partial_json(0, 'ris", "temp_c": 18}'),
        block_stop(0),
        *anthropic_wire.message_end("tool_use", 12),
    ]
    server.reply(sse_reply(events))
    request = ask(anthropic_wire, output=OutputSpec("final_answer", {"type": "object"}))
    response = collect_stream(provider.stream(request))
    assert (response.content, response.tool_calls) == ('{"city": "Paris", "temp_c": 18}', ())


def test_a_content_block_started_twice_is_refused(server: WireServer, provider: Any) -> None:
    """A content_block_start repeating an open block's index would replace the call whose
    pieces were already shown: the stream is refused instead."""
    events = [
        anthropic_wire.message_start(10),
        anthropic_wire.block_start(0, anthropic_wire.tool_use(anthropic_wire.PARIS, {})),
        anthropic_wire.partial_json(0, '{"city":"Paris"}'),
        anthropic_wire.block_start(0, anthropic_wire.tool_use(anthropic_wire.LYON, {})),
        anthropic_wire.block_stop(0),
        *anthropic_wire.message_end("tool_use", 5),
    ]
    server.reply(sse_reply(events))
    with pytest.raises(ProviderError, match="started content block 0 twice"):
        list(provider.stream(ask(anthropic_wire)))


def test_a_tool_use_block_never_closed_is_refused(server: WireServer, provider: Any) -> None:
    """A stream that ends with a tool_use block still open is refused, not answered
    without that call (or, were it the only one, with it rebuilt from its pieces)."""
    events = [
        anthropic_wire.message_start(10),
        anthropic_wire.block_start(0, anthropic_wire.tool_use(anthropic_wire.PARIS, {})),
        anthropic_wire.partial_json(0, '{"city":"Paris"}'),
        *anthropic_wire.message_end("tool_use", 5),
    ]
    server.reply(sse_reply(events))
    with pytest.raises(ProviderError, match=r"tool_use block\(s\) \[0\] never closed"):
        list(provider.stream(ask(anthropic_wire)))


def _open_at(events: list[tuple[str, Any]], position: int) -> set[int]:
    """The content blocks open before ``events[position]``."""
    opened = set[int]()
    for name, data in events[:position]:
        if name == "content_block_start":
            opened.add(data["index"])
        elif name == "content_block_stop":
            opened.discard(data["index"])
    return opened


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_piece_or_stop_of_a_block_not_open_is_refused(data: st.DataObject) -> None:
    """Property: a content_block_delta or content_block_stop, anywhere in a stream, for a
    block index that is not open (never started, or already stopped) is a ProviderError.
    A text delta for a block never started was taken into the answer (helper-182)."""
    events = list(anthropic_wire.TOOL_USE_STREAM)
    position = data.draw(st.integers(1, len(events) - 1))  # after message_start
    index = data.draw(st.integers(0, 5).filter(lambda i: i not in _open_at(events, position)))
    event = data.draw(
        st.sampled_from(
            [
                anthropic_wire.text(index, "ghost"),
                anthropic_wire.partial_json(index, '{"city":"Lyon"}'),
                block_stop(index),
            ]
        )
    )
    events.insert(position, event)
    with WireServer() as server, anthropic_wire.provider(server.url) as provider:
        server.reply(sse_reply(events))
        with pytest.raises(ProviderError, match=f"for content block {index}, which was never"):
            list(provider.stream(ask(anthropic_wire)))
