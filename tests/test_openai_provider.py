"""What only OpenAIProvider does; what every adapter does is in test_provider_contract.py."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.shared import ResponseFormatJSONSchema

import openai_wire
from covonaut_es import Agent, AgentConfig
from covonaut_es.errors import ConfigurationError
from covonaut_es.providers import collect_stream
from covonaut_es.providers.openai import OpenAIProvider
from provider_wire import ask
from wire_server import WireServer, json_reply, sse_reply


@pytest.fixture
def wire() -> ModuleType:
    """The vendor of the shared ``provider`` fixture."""
    return openai_wire


def test_max_tokens_parameter_names_the_field(server: WireServer) -> None:
    """max_tokens goes out as max_completion_tokens, or as max_tokens if so configured;
    a request that sets no options sends only the model and the messages."""
    server.reply(*[openai_wire.ANSWER_REPLY] * 3)
    with openai_wire.provider(server.url) as current:
        current.complete(ask(openai_wire, max_tokens=256))
        current.complete(ask(openai_wire, tools=()))
    with openai_wire.provider(server.url, max_tokens_parameter="max_tokens") as legacy:
        legacy.complete(ask(openai_wire, max_tokens=256))
    limited, bare, old = server.bodies
    assert (limited["max_completion_tokens"], "max_tokens" in limited) == (256, False)
    assert set(bare) == {"model", "messages"}
    assert (old["max_tokens"], "max_completion_tokens" in old) == (256, False)


def test_missing_api_key_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without api_key or $OPENAI_API_KEY the provider cannot be built."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAIProvider(base_url="http://127.0.0.1:9/v1")


class Forecast(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    city: str
    temp_c: int


def test_a_typed_answer_asks_for_structured_outputs(server: WireServer, provider: Any) -> None:
    """A typed agent sends a json_schema response format the SDK's own type accepts,
    strict for a closed Struct; the answer's JSON text becomes the typed output."""
    content = '{"city":"Paris","temp_c":18}'
    answer = openai_wire.completion({"content": content}, "stop", (90, 9))
    server.reply(json_reply(answer))
    config = AgentConfig(provider=provider, model=openai_wire.MODEL, output_type=Forecast)
    with Agent(config) as agent:
        assert agent.run(openai_wire.QUESTION) == content
        assert agent.output == Forecast("Paris", 18)
    response_format = server.bodies[0]["response_format"]
    ResponseFormatJSONSchema.model_validate(response_format)
    assert response_format == {
        "type": "json_schema",
        "json_schema": {
            "name": "final_answer",
            "schema": {
                "title": "Forecast",
                "type": "object",
                "properties": {"city": {"type": "string"}, "temp_c": {"type": "integer"}},
                "required": ["city", "temp_c"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    }


def test_a_schema_strict_mode_cannot_take_is_sent_without_strict(
    server: WireServer, provider: Any
) -> None:
    """An open schema goes out with strict false, and a streamed typed answer is the
    joined text of its pieces."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    stream = [
        openai_wire.chunk(openai_wire.delta({"role": "assistant", "content": ""})),
        openai_wire.chunk(openai_wire.delta({"content": '{"city":'})),
        openai_wire.chunk(openai_wire.delta({"content": '"Lyon"}'})),
        openai_wire.chunk(openai_wire.delta({}, "stop")),
        openai_wire.usage_chunk(80, 6),
        "[DONE]",
    ]
    server.reply(sse_reply((None, data) for data in stream))
    config = AgentConfig(
        provider=provider, model=openai_wire.MODEL, output_type=schema, on_delta=lambda _: None
    )
    with Agent(config) as agent:
        agent.run(openai_wire.QUESTION)
        assert agent.output == {"city": "Lyon"}
    body = server.bodies[0]
    assert body["response_format"]["json_schema"]["strict"] is False
    assert body["stream"] is True


def _split(text: str, at: int) -> tuple[str, str]:
    """``text`` cut at its UTF-16 code unit ``at``, which may fall inside a surrogate
    pair: each half then holds one lone surrogate, as a JSON string escapes it."""
    units = text.encode("utf-16-le", "surrogatepass")
    at = 2 * (at % (len(units) // 2 + 1))
    head, tail = units[:at], units[at:]
    return head.decode("utf-16-le", "surrogatepass"), tail.decode("utf-16-le", "surrogatepass")


@settings(max_examples=50, deadline=None)
@given(
    city=st.text(st.characters(min_codepoint=0x20, exclude_categories=["Cs"]), max_size=6).map(
        lambda city: city + "\N{GRINNING FACE}"
    ),
    at=st.integers(0, 99),
)
def test_a_character_split_between_stream_pieces_is_whole_again(city: str, at: int) -> None:
    """Property: a call's arguments and the answer's text, cut into two stream pieces at
    any UTF-16 code unit (inside a surrogate pair included), stream to what they were
    and can be stored. An emoji split between two fragments became two lone surrogates
    that no store could encode (helper-182)."""
    arguments = json.dumps({"city": city}, ensure_ascii=False)
    first, second = _split(arguments, at)
    text_first, text_second = _split(city, at)
    events = [
        openai_wire.chunk(openai_wire.delta({"content": text_first})),
        openai_wire.chunk(openai_wire.delta({"content": text_second})),
        openai_wire.first_fragment(0, "call_1"),
        openai_wire.tool_fragment(0, function={"arguments": first}),
        openai_wire.tool_fragment(0, function={"arguments": second}),
        openai_wire.chunk(openai_wire.delta({}, "tool_calls")),
        "[DONE]",
    ]
    with WireServer() as server, openai_wire.provider(server.url) as provider:
        server.reply(sse_reply([(None, event) for event in events]))
        response = collect_stream(provider.stream(ask(openai_wire)))
    assert (response.content, response.tool_calls[0].arguments) == (city, arguments)
    msgspec.json.encode(response)  # storable: no lone surrogate left
