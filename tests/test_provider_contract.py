"""What every provider adapter does, checked for each against its real SDK.

Each test runs once per vendor: the ``wire`` fixture is the vendor's module
(``openai_wire``, ``anthropic_wire``; see ``provider_wire.VendorWire``), which serves
recorded answers in the vendor's wire format and knows what the adapter must send.
What only one vendor does is tested in that vendor's own test file.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import importlib
import json
import logging
import math
import os
import re
import socket
import string
import subprocess
import sys
import traceback
from collections.abc import Iterator
from types import ModuleType
from typing import Any
from urllib.parse import quote, quote_plus

import anthropic
import msgspec
import openai
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import anthropic_wire
import covonaut_es
import openai_wire
from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    Message,
    ProviderResponse,
    RetryPolicy,
    Role,
    TextDelta,
    Tool,
    ToolCallDelta,
    open_store,
)
from covonaut_es._secrets import Secrets
from covonaut_es.errors import (
    ConfigurationError,
    CovonautError,
    ProviderConnectionError,
    ProviderError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderServerError,
)
from covonaut_es.messages import MAX_TOKEN_COUNT, StreamDelta, Usage
from covonaut_es.providers import collect_stream
from covonaut_es.providers._secrets import client_secrets
from covonaut_es.providers.anthropic import AnthropicProvider
from covonaut_es.providers.openai import OpenAIProvider
from covonaut_es.tools import ToolContext
from provider_wire import SYSTEM, WEATHER, WEATHER_BY_CITY, WEATHER_SCHEMA, VendorWire, ask
from wire_server import Reply, WireServer, json_reply, sse_reply


@pytest.fixture(params=[openai_wire, anthropic_wire], ids=["openai", "anthropic"])
def wire(request: pytest.FixtureRequest) -> ModuleType:
    """The vendor under test."""
    module: ModuleType = request.param
    return module


def adapter_class(wire: VendorWire) -> Any:
    """The adapter class itself, for building it without the test's settings."""
    return getattr(importlib.import_module(wire.MODULE), wire.PROVIDER)


# Requests and answers ------------------------------------------------------------------


def test_tool_call_round_trip(wire: VendorWire, server: WireServer, provider: Any) -> None:
    """Tool calls come back as ToolCalls, and their results go out in the vendor's format."""
    server.reply(wire.TOOL_CALL_REPLY, wire.ANSWER_REPLY)

    first = provider.complete(ask(wire))
    assert first == wire.TOOL_CALL_RESPONSE
    calls = Message(Role.ASSISTANT, first.content, tool_calls=first.tool_calls)
    second = provider.complete(ask(wire, calls, *wire.TOOL_RESULTS))
    assert second == ProviderResponse(
        content=wire.ANSWER,
        usage=wire.ANSWER_USAGE,
        finish_reason="stop",
        model=wire.ANSWERED_MODEL,
    )

    assert [request.path for request in server.requests] == [wire.PATH] * 2
    headers = server.requests[0].headers
    # Some SDK versions send the key in another header than others.
    assert any(wire.API_KEY in value for value in headers.values())
    assert wire.HEADERS.keys() <= headers.keys()
    assert all(value in (None, headers[name]) for name, value in wire.HEADERS.items())
    assert server.bodies[0] == wire.FIRST_BODY
    question_length = len(wire.FIRST_BODY["messages"])
    assert server.bodies[1]["messages"][question_length:] == wire.TOOL_RESULTS_BODY


def test_finish_reasons_and_usage_are_mapped(
    wire: VendorWire, server: WireServer, provider: Any
) -> None:
    """Finish reasons map to the common vocabulary (unknown ones pass through) and the
    token counts to input and output tokens."""
    cases = [(sent, common) for common, sents in wire.FINISH_REASONS.items() for sent in sents]
    server.reply(*(wire.finished(sent, (9, 4)) for sent, _ in cases))
    responses = [provider.complete(ask(wire)) for _ in cases]
    assert [response.finish_reason for response in responses] == [common for _, common in cases]
    assert {(r.usage.input_tokens, r.usage.output_tokens) for r in responses} == {(9, 4)}


def test_limits_and_temperature_are_sent(
    wire: VendorWire, server: WireServer, provider: Any
) -> None:
    """max_tokens goes out in the vendor's field and temperature as is; an unset
    temperature is left out."""
    server.reply(wire.ANSWER_REPLY, wire.ANSWER_REPLY)
    provider.complete(ask(wire, max_tokens=256, temperature=0.2))
    provider.complete(ask(wire))
    limited, bare = server.bodies
    assert (limited[wire.MAX_TOKENS_FIELD], limited["temperature"]) == (256, 0.2)
    assert "temperature" not in bare


def test_final_turn_forbids_tool_calls_but_keeps_tools(
    wire: VendorWire, server: WireServer, provider: Any
) -> None:
    """tool_choice="none" goes out in the vendor's form; the tools stay declared."""
    server.reply(wire.ANSWER_REPLY)
    provider.complete(ask(wire, tool_choice="none"))
    assert server.bodies[0]["tool_choice"] == wire.TOOL_CHOICE_NONE
    assert server.bodies[0]["tools"] == wire.FIRST_BODY["tools"]


def test_tool_message_without_call_id_is_rejected(
    wire: VendorWire, server: WireServer, provider: Any
) -> None:
    """A tool message that names no call cannot be mapped: ProviderRequestError, nothing sent."""
    with pytest.raises(ProviderRequestError, match="tool_call_id"):
        provider.complete(ask(wire, Message(Role.TOOL, "orphan")))
    assert server.requests == []


# Streaming -----------------------------------------------------------------------------


def test_streamed_text(wire: VendorWire, server: WireServer, provider: Any) -> None:
    """Text arrives piece by piece; usage and finish reason come with the last delta."""
    server.reply(wire.TEXT_STREAM_REPLY)
    deltas = list(provider.stream(ask(wire)))
    assert [delta.content for delta in deltas] == [*wire.TEXT_PIECES, ""]
    assert deltas[-1] == StreamDelta(
        usage=wire.ANSWER_USAGE, finish_reason="stop", model=wire.ANSWERED_MODEL, final=True
    )
    assert {name: server.bodies[0].get(name) for name in wire.STREAM_FIELDS} == wire.STREAM_FIELDS


