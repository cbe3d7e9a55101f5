"""The Anthropic Messages API wire format for the provider tests: recorded answers, and
what the adapter must make of them (see ``provider_wire.VendorWire``)."""

from __future__ import annotations

from typing import Any

import anthropic
from anthropic.lib.credentials import StaticToken

from covonaut_es import Message, ProviderResponse, Role, ToolCall
from covonaut_es.messages import Usage
from covonaut_es.providers.anthropic import AnthropicProvider
from provider_wire import LYON_RESULT, PARIS_RESULT, SYSTEM, WEATHER_SCHEMA
from wire_server import json_reply, sse_reply

SDK = "anthropic"
MODULE = "covonaut_es.providers.anthropic"
PROVIDER = "AnthropicProvider"
# Not a real model: the SDK warns about deprecated model names, and a real name may
# join its list one day.
MODEL = "claude-wire-test"
# The model that answers, as the API names it.
ANSWERED_MODEL = "claude-sonnet-4-6"
QUESTION = "What's the weather in Paris and Lyon?"
API_KEY = "sk-ant-test"
KEY_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
# A provider of tokens, as a profile or workload identity federation gives.
OTHER_CREDENTIAL = {"api_key": None, "credentials": StaticToken(API_KEY)}
PARIS = ToolCall("toolu_01A09q90qw90lq917835lq9", "get_weather", '{"city":"Paris"}')
LYON = ToolCall("toolu_01XNxb5Xr4r3BNCbXVEvzA3S", "get_weather", '{"city":"Lyon"}')
ANSWER = "Paris: 18°C and sunny. Lyon: 21°C and cloudy."


def provider(url: str, **options: Any) -> AnthropicProvider:
    options.setdefault("api_key", API_KEY)
    return AnthropicProvider(base_url=url, **options)


def client(url: str, **options: Any) -> anthropic.Anthropic:
    options.setdefault("api_key", API_KEY)
    return anthropic.Anthropic(base_url=url, **options)


def sdk_ask(client: anthropic.Anthropic) -> None:
    client.messages.create(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": QUESTION}]
    )


# Recorded answers ----------------------------------------------------------------------


def usage_body(input_tokens: int, output_tokens: int, *, cache_read: int = 0) -> dict[str, Any]:
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
        "model": ANSWERED_MODEL,
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
    usage_body(384, 96),
)
ANSWER_MESSAGE = message([{"type": "text", "text": ANSWER}], "end_turn", usage_body(512, 21))


def message_start(input_tokens: int) -> tuple[str, Any]:
    start = message([], "", usage_body(input_tokens, 1))
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


def finished(reason: str, usage: tuple[int, int]) -> Any:
    return json_reply(message([{"type": "text", "text": "Hi"}], reason, usage_body(*usage)))


# What the adapter makes of the answers -------------------------------------------------

FINISH_REASONS = {
    "stop": ("end_turn", "stop_sequence"),
    "tool_calls": ("tool_use",),
    "length": ("max_tokens", "model_context_window_exceeded"),
    "refusal": ("refusal",),
    "pause_turn": ("pause_turn",),
}
TOOL_CALL_REPLY = json_reply(TOOL_USE_MESSAGE)
TOOL_CALL_RESPONSE = ProviderResponse(
    content="I'll look up both cities.",
    tool_calls=(PARIS, LYON),
    usage=Usage(384, 96),
    finish_reason="tool_calls",
    model=ANSWERED_MODEL,
)
ANSWER_REPLY = json_reply(ANSWER_MESSAGE)
ANSWER_USAGE = Usage(512, 21)
TEXT_STREAM_EVENTS = TEXT_STREAM
TEXT_STREAM_REPLY = sse_reply(TEXT_STREAM)
TEXT_PIECES = ("Paris: 18°C", " and sunny.", " Lyon: 21°C and cloudy.")
TOOL_CALL_STREAM_EVENTS = TOOL_USE_STREAM
TOOL_CALL_STREAM_REPLY = sse_reply(TOOL_USE_STREAM)
# The streamed calls equal the same calls answered in one piece.
STREAMED_TOOL_CALL_RESPONSE = TOOL_CALL_RESPONSE
SERVER_ERRORS = ((500, SERVER_ERROR), (529, OVERLOADED))
BAD_REQUEST_DETAIL = "unexpected `tool_use_id`"
BAD_REQUEST_ERROR = anthropic.BadRequestError

# Requests ------------------------------------------------------------------------------

PATH = "/v1/messages"
# The API version the SDK sends changes with the SDK.
HEADERS = {"anthropic-version": None}
MAX_TOKENS_FIELD = "max_tokens"
STREAM_FIELDS = {"stream": True}
TOOL_CHOICE_NONE = {"type": "none"}
FIRST_BODY = {
    "model": MODEL,
    "max_tokens": 4096,
    "system": SYSTEM,
    "messages": [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}],
    "tools": [
        {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "input_schema": WEATHER_SCHEMA,
        }
    ],
}
TOOL_RESULTS = (
    Message(Role.TOOL, PARIS_RESULT, tool_call_id=PARIS.id, name="get_weather"),
    Message(Role.TOOL, LYON_RESULT, tool_call_id=LYON.id, name="get_weather"),
)
TOOL_RESULTS_BODY = [
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "I'll look up both cities."},
            tool_use(PARIS, {"city": "Paris"}),
            tool_use(LYON, {"city": "Lyon"}),
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
