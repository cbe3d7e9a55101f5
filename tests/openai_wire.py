"""The OpenAI Chat Completions wire format for the provider tests: recorded answers,
and what the adapter must make of them (see ``provider_wire.VendorWire``)."""

from __future__ import annotations

from typing import Any

import openai

from covonaut_es import Message, ProviderResponse, Role, ToolCall
from covonaut_es.messages import Usage
from covonaut_es.providers.openai import OpenAIProvider
from provider_wire import PARIS_RESULT, SYSTEM, WEATHER_SCHEMA
from wire_server import json_reply, sse_reply

SDK = "openai"
MODULE = "covonaut_es.providers.openai"
PROVIDER = "OpenAIProvider"
MODEL = "gpt-4o-mini"
# The model that answers: the API names the dated version it resolved the request's to.
ANSWERED_MODEL = "gpt-4o-mini-2024-07-18"
QUESTION = "What's the weather in Paris?"
API_KEY = "sk-test"
KEY_VARIABLES = ("OPENAI_API_KEY",)
# A key the SDK asks a callable for before each request.
OTHER_CREDENTIAL = {"api_key": lambda: API_KEY}


def provider(url: str, **options: Any) -> OpenAIProvider:
    options.setdefault("api_key", API_KEY)
    return OpenAIProvider(base_url=f"{url}/v1", **options)


def client(url: str, **options: Any) -> openai.OpenAI:
    options.setdefault("api_key", API_KEY)
    return openai.OpenAI(base_url=f"{url}/v1", **options)


def sdk_ask(client: openai.OpenAI) -> None:
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": QUESTION}])


# Requests ------------------------------------------------------------------------------

PATH = "/v1/chat/completions"
HEADERS = {"authorization": f"Bearer {API_KEY}"}
MAX_TOKENS_FIELD = "max_completion_tokens"
STREAM_FIELDS = {"stream": True, "stream_options": {"include_usage": True}}
TOOL_CHOICE_NONE = "none"
CALL = ToolCall("call_FthC9qRpsL5kBpwwyw6c7j4k", "get_weather", '{"city":"Paris"}')
FIRST_BODY = {
    "model": MODEL,
    "messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": QUESTION},
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
TOOL_RESULTS = (Message(Role.TOOL, PARIS_RESULT, tool_call_id=CALL.id, name="get_weather"),)
TOOL_RESULTS_BODY = [
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
    {"role": "tool", "tool_call_id": CALL.id, "content": PARIS_RESULT},
]

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
        "model": ANSWERED_MODEL,
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
ANSWER = "It's 18°C and sunny in Paris."
ANSWER_COMPLETION = completion({"content": ANSWER, "annotations": []}, "stop", (120, 11))


def chunk(choices: list[Any], usage: dict[str, Any] | None = None) -> Any:
    """A chat.completion.chunk body as the API streams it."""
    return {
        "id": "chatcmpl-AXdE4PzMOJDf9NtkNUJ6Kvq6P1pxe",
        "object": "chat.completion.chunk",
        "created": 1732614764,
        "model": ANSWERED_MODEL,
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


def first_fragment(index: int, call_id: str) -> Any:
    """The fragment that opens a call: its id and name, and no arguments yet."""
    function = {"name": "get_weather", "arguments": ""}
    return tool_fragment(index, id=call_id, type="function", function=function)


TOOL_CALL_STREAM = [
    chunk(delta({"role": "assistant", "content": None, "refusal": None})),
    first_fragment(0, "call_FthC9qRpsL5kBpwwyw6c7j4k"),
    tool_fragment(0, function={"arguments": '{"ci'}),
    tool_fragment(0, function={"arguments": 'ty":"Par'}),
    tool_fragment(0, function={"arguments": 'is"}'}),
    first_fragment(1, "call_o9AqCYvlHxxNe2dVvVeT1Jkf"),
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


def finished(reason: str, usage: tuple[int, int]) -> Any:
    return json_reply(completion({"content": "Hi"}, reason, usage))


# What the adapter makes of the answers -------------------------------------------------

FINISH_REASONS = {
    "stop": ("stop",),
    "length": ("length",),
    "tool_calls": ("tool_calls", "function_call"),
    "content_filter": ("content_filter",),
}
TOOL_CALL_REPLY = json_reply(TOOL_CALL_COMPLETION)
TOOL_CALL_RESPONSE = ProviderResponse(
    tool_calls=(CALL,), usage=Usage(82, 17), finish_reason="tool_calls", model=ANSWERED_MODEL
)
ANSWER_REPLY = json_reply(ANSWER_COMPLETION)
ANSWER_USAGE = Usage(120, 11)
TEXT_STREAM_EVENTS = [(None, data) for data in TEXT_STREAM]
TEXT_STREAM_REPLY = sse_reply(TEXT_STREAM_EVENTS)
TEXT_PIECES = ("It's", " 18°C", " and sunny", " in Paris.")
TOOL_CALL_STREAM_EVENTS = [(None, data) for data in TOOL_CALL_STREAM]
TOOL_CALL_STREAM_REPLY = sse_reply(TOOL_CALL_STREAM_EVENTS)
LYON_CALL = ToolCall("call_o9AqCYvlHxxNe2dVvVeT1Jkf", "get_weather", '{"city":"Lyon"}')
STREAMED_TOOL_CALL_RESPONSE = ProviderResponse(
    tool_calls=(CALL, LYON_CALL),
    usage=Usage(82, 36),
    finish_reason="tool_calls",
    model=ANSWERED_MODEL,
)
SERVER_ERRORS = ((500, SERVER_ERROR),)
BAD_REQUEST_DETAIL = "Invalid schema"
BAD_REQUEST_ERROR = openai.BadRequestError