def test_streamed_tool_calls(wire: VendorWire, server: WireServer, provider: Any) -> None:
    """Streamed fragments of tool calls are assembled into whole calls in the last delta."""
    server.reply(wire.TOOL_CALL_STREAM_REPLY)
    deltas = list(provider.stream(ask(wire)))
    assert [delta.tool_calls for delta in deltas[:-1]] == [()] * (len(deltas) - 1)
    assert collect_stream(deltas) == wire.STREAMED_TOOL_CALL_RESPONSE


# Errors and retries --------------------------------------------------------------------


def test_rate_limit_is_retried_after_retry_after(
    wire: VendorWire, server: WireServer, provider: Any, sleeps: list[float]
) -> None:
    """A 429 is retried after the wait its retry-after header asks for."""
    server.reply(
        json_reply(wire.RATE_LIMITED, status=429, headers={"retry-after": "1"}),
        wire.ANSWER_REPLY,
    )
    assert provider.complete(ask(wire)).content == wire.ANSWER
    assert len(server.requests) == 2
    assert sleeps == [1.0]


def test_server_errors_are_retried_with_backoff(
    wire: VendorWire, server: WireServer, provider: Any, sleeps: list[float]
) -> None:
    """Each server error the vendor sends (5xx, Anthropic's 529 "overloaded") is retried
    after a jittered initial delay."""
    for status, body in wire.SERVER_ERRORS:
        server.reply(json_reply(body, status=status), wire.ANSWER_REPLY)
    answers = [provider.complete(ask(wire)).content for _ in wire.SERVER_ERRORS]
    assert answers == [wire.ANSWER] * len(wire.SERVER_ERRORS)
    assert len(server.requests) == 2 * len(wire.SERVER_ERRORS)
    assert len(sleeps) == len(wire.SERVER_ERRORS)
    assert all(0.25 <= sleep <= 0.5 for sleep in sleeps)


def test_opening_a_stream_is_retried(
    wire: VendorWire, server: WireServer, provider: Any, sleeps: list[float]
) -> None:
    """Opening a stream is retried like a plain call."""
    server.reply(json_reply(wire.RATE_LIMITED, status=429), wire.TEXT_STREAM_REPLY)
    assert collect_stream(provider.stream(ask(wire))).content == wire.ANSWER
    assert len(server.requests) == 2
    assert len(sleeps) == 1


def test_bad_request_is_not_retried(
    wire: VendorWire, server: WireServer, provider: Any, sleeps: list[float]
) -> None:
    """A 400 raises ProviderRequestError with the API's message after exactly one request."""
    server.reply(json_reply(wire.BAD_REQUEST, status=400))
    with pytest.raises(ProviderRequestError, match=wire.BAD_REQUEST_DETAIL) as caught:
        provider.complete(ask(wire))
    assert caught.value.status_code == 400
    assert isinstance(caught.value.__cause__, wire.BAD_REQUEST_ERROR)
    assert len(server.requests) == 1
    assert sleeps == []


def test_gives_up_after_max_attempts(
    wire: VendorWire, server: WireServer, sleeps: list[float]
) -> None:
    """Server errors past RetryPolicy.max_attempts raise ProviderServerError."""
    server.reply(*[json_reply(wire.SERVER_ERRORS[0][1], status=503)] * 3)
    retry = RetryPolicy(max_attempts=3)
    with (
        wire.provider(server.url, retry=retry, sleep=sleeps.append) as provider,
        pytest.raises(ProviderServerError) as caught,
    ):
        provider.complete(ask(wire))
    assert caught.value.status_code == 503
    assert len(server.requests) == 3
    assert len(sleeps) == 2


def test_rate_limit_longer_than_the_policy_is_raised_typed(
    wire: VendorWire, server: WireServer, provider: Any
) -> None:
    """A 429 whose retry-after is past RetryPolicy.max_delay is not waited for: it raises
    ProviderRateLimitError with its retry-after at once."""
    server.reply(json_reply(wire.RATE_LIMITED, status=429, headers={"retry-after": "20"}))
    with pytest.raises(ProviderRateLimitError) as caught:
        provider.complete(ask(wire))
    assert (caught.value.status_code, caught.value.retry_after) == (429, 20.0)
    assert len(server.requests) == 1


