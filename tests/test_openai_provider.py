"""OpenAIProvider against the real openai SDK and recorded Chat Completions answers."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import msgspec
import openai
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
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderServerError,
)
from covonaut_es.messages import StreamDelta, ToolSpec, Usage
from covonaut_es.providers import collect_stream
from covonaut_es.providers.openai import OpenAIProvider
from wire_server import WireServer, json_reply, sse_reply

MODEL = "gpt-4o-mini"
WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
WEATHER = ToolSpec("get_weather", "Current weather for a city.", WEATHER_SCHEMA)
QUESTION = (
    Message(Role.SYSTEM, "You are a terse weather assistant."),
    Message(Role.USER, "What's the weather in Paris?"),
)
CALL = ToolCall("call_FthC9qRpsL5kBpwwyw6c7j4k", "get_weather", '{"city":"Paris"}')
WEATHER_RESULT = '{"temp_c":18,"sky":"sunny"}'

# Recorded answers ----------------------------------------------------------------------

USAGE_DETAILS = {
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {
        "reasoning_tokens": 0,
        "audio_tokens": 0,
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0,
    },
}


def completion(message: dict[str, Any], finish_reason: str, usage: tuple[int, int]) -> Any:
    """A chat.completion body as the API sends it."""
    prompt, answer = usage
    return {
        "id": "chatcmpl-AXdDoJv8oQjGWL7bMo0U8rYRB9Fhb",
        "object": "chat.completion",
        "created": 1732614748,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "refusal": None, **message},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": answer,
            "total_tokens": prompt + answer,
            **USAGE_DETAILS,
        },
        "service_tier": "default",
        "system_fingerprint": "fp_0705bf87c0",
    }


TOOL_CALL_COMPLETION = completion(
    {
        "content": None,
        "tool_calls": [
            {
                "id": "call_FthC9qRpsL5kBpwwyw6c7j4k",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            }
        ],
    },
    "tool_calls",
    (82, 17),
)
ANSWER_COMPLETION = completion(
    {"content": "It's 18°C and sunny in Paris.", "annotations": []}, "stop", (120, 11)
)


def chunk(choices: list[Any], usage: dict[str, Any] | None = None) -> Any:
    """A chat.completion.chunk body as the API streams it."""
    return {
        "id": "chatcmpl-AXdE4PzMOJDf9NtkNUJ6Kvq6P1pxe",
        "object": "chat.completion.chunk",
        "created": 1732614764,
        "model": "gpt-4o-mini-2024-07-18",
        "service_tier": "default",
        "system_fingerprint": "fp_0705bf87c0",
        "choices": choices,
        "usage": usage,
    }


def delta(delta: dict[str, Any], finish_reason: str | None = None) -> list[Any]:
    return [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]


def usage_chunk(prompt: int, answer: int) -> Any:
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": answer,
        "total_tokens": prompt + answer,
        **USAGE_DETAILS,
    }
    return chunk([], usage)


TEXT_STREAM = [
    chunk(delta({"role": "assistant", "content": "", "refusal": None})),
    chunk(delta({"content": "It's"})),
    chunk(delta({"content": " 18°C"})),
    chunk(delta({"content": " and sunny"})),
    chunk(delta({"content": " in Paris."})),
    chunk(delta({}, "stop")),
    usage_chunk(120, 11),
    "[DONE]",
]


def tool_fragment(index: int, **fields: Any) -> Any:
    return chunk(delta({"tool_calls": [{"index": index, **fields}]}))


TOOL_CALL_STREAM = [
    chunk(delta({"role": "assistant", "content": None, "refusal": None})),
    tool_fragment(
        0,
        id="call_FthC9qRpsL5kBpwwyw6c7j4k",
        type="function",
        function={"name": "get_weather", "arguments": ""},
    ),
    tool_fragment(0, function={"arguments": '{"ci'}),
    tool_fragment(0, function={"arguments": 'ty":"Par'}),
    tool_fragment(0, function={"arguments": 'is"}'}),
    tool_fragment(
        1,
        id="call_o9AqCYvlHxxNe2dVvVeT1Jkf",
        type="function",
        function={"name": "get_weather", "arguments": ""},
    ),
    tool_fragment(1, function={"arguments": '{"city":'}),
    tool_fragment(1, function={"arguments": '"Lyon"}'}),
    chunk(delta({}, "tool_calls")),
    usage_chunk(82, 36),
    "[DONE]",
]


def error_body(message: str, type_: str, code: str | None) -> Any:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


RATE_LIMITED = error_body(
    "Rate limit reached for gpt-4o-mini in organization org-Ab12Cd34 on tokens per min "
    "(TPM): Limit 200000, Used 199622, Requested 1203. Please try again in 247ms.",
    "tokens",
    "rate_limit_exceeded",
)
SERVER_ERROR = error_body(
    "The server had an error while processing your request. Sorry about that!",
    "server_error",
    None,
)
BAD_REQUEST = error_body(
    "Invalid schema for function 'get_weather': 'strnig' is not valid under any of the "
    "given schemas.",
    "invalid_request_error",
    "invalid_function_parameters",
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
def provider(server: WireServer, sleeps: list[float]) -> Iterator[OpenAIProvider]:
    with OpenAIProvider(
        api_key="sk-test", base_url=f"{server.url}/v1", sleep=sleeps.append
    ) as provider:
        yield provider


def ask(*messages: Message, tools: tuple[ToolSpec, ...] = (WEATHER,)) -> ProviderRequest:
    return ProviderRequest(model=MODEL, messages=QUESTION + messages, tools=tools)


# Requests and answers ------------------------------------------------------------------


def test_tool_call_round_trip(server: WireServer, provider: OpenAIProvider) -> None:
    """A tool call comes back as a ToolCall and its result goes out as a tool message."""
    server.reply(json_reply(TOOL_CALL_COMPLETION), json_reply(ANSWER_COMPLETION))

    first = provider.complete(ask())
    assert first.tool_calls == (CALL,)
    assert first.content == ""
    assert first.finish_reason == "tool_calls"
    assert first.usage == Usage(82, 17)

    second = provider.complete(
        ask(
            Message(Role.ASSISTANT, "", tool_calls=first.tool_calls),
            Message(Role.TOOL, WEATHER_RESULT, tool_call_id=CALL.id, name="get_weather"),
        )
    )
    assert second.content == "It's 18°C and sunny in Paris."
    assert second.tool_calls == ()
    assert second.finish_reason == "stop"

    assert [request.path for request in server.requests] == ["/v1/chat/completions"] * 2
    assert server.requests[0].headers["authorization"] == "Bearer sk-test"
    assert server.bodies[0] == {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "You are a terse weather assistant."},
            {"role": "user", "content": "What's the weather in Paris?"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather for a city.",
                    "parameters": WEATHER_SCHEMA,
                },
            }
        ],
    }
    assert server.bodies[1]["messages"][2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": CALL.id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": CALL.id, "content": WEATHER_RESULT},
    ]


@pytest.mark.parametrize(
    ("vendor_reason", "reason"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("tool_calls", "tool_calls"),
        ("function_call", "tool_calls"),
        ("content_filter", "content_filter"),
    ],
)
def test_usage_and_finish_reason_mapping(
    server: WireServer, provider: OpenAIProvider, vendor_reason: str, reason: str
) -> None:
    """Prompt/completion tokens become input/output tokens; finish reasons map to the
    common vocabulary and unknown ones pass through."""
    server.reply(json_reply(completion({"content": "Hi"}, vendor_reason, (9, 4))))
    response = provider.complete(ask())
    assert response.usage == Usage(input_tokens=9, output_tokens=4)
    assert response.finish_reason == reason


def test_limits_and_temperature_are_sent(server: WireServer, sleeps: list[float]) -> None:
    """max_tokens goes out as max_completion_tokens, or as max_tokens if so configured;
    temperature goes out as is; unset options are left out."""
    server.reply(*[json_reply(ANSWER_COMPLETION)] * 3)
    request = ProviderRequest(model=MODEL, messages=QUESTION, max_tokens=256, temperature=0.2)
    url = f"{server.url}/v1"
    with OpenAIProvider(api_key="sk-test", base_url=url) as provider:
        provider.complete(request)
        provider.complete(ProviderRequest(model=MODEL, messages=QUESTION))
    with OpenAIProvider(api_key="sk-test", base_url=url, max_tokens_parameter="max_tokens") as old:
        old.complete(request)
    first, bare, legacy = server.bodies
    assert (first["max_completion_tokens"], first["temperature"]) == (256, 0.2)
    assert "max_tokens" not in first
    assert set(bare) == {"model", "messages"}
    assert legacy["max_tokens"] == 256
    assert "max_completion_tokens" not in legacy


def test_tool_message_without_call_id_is_rejected(
    server: WireServer, provider: OpenAIProvider
) -> None:
    """A tool message that names no call cannot be mapped: ProviderRequestError, nothing sent."""
    with pytest.raises(ProviderRequestError, match="tool_call_id"):
        provider.complete(ask(Message(Role.TOOL, "orphan")))
    assert server.requests == []


# Streaming -----------------------------------------------------------------------------


def test_streamed_text(server: WireServer, provider: OpenAIProvider) -> None:
    """Text arrives piece by piece; usage and finish reason come with the last delta."""
    server.reply(sse_reply((None, data) for data in TEXT_STREAM))
    deltas = list(provider.stream(ask()))
    assert [d.content for d in deltas] == ["It's", " 18°C", " and sunny", " in Paris.", ""]
    assert deltas[-1] == StreamDelta(usage=Usage(120, 11), finish_reason="stop")
    assert server.bodies[0]["stream"] is True
    assert server.bodies[0]["stream_options"] == {"include_usage": True}


def test_streamed_tool_calls(server: WireServer, provider: OpenAIProvider) -> None:
    """Tool call fragments are assembled, per index, into whole calls in the last delta."""
    server.reply(sse_reply((None, data) for data in TOOL_CALL_STREAM))
    response = collect_stream(provider.stream(ask()))
    assert response.tool_calls == (
        CALL,
        ToolCall("call_o9AqCYvlHxxNe2dVvVeT1Jkf", "get_weather", '{"city":"Lyon"}'),
    )
    assert response.content == ""
    assert response.usage == Usage(82, 36)
    assert response.finish_reason == "tool_calls"


# Errors and retries --------------------------------------------------------------------


def test_rate_limit_is_retried_after_retry_after(
    server: WireServer, provider: OpenAIProvider, sleeps: list[float]
) -> None:
    """A 429 is retried after the wait its retry-after header asks for."""
    server.reply(
        json_reply(RATE_LIMITED, status=429, headers={"retry-after": "1"}),
        json_reply(ANSWER_COMPLETION),
    )
    assert provider.complete(ask()).content == "It's 18°C and sunny in Paris."
    assert len(server.requests) == 2
    assert sleeps == [1.0]


def test_server_error_is_retried_with_backoff(
    server: WireServer, provider: OpenAIProvider, sleeps: list[float]
) -> None:
    """A 500 is retried after a jittered initial delay."""
    server.reply(json_reply(SERVER_ERROR, status=500), json_reply(ANSWER_COMPLETION))
    assert provider.complete(ask()).finish_reason == "stop"
    assert len(server.requests) == 2
    assert len(sleeps) == 1
    assert 0.25 <= sleeps[0] <= 0.5


def test_streamed_request_is_retried(
    server: WireServer, provider: OpenAIProvider, sleeps: list[float]
) -> None:
    """Opening a stream is retried like a plain call."""
    server.reply(
        json_reply(RATE_LIMITED, status=429),
        sse_reply((None, data) for data in TEXT_STREAM),
    )
    assert collect_stream(provider.stream(ask())).content == "It's 18°C and sunny in Paris."
    assert len(server.requests) == 2
    assert len(sleeps) == 1


def test_bad_request_is_not_retried(
    server: WireServer, provider: OpenAIProvider, sleeps: list[float]
) -> None:
    """A 400 raises ProviderRequestError with the API's message after exactly one request."""
    server.reply(json_reply(BAD_REQUEST, status=400))
    with pytest.raises(ProviderRequestError, match="Invalid schema") as caught:
        provider.complete(ask())
    assert caught.value.status_code == 400
    assert isinstance(caught.value.__cause__, openai.BadRequestError)
    assert len(server.requests) == 1
    assert sleeps == []


