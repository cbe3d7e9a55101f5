"""AnthropicProvider against the real anthropic SDK and recorded Messages API answers."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import anthropic
import msgspec
import pytest

import covonaut_es
from covonaut_es import (
    Agent,
    AgentConfig,
    Message,
    ProviderRequest,
    RetryPolicy,
    Role,
    Tool,
    ToolCall,
    ToolContext,
)
from covonaut_es.errors import (
    ConfigurationError,
    ProviderConnectionError,
    ProviderRequestError,
    ProviderServerError,
)
from covonaut_es.messages import StreamDelta, ToolSpec, Usage
from covonaut_es.providers import collect_stream
from covonaut_es.providers.anthropic import AnthropicProvider
from wire_server import WireServer, json_reply, sse_reply

# Not a real model: the SDK warns about deprecated model names, and a real name may
# join its list one day.
MODEL = "claude-wire-test"
WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
WEATHER = ToolSpec("get_weather", "Current weather for a city.", WEATHER_SCHEMA)
SYSTEM = "You are a terse weather assistant."
QUESTION = (
    Message(Role.SYSTEM, SYSTEM),
    Message(Role.USER, "What's the weather in Paris and Lyon?"),
)
PARIS = ToolCall("toolu_01A09q90qw90lq917835lq9", "get_weather", '{"city":"Paris"}')
LYON = ToolCall("toolu_01XNxb5Xr4r3BNCbXVEvzA3S", "get_weather", '{"city":"Lyon"}')
PARIS_RESULT = '{"temp_c":18,"sky":"sunny"}'
LYON_RESULT = '{"temp_c":21,"sky":"cloudy"}'
ANSWER = "Paris: 18°C and sunny. Lyon: 21°C and cloudy."

# Recorded answers ----------------------------------------------------------------------


def usage(input_tokens: int, output_tokens: int, *, cache_read: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cache_read,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def message(content: list[Any], stop_reason: str, tokens: dict[str, Any]) -> Any:
    """A message body as the API sends it."""
    return {
        "id": "msg_01Aq9w938a90dw8qT7DL9mTz",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": tokens,
    }


def tool_use(call: ToolCall, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool_use content block, as the API sends it and as it goes back."""
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": arguments}


TOOL_USE_MESSAGE = message(
    [
        {"type": "text", "text": "I'll look up both cities."},
        tool_use(PARIS, {"city": "Paris"}),
        tool_use(LYON, {"city": "Lyon"}),
    ],
    "tool_use",
    usage(384, 96),
)
ANSWER_MESSAGE = message([{"type": "text", "text": ANSWER}], "end_turn", usage(512, 21))


def message_start(input_tokens: int) -> tuple[str, Any]:
    start = message([], "", usage(input_tokens, 1))
    start["stop_reason"] = None
    return ("message_start", {"type": "message_start", "message": start})