def test_unreachable_server_raises_connection_error(wire: VendorWire, sleeps: list[float]) -> None:
    """A refused connection is retried, then raised as ProviderConnectionError."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    retry = RetryPolicy(max_attempts=2)
    with (
        wire.provider(f"http://127.0.0.1:{port}", retry=retry, sleep=sleeps.append) as provider,
        pytest.raises(ProviderConnectionError) as caught,
    ):
        provider.complete(ask(wire))
    assert caught.value.status_code is None
    assert len(sleeps) == 1


# Clients -------------------------------------------------------------------------------


def test_prebuilt_client_is_used_without_its_retries(wire: VendorWire, server: WireServer) -> None:
    """A caller's client serves the provider with the SDK's retries off and stays open
    and usable when the provider is closed."""
    status, body = wire.SERVER_ERRORS[-1]
    server.reply(json_reply(body, status=status), wire.ANSWER_REPLY)
    with wire.client(server.url, max_retries=5) as client:
        provider = adapter_class(wire)(client=client, retry=RetryPolicy(max_attempts=1))
        with pytest.raises(ProviderServerError):
            provider.complete(ask(wire))
        assert len(server.requests) == 1
        provider.close()
        assert not client.is_closed()
        assert adapter_class(wire)(client=client).complete(ask(wire)).content == wire.ANSWER


@pytest.mark.parametrize("setting", ["api_key", "base_url", "timeout"])
def test_client_and_settings_conflict(wire: VendorWire, setting: str) -> None:
    """A client together with api_key, base_url or timeout is a ConfigurationError."""
    values = {"api_key": "other", "base_url": "http://127.0.0.1:9", "timeout": 5}
    with (
        wire.client("http://127.0.0.1:9") as client,
        pytest.raises(ConfigurationError, match="configure the client itself"),
    ):
        adapter_class(wire)(client=client, **{setting: values[setting]})


_NO_SECRET = "sk-no-secret-here"
_AUTHENTICATING = ("authorization", "x-api-key")


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.data(),
    given_to=st.sampled_from(["provider", "client", "client, the SDK's own way"]),
    api_key=st.sampled_from([_NO_SECRET, "", None]),
    header=st.none()
    | st.tuples(
        st.sampled_from(["Authorization", "X-Api-Key", "X-Gateway-Token"]),
        st.sampled_from([f"Bearer {_NO_SECRET}", "", "omit"]),
    ),
)
def test_a_client_with_no_credential_is_refused_when_the_provider_is_built(
    tmp_path_factory: pytest.TempPathFactory,
    wire: VendorWire,
    data: st.DataObject,
    given_to: str,
    api_key: str | None,
    header: tuple[str, str] | None,
) -> None:
    """Property: over the ways of giving a credential or none (api_key=, each of the
    vendor's variables set, empty or not, a header given to the client or in the SDK's
    custom-headers variable, the SDK's own way such as a provider of tokens) to the
    client the provider builds or is given, the provider is built exactly when the
    SDK's client would send a request with a credential (or without the Authorization
    header the caller omitted); else it is refused with a ConfigurationError that names
    the vendor's variables. An Anthropic provider with no credential was built, and
    failed every run with a ProviderError quoting the SDK's TypeError (helper-190)."""
    sdk = importlib.import_module(wire.SDK)
    sdk_error: type[Exception] = sdk.OpenAIError if wire.SDK == "openai" else sdk.AnthropicError
    variables = {
        name: data.draw(st.sampled_from([None, "", _NO_SECRET]), label=name)
        for name in wire.KEY_VARIABLES
    }
    options: dict[str, Any] = {"api_key": api_key}
    headers = {}
    if header is not None:
        name, value = header
        headers[name] = sdk.Omit() if value == "omit" else value
        if given_to == "provider":
            # The SDK reads headers for the client it builds from one variable.
            assume(value != "omit")
            variables[f"{wire.SDK.upper()}_CUSTOM_HEADERS"] = f"{name}: {value}"
    if given_to == "client":
        options["default_headers"] = headers
    elif given_to != "provider":
        # Alone: with a header too, the header decides for one SDK and not the other.
        options.update(wire.OTHER_CREDENTIAL)
    with pytest.MonkeyPatch.context() as env, WireServer() as server:
        for name in [n for n in os.environ if n.startswith(("ANTHROPIC_", "OPENAI_"))]:
            env.delenv(name)
        env.setenv("HOME", str(tmp_path_factory.mktemp("home")))  # no profile on disk
        for name, value in variables.items():
            if value is not None:
                env.setenv(name, value)
        try:
            client = wire.client(server.url, **options)
        except sdk_error:
            client = None
        sendable = False
        if client is not None:
            server.reply(wire.ANSWER_REPLY)
            try:
                wire.sdk_ask(client.with_options(max_retries=0))
            except (TypeError, sdk.APIConnectionError):
                pass  # no authentication method, or a header HTTP cannot send
            else:
                # Sent with a credential, or without the header the caller omitted.
                sent = server.requests[0].headers
                omitted = given_to == "client" and header == ("Authorization", "omit")
                sendable = omitted or any(sent.get(name) for name in _AUTHENTICATING)
        if given_to != "provider" and client is None:
            return  # the caller's own client was refused: there is no provider to build
        try:
            if given_to != "provider":
                provider = adapter_class(wire)(client=client)
            else:
                provider = wire.provider(server.url, api_key=api_key)
        except ConfigurationError as exc:
            assert not sendable
            assert _NO_SECRET not in str(exc)
            # An empty key beside a credential header is refused as a header HTTP
            # cannot send ("Bearer "); no credential at all, by naming the variables.
            if "begins or ends with a space" not in str(exc):
                assert "pass api_key=" in str(exc)
                assert all(name in str(exc) for name in wire.KEY_VARIABLES)
        else:
            assert sendable
            with provider:
                server.reply(wire.ANSWER_REPLY)
                assert provider.complete(ask(wire)).content == wire.ANSWER


_URL_FAULTS = ["[::1", "h\x00", "h:port", "[zz]", "h\x7f"]


_PLATFORM_ENDPOINT = {"api_version": "2024-06-01", "azure_endpoint": "https://x.openai.azure.com"}
# Each cloud platform's client, given a credential its own way (the SDK refuses one built
# without), which sends no header the vendor's own client would.
_PLATFORM_CLIENTS = {
    "Azure OpenAI, api_key": lambda: openai.AzureOpenAI(api_key=_NO_SECRET, **_PLATFORM_ENDPOINT),
    "Azure OpenAI, a token provider": lambda: openai.AzureOpenAI(
        azure_ad_token_provider=lambda: _NO_SECRET, **_PLATFORM_ENDPOINT
    ),
    "Bedrock": lambda: anthropic.AnthropicBedrock(
        aws_access_key="AKIAEXAMPLE", aws_secret_key=_NO_SECRET, aws_region="us-east-1"
    ),
    "Vertex": lambda: anthropic.AnthropicVertex(
        region="us-east5", project_id="p", access_token=_NO_SECRET
    ),
    "Foundry": lambda: anthropic.AnthropicFoundry(api_key=_NO_SECRET, resource="r"),
}