def test_gives_up_after_max_attempts(server: WireServer, sleeps: list[float]) -> None:
    """Server errors past RetryPolicy.max_attempts raise ProviderServerError."""
    server.reply(*[json_reply(SERVER_ERROR, status=503)] * 3)
    retry = RetryPolicy(max_attempts=3)
    url = f"{server.url}/v1"
    with (
        OpenAIProvider(api_key="sk-test", base_url=url, retry=retry, sleep=sleeps.append) as p,
        pytest.raises(ProviderServerError) as caught,
    ):
        p.complete(ask())
    assert caught.value.status_code == 503
    assert len(server.requests) == 3
    assert len(sleeps) == 2


def test_unreachable_server_raises_connection_error(sleeps: list[float]) -> None:
    """A refused connection is retried, then raised as ProviderConnectionError."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    retry = RetryPolicy(max_attempts=2)
    url = f"http://127.0.0.1:{port}/v1"
    with (
        OpenAIProvider(api_key="sk-test", base_url=url, retry=retry, sleep=sleeps.append) as p,
        pytest.raises(ProviderConnectionError) as caught,
    ):
        p.complete(ask())
    assert caught.value.status_code is None
    assert len(sleeps) == 1


def test_rate_limit_error_is_typed(server: WireServer, sleeps: list[float]) -> None:
    """A 429 that outlasts the policy raises ProviderRateLimitError with its retry-after."""
    server.reply(json_reply(RATE_LIMITED, status=429, headers={"retry-after": "20"}))
    url = f"{server.url}/v1"
    with (
        OpenAIProvider(api_key="sk-test", base_url=url, sleep=sleeps.append) as p,
        pytest.raises(ProviderRateLimitError) as caught,
    ):
        p.complete(ask())
    assert (caught.value.status_code, caught.value.retry_after) == (429, 20.0)
    assert len(server.requests) == 1  # 20 s is past max_delay: not waited for


# Clients -------------------------------------------------------------------------------


def test_prebuilt_client_is_used_without_its_retries(server: WireServer) -> None:
    """A caller's client serves the provider with the SDK's retries off and stays open."""
    server.reply(json_reply(SERVER_ERROR, status=500), json_reply(ANSWER_COMPLETION))
    client = openai.OpenAI(api_key="sk-test", base_url=f"{server.url}/v1", max_retries=5)
    with client:
        provider = OpenAIProvider(client=client, retry=RetryPolicy(max_attempts=1))
        with pytest.raises(ProviderServerError):
            provider.complete(ask())
        assert len(server.requests) == 1
        provider.close()
        assert not client.is_closed()
        assert client.chat.completions.create(model=MODEL, messages=[]).choices


def test_client_and_settings_conflict() -> None:
    """A client together with api_key, base_url or timeout is a ConfigurationError."""
    with (
        openai.OpenAI(api_key="sk-test", base_url="http://127.0.0.1:9/v1") as client,
        pytest.raises(ConfigurationError, match="configure the client itself"),
    ):
        OpenAIProvider(client=client, timeout=5)


def test_missing_api_key_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without api_key or $OPENAI_API_KEY the provider cannot be built."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAIProvider(base_url="http://127.0.0.1:9/v1")


# The package ---------------------------------------------------------------------------


def test_import_does_not_load_the_sdk() -> None:
    """``import covonaut_es`` leaves the openai package unimported until it is needed."""
    code = (
        "import sys, covonaut_es\n"
        "assert 'openai' not in sys.modules\n"
        "assert covonaut_es.OpenAIProvider.__name__ == 'OpenAIProvider'\n"
        "assert 'openai' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the openai package, OpenAIProvider raises an ImportError naming the extra."""
    monkeypatch.setitem(sys.modules, "openai", None)
    monkeypatch.delitem(sys.modules, "covonaut_es.providers.openai")
    monkeypatch.delitem(vars(covonaut_es), "OpenAIProvider", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'covonaut-es\[openai\]'"):
        _ = covonaut_es.OpenAIProvider


# End to end ----------------------------------------------------------------------------


def test_agent_runs_through_a_tool_call(server: WireServer, provider: OpenAIProvider) -> None:
    """An Agent on OpenAIProvider calls the tool, sends its result and returns the answer."""
    server.reply(json_reply(TOOL_CALL_COMPLETION), json_reply(ANSWER_COMPLETION))
    seen: list[dict[str, Any]] = []

    def get_weather(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        seen.append(args)
        return {"temp_c": 18, "sky": "sunny"}

    tool = Tool("get_weather", WEATHER.description, WEATHER_SCHEMA, get_weather)
    config = AgentConfig(
        provider=provider,
        model=MODEL,
        tools=[tool],
        system_prompt="You are a terse weather assistant.",
    )
    with Agent(config) as agent:
        assert agent.run("What's the weather in Paris?") == "It's 18°C and sunny in Paris."
        assert agent.usage == Usage(82 + 120, 17 + 11)
    assert seen == [{"city": "Paris"}]
    assert server.bodies[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": CALL.id,
        "content": WEATHER_RESULT,
    }


def test_final_turn_forbids_tool_calls_but_keeps_tools(
    server: WireServer, provider: OpenAIProvider
) -> None:
    """tool_choice="none" is sent as such; the tools stay declared."""
    server.reply(json_reply(ANSWER_COMPLETION))
    request = msgspec.structs.replace(ask(), tool_choice="none")
    provider.complete(request)
    assert server.bodies[0]["tool_choice"] == "none"
    assert server.bodies[0]["tools"]