def block_start(index: int, block: dict[str, Any]) -> tuple[str, Any]:
    return (
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def block_delta(index: int, delta: dict[str, Any]) -> tuple[str, Any]:
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def text(index: int, piece: str) -> tuple[str, Any]:
    return block_delta(index, {"type": "text_delta", "text": piece})


def partial_json(index: int, piece: str) -> tuple[str, Any]:
    return block_delta(index, {"type": "input_json_delta", "partial_json": piece})


def block_stop(index: int) -> tuple[str, Any]:
    return ("content_block_stop", {"type": "content_block_stop", "index": index})


def message_end(stop_reason: str, output_tokens: int) -> list[tuple[str, Any]]:
    return [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


PING = ("ping", {"type": "ping"})

TEXT_STREAM = [
    message_start(512),
    block_start(0, {"type": "text", "text": ""}),
    PING,
    text(0, "Paris: 18°C"),
    text(0, " and sunny."),
    text(0, " Lyon: 21°C and cloudy."),
    block_stop(0),
    *message_end("end_turn", 21),
]

TOOL_USE_STREAM = [
    message_start(384),
    block_start(0, {"type": "text", "text": ""}),
    text(0, "I'll look up"),
    text(0, " both cities."),
    block_stop(0),
    block_start(1, {"type": "tool_use", "id": PARIS.id, "name": "get_weather", "input": {}}),
    partial_json(1, ""),
    partial_json(1, '{"city": "Pa'),
    partial_json(1, 'ris"}'),
    block_stop(1),
    block_start(2, {"type": "tool_use", "id": LYON.id, "name": "get_weather", "input": {}}),
    partial_json(2, '{"city"'),
    partial_json(2, ': "Lyon"}'),
    block_stop(2),
    *message_end("tool_use", 96),
]


def error_body(type_: str, message: str) -> Any:
    return {
        "type": "error",
        "error": {"type": type_, "message": message},
        "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
    }


RATE_LIMITED = error_body(
    "rate_limit_error",
    "This request would exceed the rate limit for your organization of 50,000 input "
    "tokens per minute. Please reduce the prompt length or try again later.",
)
SERVER_ERROR = error_body("api_error", "Internal server error")
OVERLOADED = error_body("overloaded_error", "Overloaded")
BAD_REQUEST = error_body(
    "invalid_request_error",
    "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
    "toolu_01A09q90qw90lq917835lq9. Each `tool_result` block must have a corresponding "
    "`tool_use` block in the previous message.",
)

# Fixtures ------------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[WireServer]:
    with WireServer() as server:
        yield server


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def provider(server: WireServer, sleeps: list[float]) -> Iterator[AnthropicProvider]:
    with AnthropicProvider(
        api_key="sk-ant-test", base_url=server.url, sleep=sleeps.append
    ) as provider:
        yield provider


def ask(*messages: Message, tools: tuple[ToolSpec, ...] = (WEATHER,)) -> ProviderRequest:
    return ProviderRequest(model=MODEL, messages=QUESTION + messages, tools=tools)


# Requests and answers ------------------------------------------------------------------


def test_tool_call_round_trip(server: WireServer, provider: AnthropicProvider) -> None:
    """tool_use blocks come back as ToolCalls with compact JSON arguments; their results
    go out as tool_result blocks merged into one user message."""
    server.reply(json_reply(TOOL_USE_MESSAGE), json_reply(ANSWER_MESSAGE))

    first = provider.complete(ask())
    assert first.content == "I'll look up both cities."
    assert first.tool_calls == (PARIS, LYON)
    assert first.finish_reason == "tool_calls"
    assert first.usage == Usage(384, 96)

    second = provider.complete(
        ask(
            Message(Role.ASSISTANT, first.content, tool_calls=first.tool_calls),
            Message(Role.TOOL, PARIS_RESULT, tool_call_id=PARIS.id, name="get_weather"),
            Message(Role.TOOL, LYON_RESULT, tool_call_id=LYON.id, name="get_weather"),
        )
    )
    assert second.content == ANSWER
    assert second.finish_reason == "stop"

    assert [request.path for request in server.requests] == ["/v1/messages"] * 2
    # Older SDKs send the key as x-api-key, newer ones as a bearer token.
    assert any("sk-ant-test" in value for value in server.requests[0].headers.values())
    assert "anthropic-version" in server.requests[0].headers
    assert server.bodies[0] == {
        "model": MODEL,
        "max_tokens": 4096,
        "system": SYSTEM,
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "What's the weather in Paris and Lyon?"}],
            }
        ],
        "tools": [
            {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "input_schema": WEATHER_SCHEMA,
            }
        ],
    }
    assert server.bodies[1]["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "I'll look up both cities."},
                {
                    "type": "tool_use",
                    "id": PARIS.id,
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
                {
                    "type": "tool_use",
                    "id": LYON.id,
                    "name": "get_weather",
                    "input": {"city": "Lyon"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": PARIS.id, "content": PARIS_RESULT},
                {"type": "tool_result", "tool_use_id": LYON.id, "content": LYON_RESULT},
            ],
        },
    ]


def test_system_messages_join_the_system_prompt(
    server: WireServer, provider: AnthropicProvider
) -> None:
    """Every system message, even a late one, goes into the system prompt in order; a
    user message after tool results joins their user message; empty messages are left out."""
    server.reply(json_reply(ANSWER_MESSAGE))
    provider.complete(
        ask(
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
            "content": [
                {
                    "type": "tool_use",
                    "id": PARIS.id,
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": PARIS.id, "content": PARIS_RESULT},
                {"type": "text", "text": "Only Paris, please."},
            ],
        },
    ]


@pytest.mark.parametrize(
    ("stop_reason", "reason"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("tool_use", "tool_calls"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("refusal", "refusal"),
        ("pause_turn", "pause_turn"),
    ],
)
def test_finish_reason_mapping(
    server: WireServer, provider: AnthropicProvider, stop_reason: str, reason: str
) -> None:
    """Stop reasons map to the common vocabulary; the others pass through."""
    server.reply(json_reply(message([{"type": "text", "text": "Hi"}], stop_reason, usage(9, 4))))
    assert provider.complete(ask()).finish_reason == reason


def test_usage_counts_cached_input(server: WireServer, provider: AnthropicProvider) -> None:
    """Input tokens include the prompt tokens read from or written to the cache."""
    tokens = usage(100, 7, cache_read=300)
    tokens["cache_creation_input_tokens"] = 20
    server.reply(json_reply(message([{"type": "text", "text": "Hi"}], "end_turn", tokens)))
    assert provider.complete(ask()).usage == Usage(input_tokens=420, output_tokens=7)


def test_limits_and_temperature_are_sent(server: WireServer) -> None:
    """max_tokens comes from the request, else the provider's default; temperature is
    sent only when set."""
    server.reply(*[json_reply(ANSWER_MESSAGE)] * 2)
    with AnthropicProvider(api_key="sk-ant-test", base_url=server.url, max_tokens=1024) as p:
        p.complete(ProviderRequest(model=MODEL, messages=QUESTION, max_tokens=256, temperature=0.2))
        p.complete(ProviderRequest(model=MODEL, messages=QUESTION))
    first, bare = server.bodies
    assert (first["max_tokens"], first["temperature"]) == (256, 0.2)
    assert bare["max_tokens"] == 1024
    assert "temperature" not in bare


def test_tool_message_without_call_id_is_rejected(
    server: WireServer, provider: AnthropicProvider
) -> None:
    """A tool message that names no call cannot be mapped: ProviderRequestError, nothing sent."""
    with pytest.raises(ProviderRequestError, match="tool_call_id"):
        provider.complete(ask(Message(Role.TOOL, "orphan")))
    assert server.requests == []


# Streaming -----------------------------------------------------------------------------


def test_streamed_text(server: WireServer, provider: AnthropicProvider) -> None:
    """Text deltas arrive piece by piece; usage and finish reason come with the last delta."""
    server.reply(sse_reply(TEXT_STREAM))
    deltas = list(provider.stream(ask()))
    assert [d.content for d in deltas] == [
        "Paris: 18°C",
        " and sunny.",
        " Lyon: 21°C and cloudy.",
        "",
    ]
    assert deltas[-1] == StreamDelta(usage=Usage(512, 21), finish_reason="stop")
    assert server.bodies[0]["stream"] is True


def test_streamed_tool_calls(server: WireServer, provider: AnthropicProvider) -> None:
    """input_json_delta fragments are assembled into whole calls, encoded as compact JSON
    like the same calls answered in one piece."""
    server.reply(sse_reply(TOOL_USE_STREAM))
    deltas = list(provider.stream(ask()))
    assert deltas[-1].tool_calls == (PARIS, LYON)
    assert all(not d.tool_calls for d in deltas[:-1])
    response = collect_stream(deltas)
    assert response.content == "I'll look up both cities."
    assert response.usage == Usage(384, 96)
    assert response.finish_reason == "tool_calls"


def test_error_event_inside_a_stream(server: WireServer, provider: AnthropicProvider) -> None:
    """An error event after text has streamed raises a typed error and is not retried."""
    events = [*TEXT_STREAM[:4], ("error", OVERLOADED)]
    server.reply(sse_reply(events))
    stream = provider.stream(ask())
    assert next(stream).content == "Paris: 18°C"
    with pytest.raises(ProviderServerError, match="Overloaded") as caught:
        next(stream)
    assert caught.value.status_code == 529
    assert len(server.requests) == 1


# Errors and retries --------------------------------------------------------------------


def test_rate_limit_is_retried_after_retry_after(
    server: WireServer, provider: AnthropicProvider, sleeps: list[float]
) -> None:
    """A 429 is retried after the wait its retry-after header asks for."""
    server.reply(
        json_reply(RATE_LIMITED, status=429, headers={"retry-after": "1"}),
        json_reply(ANSWER_MESSAGE),
    )
    assert provider.complete(ask()).content == ANSWER
    assert len(server.requests) == 2
    assert sleeps == [1.0]


@pytest.mark.parametrize(("status", "body"), [(500, SERVER_ERROR), (529, OVERLOADED)])
def test_server_error_is_retried_with_backoff(
    server: WireServer,
    provider: AnthropicProvider,
    sleeps: list[float],
    status: int,
    body: Any,
) -> None:
    """A 500 or a 529 "overloaded" is retried after a jittered initial delay."""
    server.reply(json_reply(body, status=status), json_reply(ANSWER_MESSAGE))
    assert provider.complete(ask()).content == ANSWER
    assert len(server.requests) == 2
    assert len(sleeps) == 1
    assert 0.25 <= sleeps[0] <= 0.5


def test_streamed_request_is_retried(
    server: WireServer, provider: AnthropicProvider, sleeps: list[float]
) -> None:
    """Opening a stream is retried like a plain call."""
    server.reply(json_reply(OVERLOADED, status=529), sse_reply(TEXT_STREAM))
    assert collect_stream(provider.stream(ask())).content == ANSWER
    assert len(server.requests) == 2
    assert len(sleeps) == 1


def test_bad_request_is_not_retried(
    server: WireServer, provider: AnthropicProvider, sleeps: list[float]
) -> None:
    """A 400 raises ProviderRequestError with the API's message after exactly one request."""
    server.reply(json_reply(BAD_REQUEST, status=400))
    with pytest.raises(ProviderRequestError, match="unexpected `tool_use_id`") as caught:
        provider.complete(ask())
    assert caught.value.status_code == 400
    assert isinstance(caught.value.__cause__, anthropic.BadRequestError)
    assert len(server.requests) == 1
    assert sleeps == []


def test_unreachable_server_raises_connection_error(sleeps: list[float]) -> None:
    """A refused connection is retried, then raised as ProviderConnectionError."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    retry = RetryPolicy(max_attempts=2)
    url = f"http://127.0.0.1:{port}"
    with (
        AnthropicProvider(api_key="k", base_url=url, retry=retry, sleep=sleeps.append) as p,
        pytest.raises(ProviderConnectionError),
    ):
        p.complete(ask())
    assert len(sleeps) == 1


# Clients -------------------------------------------------------------------------------


def test_prebuilt_client_is_used_without_its_retries(server: WireServer) -> None:
    """A caller's client serves the provider with the SDK's retries off and stays open."""
    server.reply(json_reply(OVERLOADED, status=529))
    with anthropic.Anthropic(api_key="sk-ant-test", base_url=server.url, max_retries=5) as client:
        provider = AnthropicProvider(client=client, retry=RetryPolicy(max_attempts=1))
        with pytest.raises(ProviderServerError):
            provider.complete(ask())
        assert len(server.requests) == 1
        provider.close()
        assert not client.is_closed()


def test_client_and_settings_conflict() -> None:
    """A client together with api_key, base_url or timeout is a ConfigurationError."""
    with (
        anthropic.Anthropic(api_key="sk-ant-test", base_url="http://127.0.0.1:9") as client,
        pytest.raises(ConfigurationError, match="configure the client itself"),
    ):
        AnthropicProvider(client=client, api_key="other")


# The package ---------------------------------------------------------------------------


def test_import_does_not_load_the_sdk() -> None:
    """``import covonaut_es`` leaves the anthropic package unimported until it is needed."""
    code = (
        "import sys, covonaut_es\n"
        "assert 'anthropic' not in sys.modules\n"
        "assert covonaut_es.AnthropicProvider.__name__ == 'AnthropicProvider'\n"
        "assert 'anthropic' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the anthropic package, AnthropicProvider raises an ImportError naming the extra."""
    monkeypatch.setitem(sys.modules, "anthropic", None)
    monkeypatch.delitem(sys.modules, "covonaut_es.providers.anthropic")
    monkeypatch.delitem(vars(covonaut_es), "AnthropicProvider", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'covonaut-es\[anthropic\]'"):
        _ = covonaut_es.AnthropicProvider


# End to end ----------------------------------------------------------------------------


def test_agent_runs_through_tool_calls(server: WireServer, provider: AnthropicProvider) -> None:
    """An Agent on AnthropicProvider calls the tools, sends their results and returns the
    answer."""
    server.reply(json_reply(TOOL_USE_MESSAGE), json_reply(ANSWER_MESSAGE))
    weather = {"Paris": {"temp_c": 18, "sky": "sunny"}, "Lyon": {"temp_c": 21, "sky": "cloudy"}}

    def get_weather(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        return weather[args["city"]]

    tool = Tool("get_weather", WEATHER.description, WEATHER_SCHEMA, get_weather)
    config = AgentConfig(provider=provider, model=MODEL, tools=[tool], system_prompt=SYSTEM)
    with Agent(config) as agent:
        assert agent.run("What's the weather in Paris and Lyon?") == ANSWER
        assert agent.usage == Usage(384 + 512, 96 + 21)
    second = server.bodies[1]
    assert second["system"] == SYSTEM
    assert second["messages"][-1] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": PARIS.id, "content": PARIS_RESULT},
            {"type": "tool_result", "tool_use_id": LYON.id, "content": LYON_RESULT},
        ],
    }


def test_final_turn_forbids_tool_calls_but_keeps_tools(
    server: WireServer, provider: AnthropicProvider
) -> None:
    """tool_choice="none" is sent as {"type": "none"}; the tools stay declared."""
    server.reply(json_reply(ANSWER_MESSAGE))
    provider.complete(msgspec.structs.replace(ask(), tool_choice="none"))
    assert server.bodies[0]["tool_choice"] == {"type": "none"}
    assert server.bodies[0]["tools"]