@pytest.mark.parametrize("platform", sorted(_PLATFORM_CLIENTS))
def test_a_cloud_platforms_client_with_its_credential_is_accepted(
    platform: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client of a cloud platform (Azure OpenAI, Bedrock, Vertex, Foundry) keeps its
    credential where the vendor's own client does not: the provider builds on it, as it
    did before the credential check, which refused them all (helper-195)."""
    for variable in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    client = _PLATFORM_CLIENTS[platform]()
    provider_class = OpenAIProvider if isinstance(client, openai.OpenAI) else AnthropicProvider
    provider_class(client=client).close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    fault=st.sampled_from(_URL_FAULTS),
    # Marked, so that no value is a word of the traceback's own text ("covonaut").
    password=st.text(string.ascii_letters + string.digits, min_size=8, max_size=16).map(
        "pw-{}".format
    ),
    query=st.text(string.ascii_letters + string.digits, min_size=8, max_size=16).map(
        "qv-{}".format
    ),
    timeout=st.sampled_from(["30", b"30", True, 0, -1, 0.0, math.inf, math.nan, [30]]),
    bad=st.sampled_from(["base_url", "timeout"]),
)
@example(fault="[::1", password="pw-00000000", query="qv-covonaut", timeout="30", bad="base_url")
def test_a_setting_the_sdk_cannot_take_is_a_configuration_error(
    wire: VendorWire, fault: str, password: str, query: str, timeout: Any, bad: str
) -> None:
    """Property: a base URL the SDK's HTTP library cannot read, or a timeout that is not
    a positive number of seconds, is a ConfigurationError naming it, with nothing
    chained and the URL's password and query values in no text of it. Both escaped the
    constructors as httpx's InvalidURL or a TypeError (helper-182)."""
    url = f"http://user:{password}@{fault}/v1?key={query}"
    settings_ = {"base_url": url} if bad == "base_url" else {"timeout": timeout}
    with pytest.raises(ConfigurationError) as caught:
        adapter_class(wire)(api_key="k", **settings_)
    text = "".join(traceback.format_exception(caught.value))
    assert caught.value.__cause__ is None
    assert password not in text and query not in text
    assert ("base URL" if bad == "base_url" else "timeout must be") in str(caught.value)


# The package ---------------------------------------------------------------------------


def test_import_does_not_load_the_sdk(wire: VendorWire) -> None:
    """``import covonaut_es`` leaves the SDK unimported until its adapter is asked for."""
    code = (
        "import sys, covonaut_es\n"
        f"assert {wire.SDK!r} not in sys.modules\n"
        f"print(covonaut_es.{wire.PROVIDER}.__name__, {wire.SDK!r} in sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert run.stdout == f"{wire.PROVIDER} True\n"


@pytest.fixture
def sdk_missing(wire: VendorWire, monkeypatch: pytest.MonkeyPatch) -> str:
    """The vendor's SDK cannot be imported, and its adapter is not imported yet; returns
    the advice the ImportError must give."""
    monkeypatch.setitem(sys.modules, wire.SDK, None)
    monkeypatch.delitem(sys.modules, wire.MODULE, raising=False)
    monkeypatch.delitem(vars(covonaut_es), wire.PROVIDER, raising=False)
    return rf"pip install 'covonaut-es\[{wire.SDK}\]'"


def test_missing_sdk_names_the_extra(wire: VendorWire, sdk_missing: str) -> None:
    """Without its SDK, ``covonaut_es.<Provider>`` raises an ImportError naming the extra."""
    with pytest.raises(ImportError, match=sdk_missing):
        getattr(covonaut_es, wire.PROVIDER)


def test_importing_the_adapter_without_its_sdk_names_the_extra(
    wire: VendorWire, sdk_missing: str
) -> None:
    """Without its SDK, importing the adapter's module raises an ImportError that names
    the extra and the missing package."""
    with pytest.raises(ImportError, match=sdk_missing) as caught:
        importlib.import_module(wire.MODULE)
    assert caught.value.name == wire.SDK


def test_star_import_works_without_any_sdk() -> None:
    """``from covonaut_es import *`` works where neither SDK can be imported."""
    code = (
        "import sys\n"
        "sys.modules['openai'] = sys.modules['anthropic'] = None\n"
        "from covonaut_es import *\n"
        "import covonaut_es\n"
        "print(sorted(set(covonaut_es.__all__) - set(globals())))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert run.stdout == "[]\n"


# End to end ----------------------------------------------------------------------------


def test_agent_runs_through_tool_calls(wire: VendorWire, server: WireServer, provider: Any) -> None:
    """An Agent on the provider calls the tools, sends their results and returns the answer."""
    server.reply(wire.TOOL_CALL_REPLY, wire.ANSWER_REPLY)
    seen: list[dict[str, Any]] = []

    def get_weather(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        seen.append(args)
        return WEATHER_BY_CITY[args["city"]]

    tool = Tool("get_weather", WEATHER.description, WEATHER_SCHEMA, get_weather)
    config = AgentConfig(provider=provider, model=wire.MODEL, tools=[tool], system_prompt=SYSTEM)
    with Agent(config) as agent:
        assert agent.run(wire.QUESTION) == wire.ANSWER
        assert agent.usage == wire.TOOL_CALL_RESPONSE.usage + wire.ANSWER_USAGE
    calls = wire.TOOL_CALL_RESPONSE.tool_calls
    assert seen == [msgspec.json.decode(call.arguments) for call in calls]
    assert server.bodies[0] == wire.FIRST_BODY
    question_length = len(wire.FIRST_BODY["messages"])
    assert server.bodies[1]["messages"][question_length:] == wire.TOOL_RESULTS_BODY


def test_an_agent_streams_each_turn_through_the_adapter(
    wire: VendorWire, server: WireServer, provider: Any
) -> None:
    """With ``on_delta`` set, an agent asks the adapter for streams: the pieces arrive as
    the vendor sent them, each call's argument fragments join to its arguments, and the
    committed turns equal the streamed responses."""
    server.reply(wire.TOOL_CALL_STREAM_REPLY, wire.TEXT_STREAM_REPLY)

    def get_weather(ctx: ToolContext, args: dict[str, Any]) -> Any:
        return WEATHER_BY_CITY[args["city"]]

    pieces: list[Any] = []
    tool = Tool("get_weather", WEATHER.description, WEATHER_SCHEMA, get_weather)
    config = AgentConfig(
        provider=provider,
        model=wire.MODEL,
        tools=[tool],
        system_prompt=SYSTEM,
        on_delta=pieces.append,
    )
    with Agent(config) as agent:
        output = agent.run(wire.QUESTION)
        messages = agent.messages
    assert output == "".join(wire.TEXT_PIECES)
    for body in server.bodies:
        assert {name: body.get(name) for name in wire.STREAM_FIELDS} == wire.STREAM_FIELDS
    streamed = wire.STREAMED_TOOL_CALL_RESPONSE
    text = [piece.text for piece in pieces if isinstance(piece, TextDelta)]
    assert "".join(text) == streamed.content + output
    call_pieces = [piece for piece in pieces if isinstance(piece, ToolCallDelta)]
    opened = [(piece.index, piece.id, piece.name) for piece in call_pieces if piece.id]
    assert opened == [(i, call.id, call.name) for i, call in enumerate(streamed.tool_calls)]
    for index, call in enumerate(streamed.tool_calls):
        joined = "".join(piece.arguments for piece in call_pieces if piece.index == index)
        assert msgspec.json.decode(joined) == msgspec.json.decode(call.arguments)
    assistant = [message for message in messages if message.role is Role.ASSISTANT]
    assert [(m.content, m.tool_calls) for m in assistant] == [
        (streamed.content, streamed.tool_calls),
        (output, ()),
    ]


# Secrets -------------------------------------------------------------------------------

_KEY_ALPHABET = string.ascii_letters + string.digits + "-_.~+/="


def _shown(key: str, form: str, piece: tuple[int, int]) -> str:
    """The key as an API might echo it: as sent, percent-encoded, or a piece of it."""
    start = piece[0] % (len(key) - 8)
    return {
        "raw": key,
        "quoted": quote(key, safe=""),
        "quoted-lower": re.sub("%..", lambda m: m.group().lower(), quote(key, safe="")),
        "quoted-plus": quote_plus(key),
        "piece": key[start : start + 8 + piece[1] % (len(key) - start - 7)],
    }[form]


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    key=st.text(_KEY_ALPHABET, min_size=16, max_size=48).map(lambda tail: f"sk-{tail}"),
    form=st.sampled_from(["raw", "quoted", "quoted-lower", "quoted-plus", "piece"]),
    piece=st.tuples(st.integers(0, 99), st.integers(0, 99)),
    status=st.sampled_from([401, 403, 429, 500, None]),
)
def test_an_api_key_the_vendor_echoes_is_hidden_everywhere(
    wire: VendorWire,
    caplog: pytest.LogCaptureFixture,
    key: str,
    form: str,
    piece: tuple[int, int],
    status: int | None,
) -> None:
    """Property: an API key the vendor repeats in its error (a 401, 403, 429 or 500 body,
    or an error event in a stream, None here), as sent, percent-encoded or in part, is
    in no text of the raised error's chain, no log record and no stored event. It went
    verbatim into the typed error, the retry warning and the thread's RunFailed
    (helper-173)."""
    caplog.clear()
    shown = _shown(key, form, piece)
    body = copy.deepcopy(wire.RATE_LIMITED)
    body["error"]["message"] = f"Incorrect API key provided: {shown}."
    if status is None:  # an error event in a stream
        reply = sse_reply([("error" if wire.SDK == "anthropic" else None, body)])
    else:
        reply = json_reply(body, status=status)
    store = open_store("memory://")
    with WireServer() as server, caplog.at_level(logging.DEBUG, logger="covonaut_es"):
        server.reply(reply, reply)
        retry = RetryPolicy(max_attempts=2)
        with wire.provider(server.url, api_key=key, retry=retry, sleep=lambda _: None) as p:
            agent = Agent(
                AgentConfig(
                    provider=p,
                    model=wire.MODEL,
                    checkpoint=CheckpointSettings(store=store, thread_id="t"),
                    on_delta=(lambda _: None) if status is None else None,
                )
            )
            with pytest.raises(ProviderError) as caught:
                agent.run("hi")
    chain = "".join(traceback.format_exception(caught.value))
    stored = [repr(vars(event)) for event in store.history("t")]
    logged = [record.getMessage() for record in caplog.records]
    assert any("Incorrect API key" in text for text in stored)
    for text in (chain, *logged, *stored):
        assert key not in text and shown not in text
    # The form a "+" decodes to a space in may take the space before the key with it.
    assert re.search(r"Incorrect API key provided: ?\*\*\*", str(caught.value))


def test_the_secrets_of_a_clients_base_url_and_headers_are_hidden() -> None:
    """A password or a query value in the client's base URL, and a header the caller
    gave that looks like a credential, are hidden like the API key (helper-173): an
    Azure function's ``code``, an S3 ``X-Amz-Credential`` and a ``pwd`` too
    (helper-199)."""
    import openai

    client = openai.OpenAI(
        api_key="sk-the-api-key-1",
        base_url="https://gw:url-password-2@gateway.example/v1?api-key=query-key-3"
        "&code=function-key-6&X-Amz-Credential=amz-credential-7&pwd=query-pwd-8",
        default_headers={"X-Gateway-Token": "header-token-4", "X-Trace": "trace-value-5"},
    )
    secrets = client_secrets(client)
    text = (
        "sk-the-api-key-1 url-password-2 query-key-3 header-token-4 trace-value-5 "
        "function-key-6 amz-credential-7 query-pwd-8"
    )
    assert secrets.hide(text) == "*** *** *** *** trace-value-5 *** *** ***"


@settings(max_examples=50, deadline=None)
@given(
    secret=st.text(string.ascii_letters + string.digits, min_size=3, max_size=7),
    before=st.text(string.ascii_letters, min_size=1, max_size=3),
    after=st.text(string.ascii_letters, min_size=1, max_size=3),
)
def test_a_short_secret_is_hidden_where_it_stands_apart_and_no_word_is_cut(
    secret: str, before: str, after: str
) -> None:
    """Property: a secret under eight characters (``"unused"``, a query's ``json``) is
    hidden where it stands apart from letters and digits, never inside a word, whose
    other letters would be mangled around a ``***`` (helper-182)."""
    secrets = Secrets.of([secret])
    assert secrets.hide(f"key {secret}.") == "key ***."
    word = f"{before}{secret}{after}"
    assert secrets.hide(f"the {word} here") == f"the {word} here"


def test_a_base_urls_settings_are_no_secrets() -> None:
    """A query parameter of the base URL that names a setting (Azure's ``api-version``,
    a ``format``) is not hidden in every message that repeats its value; one that names
    a credential is (helper-182)."""
    import openai

    client = openai.OpenAI(
        api_key="no-key-checked",
        base_url="https://gateway.example/v1?api-version=2024-06-01&format=json&sig=abc123",
    )
    text = "api-version 2024-06-01 is not json; sig abc123"
    assert client_secrets(client).hide(text) == "api-version 2024-06-01 is not json; sig ***"


def _chain(error: BaseException | None) -> Iterator[BaseException]:
    """``error`` and each error it was raised from or during."""
    while error is not None:
        yield error
        error = error.__cause__ or error.__context__


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    tail=st.text(_KEY_ALPHABET, min_size=16, max_size=40),
    bad=st.characters(exclude_categories=["Cs"]).filter(lambda c: not " " <= c <= "~"),
    at=st.integers(0, 99),
    via=st.sampled_from(["api_key", "client header", "changed after"]),
)
def test_a_key_that_is_not_printable_ascii_is_refused_and_never_shown(
    wire: VendorWire, tail: str, bad: str, at: int, via: str
) -> None:
    """Property: an API key or credential header with one character that is not
    printable ASCII, anywhere in it, is refused when the adapter is built with a
    ConfigurationError naming its position and code point; one set on the client after
    that is a ProviderError when a request is made. The key is in no args or repr of
    the raised error or its chain. OpenAI raised a bare UnicodeEncodeError whose args
    held 'Bearer <key>' (helper-182)."""
    good = f"sk-{tail}"
    position = at % (len(good) + 1)
    key = good[:position] + bad + good[position:]
    url = "http://127.0.0.1:9"  # never reached: the request is refused before it is sent
    refused: type[Exception] = ConfigurationError
    with pytest.raises(CovonautError) as caught:
        if via == "api_key":
            wire.provider(url, api_key=key)
        elif via == "client header":
            headers = {"X-Gateway-Token": key}
            adapter_class(wire)(client=wire.client(url, default_headers=headers))
        else:
            refused = ProviderError
            with wire.provider(url, api_key=good, sleep=lambda _: None) as provider:
                provider._client.api_key = key
                provider.complete(ask(wire))
    assert isinstance(caught.value, refused)
    if refused is ConfigurationError:
        assert f"U+{ord(bad):04X} at position {position}" in str(caught.value)
    for link in _chain(caught.value):
        assert key not in repr(link) and not any(key in repr(arg) for arg in link.args)
        assert key not in "".join(traceback.format_exception(link))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    tail=st.text(_KEY_ALPHABET, min_size=16, max_size=40),
    spaces=st.tuples(st.integers(0, 2), st.integers(0, 2)),
    via=st.sampled_from(["api_key", "client header"]),
)
def test_a_key_sent_with_a_space_at_an_end_is_refused_and_never_shown(
    wire: VendorWire, tail: str, spaces: tuple[int, int], via: str
) -> None:
    """Property: a key that would go out in a header value beginning or ending with a
    space (given with one at its end, or at either end as a header of the client) is
    refused when the adapter is built with a ConfigurationError that shows no key; any
    other is sent and answered. HTTP cannot send such a value: every request failed as
    a ProviderConnectionError, after the retries (helper-191)."""
    key = " " * spaces[0] + f"sk-{tail}" + " " * spaces[1]
    # The key goes out as "Bearer <key>" or as the header's whole value.
    padded = spaces[1] > 0 or (via == "client header" and spaces[0] > 0)
    with WireServer() as server:
        server.reply(wire.ANSWER_REPLY)
        try:
            if via == "api_key":
                provider = wire.provider(server.url, api_key=key)
            else:
                client = wire.client(server.url, default_headers={"X-Gateway-Token": key})
                provider = adapter_class(wire)(client=client)
        except ConfigurationError as exc:
            assert padded
            assert "begins or ends with a space" in str(exc)
            assert key.strip() not in "".join(traceback.format_exception(exc))
        else:
            assert not padded
            with provider:
                assert provider.complete(ask(wire)).content == wire.ANSWER


# Usage ---------------------------------------------------------------------------------

_COUNTS = (
    st.integers(0, MAX_TOKEN_COUNT)
    | st.integers(-(2**70), -1)
    | st.integers(MAX_TOKEN_COUNT + 1, 2**70)
    | st.sampled_from([-1, 0, MAX_TOKEN_COUNT, MAX_TOKEN_COUNT + 1, 2**64])
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(counts=st.tuples(_COUNTS, _COUNTS))
def test_a_token_count_out_of_bounds_refuses_the_response(
    wire: VendorWire, server: WireServer, provider: Any, counts: tuple[Any, Any]
) -> None:
    """Property: a response whose token counts are whole numbers from 0 to MAX_TOKEN_COUNT
    is taken with them; any other count (negative, past the bound, not a whole number)
    refuses it with ProviderError naming the field. A negative count was recorded as
    given, and the thread's total went negative (helper-173)."""
    server.reply(wire.finished(wire.FINISH_REASONS["stop"][0], counts))
    if all(0 <= count <= MAX_TOKEN_COUNT for count in counts):
        assert provider.complete(ask(wire)).usage == Usage(*counts)
        return
    with pytest.raises(ProviderError, match=r"as usage\.\w+_tokens; a token count is"):
        provider.complete(ask(wire))


def _ended(events: list[tuple[str | None, Any]]) -> bool:
    """Whether a stream's events hold the vendor's end: Anthropic's ``message_stop``, or
    an OpenAI choice's ``finish_reason``."""
    return any(
        name == "message_stop"
        or (isinstance(data, dict) and any(c.get("finish_reason") for c in data.get("choices", ())))
        for name, data in events
    )


def _weather_agent(vendor: Any, server: WireServer, ran: list[dict[str, Any]]) -> Agent:
    """A streaming agent on ``server`` whose weather tool records each call's arguments
    in ``ran``."""

    def get_weather(ctx: ToolContext, args: dict[str, Any]) -> Any:
        ran.append(args)
        return WEATHER_BY_CITY[args["city"]]

    tool = Tool("get_weather", WEATHER.description, WEATHER_SCHEMA, get_weather)
    config = AgentConfig(
        provider=vendor.provider(server.url, sleep=lambda _: None),
        model=vendor.MODEL,
        tools=[tool],
        on_delta=lambda _: None,
    )
    return Agent(config)


@settings(max_examples=40, deadline=None)
@given(
    vendor=st.sampled_from([openai_wire, anthropic_wire]),
    calls=st.booleans(),
    cut=st.integers(0, 12),
    streaming=st.sampled_from(["run", "astream"]),
)
def test_a_stream_cut_before_its_end_is_a_connection_error_and_nothing_runs(
    vendor: Any, calls: bool, cut: int, streaming: str
) -> None:
    """Property: a stream closed cleanly anywhere before the vendor's end marker fails
    the run with a ProviderConnectionError (retryable); no call from it runs and nothing
    is recorded as the answer. A stream cut after the end marker is whole."""
    events = vendor.TOOL_CALL_STREAM_EVENTS if calls else vendor.TEXT_STREAM_EVENTS
    events = events[: cut % (len(events) + 1)]
    ran: list[dict[str, Any]] = []
    with WireServer() as server:
        server.reply(sse_reply(events), vendor.TEXT_STREAM_REPLY)
        with _weather_agent(vendor, server, ran) as agent:
            try:
                if streaming == "run":
                    agent.run(vendor.QUESTION)
                else:

                    async def consume() -> None:
                        async for _ in agent.astream(vendor.QUESTION):
                            pass

                    asyncio.run(consume())
            except ProviderConnectionError as exc:
                assert not _ended(events)
                assert "closed before the answer ended" in str(exc)
                assert ran == []
                assert [m.role for m in agent.messages] == [Role.USER]
                return
        assert _ended(events)
        assert len(ran) == (2 if calls else 0)


def _adds_to_the_answer(event: tuple[str | None, Any]) -> bool:
    """Whether a stream event adds to the answer: not a keep-alive (Anthropic's
    ``ping``), an OpenAI chunk with nothing for a choice (a role, usage) or its end."""
    name, data = event
    if name == "ping":
        return False
    if name is not None:  # an Anthropic event
        return True
    return any(
        choice.get("finish_reason") or any(choice["delta"].get(k) for k in _OPENAI_DELTA)
        for choice in data["choices"]
    )


_OPENAI_DELTA = ("content", "refusal", "tool_calls")


@settings(max_examples=40, deadline=None)
@given(
    vendor=st.sampled_from([openai_wire, anthropic_wire]),
    calls=st.booleans(),
    data=st.data(),
)
def test_an_event_after_the_end_marker_is_refused_and_nothing_runs(
    vendor: Any, calls: bool, data: st.DataObject
) -> None:
    """Property: after the vendor's end marker only keep-alives and usage may come; any
    other event (text, a call, a block, another finish reason) fails the run with a
    ProviderError, and no call from the stream runs. A tool_use block sent after
    message_stop, or a call after an OpenAI finish_reason "stop", ran (helper-182)."""
    events = list(vendor.TOOL_CALL_STREAM_EVENTS if calls else vendor.TEXT_STREAM_EVENTS)
    end = max(i for i in range(len(events)) if _ended(events[i : i + 1]))
    every = [
        e for e in vendor.TOOL_CALL_STREAM_EVENTS + vendor.TEXT_STREAM_EVENTS if e[1] != "[DONE]"
    ]
    added = data.draw(st.lists(st.sampled_from(every), min_size=1, max_size=3))
    last = len(events) - (events[-1][1] == "[DONE]")  # the SDK reads nothing after [DONE]
    at = data.draw(st.integers(end + 1, last))
    events[at:at] = added
    ran: list[dict[str, Any]] = []
    with WireServer() as server:
        server.reply(sse_reply(events), vendor.TEXT_STREAM_REPLY)
        with _weather_agent(vendor, server, ran) as agent:
            if not any(map(_adds_to_the_answer, added)):
                agent.run(vendor.QUESTION)
                assert len(ran) == (2 if calls else 0)
                return
            with pytest.raises(ProviderError, match="went on after its end"):
                agent.run(vendor.QUESTION)
            assert ran == []
            assert [m.role for m in agent.messages] == [Role.USER]


def _paths(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """The path of every field and item inside ``value``, parents first."""
    if isinstance(value, dict):
        items: Any = value.items()
    else:
        items = enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        yield (*path, key)
        yield from _paths(item, (*path, key))


def _replaced(value: Any, path: tuple[str | int, ...], new: Any) -> Any:
    """A copy of ``value`` with the field at ``path`` set to ``new``."""
    copy = json.loads(json.dumps(value))
    parent = copy
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = new
    return copy


@settings(max_examples=50, deadline=None)
@given(
    vendor=st.sampled_from([openai_wire, anthropic_wire]), streamed=st.booleans(), data=st.data()
)
def test_a_malformed_answer_is_a_provider_error_naming_the_field(
    vendor: Any, streamed: bool, data: st.DataObject
) -> None:
    """Property: an answer (whole, or one event of a stream) with any field replaced by
    a value of another shape is read, or refused with a ProviderError naming that field
    (``$.choices[0].message``) or one inside it; no other exception escapes the adapter."""
    bodies = {
        openai_wire: openai_wire.TOOL_CALL_COMPLETION,
        anthropic_wire: anthropic_wire.TOOL_USE_MESSAGE,
    }
    events = list(vendor.TOOL_CALL_STREAM_EVENTS)
    position = data.draw(st.integers(0, len(events) - 1)) if streamed else 0
    body = events[position][1] if streamed else bodies[vendor]
    assume(isinstance(body, dict))
    path = data.draw(st.sampled_from(list(_paths(body))))
    new = data.draw(st.sampled_from([None, "x", 7, [], {}]))
    assume(new != functools.reduce(lambda value, key: value[key], path, body))
    with WireServer() as server, vendor.provider(server.url, sleep=lambda _: None) as provider:
        try:
            if streamed:
                events[position] = (events[position][0], _replaced(body, path, new))
                server.reply(sse_reply(events))
                list(provider.stream(ask(vendor)))
            else:
                server.reply(json_reply(_replaced(body, path, new)))
                provider.complete(ask(vendor))
        except ProviderError as exc:
            if "malformed" in str(exc):
                # The SDK picks a block's or event's model by its type: a changed type
                # may leave a sibling field missing.
                within = path[:-1] if path[-1] == "type" else path
                named = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in within)
                # That field, or one inside it (an object replaced by {} lacks them).
                assert re.search(rf"at `\${re.escape(named)}[.\[`]", str(exc)), exc


def _unreadable(body: bytes, corruption: str, at: int, size: int) -> bytes:
    """``body`` made unreadable as JSON at byte ``at`` (not the first): cut there, a byte
    that is not UTF-8 put there, a value nested ``size`` deep put there, or an integer
    of ``size`` digits (past Python's limit of 4,300) in place of a value."""
    at = 1 + at % (len(body) - 1)
    head, tail = body[:at], body[at:]
    if corruption == "cut":
        return head
    if corruption == "not UTF-8":
        return head + b"\xff" + tail
    value = b"[" * size + b"]" * size if corruption == "deep" else b"9" * size
    return body.replace(b'"object"', value, 1) if b'"object"' in body else b'{"a":' + value + b"}"


@settings(max_examples=50, deadline=None)
@given(
    vendor=st.sampled_from([openai_wire, anthropic_wire]),
    streamed=st.booleans(),
    corruption=st.sampled_from(["cut", "not UTF-8", "deep", "big integer"]),
    at=st.integers(0, 10_000),
    size=st.integers(4_400, 6_000),
)
def test_a_body_that_is_not_readable_json_is_a_provider_error(
    vendor: Any, streamed: bool, corruption: str, at: int, size: int
) -> None:
    """Property: an answer (whole, or one event of a stream) that is not readable JSON
    (cut short, not UTF-8, nested past the recursion limit, an integer past the digit
    limit) is a ProviderError, its cause not chained; no other exception escapes the
    adapter. JSONDecodeError, UnicodeDecodeError, RecursionError and ValueError escaped
    both adapters' complete() and stream() bare (helper-182)."""
    reply = vendor.TOOL_CALL_REPLY
    body = _unreadable(reply.body or b"{}", corruption, at, size)
    if streamed:
        name = b"event: message_start\n" if vendor is anthropic_wire else b""
        reply = Reply(events=(name + b"data: " + body + b"\n\n",))
    else:
        reply = Reply(body=body)
    with WireServer() as server, vendor.provider(server.url, sleep=lambda _: None) as provider:
        server.reply(reply)
        with pytest.raises(ProviderError) as caught:
            if streamed:
                list(provider.stream(ask(vendor)))
            else:
                provider.complete(ask(vendor))
    assert "is not readable JSON" in str(caught.value)
    assert caught.value.__cause__ is None


_READ_COUNTS = {
    "prompt_tokens",
    "completion_tokens",
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
}


@settings(max_examples=50, deadline=None)
@given(
    vendor=st.sampled_from([openai_wire, anthropic_wire]),
    streamed=st.booleans(),
    count=st.sampled_from([True, False, 3.0, 0.0, "5", "0", 1e3]) | st.floats(0, 1e6),
    data=st.data(),
)
def test_a_token_count_that_is_not_an_integer_is_refused_on_every_path(
    vendor: Any, streamed: bool, count: Any, data: st.DataObject
) -> None:
    """Property: a token count that is not a JSON integer (true, 3.0, "5"), in a whole
    answer or a streamed one, refuses the response with a ProviderError naming it. The
    SDKs' lenient reading recorded true, 3.0 and "5" as 1, 3 and 5 on OpenAI's
    complete() and Anthropic's stream(), but not on the other two paths (helper-182)."""
    bodies = {
        openai_wire: openai_wire.ANSWER_COMPLETION,
        anthropic_wire: anthropic_wire.TOOL_USE_MESSAGE,
    }
    events = list(vendor.TEXT_STREAM_EVENTS)
    answers = [data for _, data in events] if streamed else [bodies[vendor]]
    counts = [
        (position, path)
        for position, answer in enumerate(answers)
        if isinstance(answer, dict)
        for path in _paths(answer)
        if path[-1] in _READ_COUNTS and path[-2] == "usage"
    ]
    position, path = data.draw(st.sampled_from(counts))
    changed = _replaced(answers[position], path, count)
    if streamed:
        events[position] = (events[position][0], changed)
    reply = sse_reply(events) if streamed else json_reply(changed)
    with (
        WireServer() as server,
        vendor.provider(server.url, sleep=lambda _: None) as provider,
        pytest.raises(ProviderError, match=re.escape(str(path[-1]))),
    ):
        server.reply(reply)
        if streamed:
            list(provider.stream(ask(vendor)))
        else:
            provider.complete(ask(vendor))
