"""What the provider contract suite asks of each vendor, and the conversation it replays.

Each vendor has a module (``openai_wire``, ``anthropic_wire``) that satisfies
:class:`VendorWire`: it knows the vendor's wire format, holds recorded answers to serve
from :class:`wire_server.WireServer`, and says what the adapter must map them to and
what it must send. The contract tests take such a module as their ``wire`` fixture.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from covonaut_es import Message, ProviderRequest, ProviderResponse, Role
from covonaut_es.messages import ToolSpec
from covonaut_es.providers._adapter import SdkAdapter
from wire_server import Reply

SYSTEM = "You are a terse weather assistant."
WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
WEATHER = ToolSpec("get_weather", "Current weather for a city.", WEATHER_SCHEMA)
WEATHER_BY_CITY: dict[str, dict[str, Any]] = {
    "Paris": {"temp_c": 18, "sky": "sunny"},
    "Lyon": {"temp_c": 21, "sky": "cloudy"},
}
PARIS_RESULT = '{"temp_c":18,"sky":"sunny"}'
LYON_RESULT = '{"temp_c":21,"sky":"cloudy"}'


class VendorWire(Protocol):
    """One vendor's side of the contract suite; a module satisfies it.

    Attributes:
        SDK: The SDK's package, which is also the name of the extra that installs it.
        MODULE: The adapter's module.
        PROVIDER: The adapter's class name.
        MODEL: The model named in requests.
        ANSWERED_MODEL: The model the recorded answers say answered.
        QUESTION: The user's question the recorded answers answer.
        API_KEY: The key the tests' providers use.
        KEY_VARIABLES: The environment variables the SDK reads a key or token from.
        OTHER_CREDENTIAL: Options that give the SDK's client a credential in a way of
            its own (not a key as text, nor a header).
        PATH: The URL path the adapter posts to.
        HEADERS: Headers every request carries, with their values (None: any value).
        MAX_TOKENS_FIELD: The request field that carries ``max_tokens``.
        STREAM_FIELDS: The fields a streamed request adds.
        TOOL_CHOICE_NONE: How ``tool_choice="none"`` goes out.
        FINISH_REASONS: For each common finish reason, the vendor's reasons that map to
            it; a vendor's reason that maps to itself passes through unknown.
        FIRST_BODY: The request body of the question with the weather tool.
        TOOL_CALL_REPLY: The recorded answer that calls the tool.
        TOOL_CALL_RESPONSE: What that answer maps to.
        TOOL_RESULTS: The tool messages that answer those calls.
        TOOL_RESULTS_BODY: The last messages of the request that sends the results back.
        ANSWER_REPLY: The recorded final answer.
        ANSWER: Its text.
        ANSWER_USAGE: Its usage.
        TEXT_STREAM_EVENTS: The ``(event name or None, data)`` pairs of that stream.
        TEXT_STREAM_REPLY: The final answer, streamed.
        TEXT_PIECES: The text of each of its deltas.
        TOOL_CALL_STREAM_EVENTS: The ``(event name or None, data)`` pairs of that stream.
        TOOL_CALL_STREAM_REPLY: A streamed answer that calls tools.
        STREAMED_TOOL_CALL_RESPONSE: What the deltas of that stream add up to.
        RATE_LIMITED: The body of a 429.
        SERVER_ERRORS: ``(status, body)`` of each server error the vendor sends.
        BAD_REQUEST: The body of a 400.
        BAD_REQUEST_DETAIL: A piece of its message.
        BAD_REQUEST_ERROR: The SDK's error for a 400.
    """

    SDK: str
    MODULE: str
    PROVIDER: str
    MODEL: str
    ANSWERED_MODEL: str
    QUESTION: str
    API_KEY: str
    KEY_VARIABLES: tuple[str, ...]
    OTHER_CREDENTIAL: Mapping[str, Any]
    PATH: str
    HEADERS: Mapping[str, str | None]
    MAX_TOKENS_FIELD: str
    STREAM_FIELDS: Mapping[str, Any]
    TOOL_CHOICE_NONE: Any
    FINISH_REASONS: Mapping[str, tuple[str, ...]]
    FIRST_BODY: dict[str, Any]
    TOOL_CALL_REPLY: Reply
    TOOL_CALL_RESPONSE: ProviderResponse
    TOOL_RESULTS: tuple[Message, ...]
    TOOL_RESULTS_BODY: list[Any]
    ANSWER_REPLY: Reply
    ANSWER: str
    ANSWER_USAGE: Any
    TEXT_STREAM_EVENTS: list[tuple[str | None, Any]]
    TEXT_STREAM_REPLY: Reply
    TEXT_PIECES: tuple[str, ...]
    TOOL_CALL_STREAM_EVENTS: list[tuple[str | None, Any]]
    TOOL_CALL_STREAM_REPLY: Reply
    STREAMED_TOOL_CALL_RESPONSE: ProviderResponse
    RATE_LIMITED: Any
    SERVER_ERRORS: tuple[tuple[int, Any], ...]
    BAD_REQUEST: Any
    BAD_REQUEST_DETAIL: str
    BAD_REQUEST_ERROR: type[Exception]

    def provider(self, url: str, **options: Any) -> SdkAdapter[Any]:
        """The adapter on the server at ``url``, with the test key unless one is given."""
        ...

    def client(self, url: str, **options: Any) -> Any:
        """The SDK's own client on the server at ``url``, with the test key unless one
        is given."""
        ...

    def sdk_ask(self, client: Any) -> None:
        """Ask the question through the SDK's ``client`` itself, as the adapter would."""
        ...

    def finished(self, reason: str, usage: tuple[int, int]) -> Reply:
        """A recorded answer "Hi" with the vendor's finish ``reason`` and token counts."""
        ...


def ask(wire: VendorWire, *messages: Message, **fields: Any) -> ProviderRequest:
    """The vendor's question with the weather tool, then ``messages``; ``fields``
    override the request's other fields."""
    question = (Message(Role.SYSTEM, SYSTEM), Message(Role.USER, wire.QUESTION))
    fields.setdefault("tools", (WEATHER,))
    return ProviderRequest(model=wire.MODEL, messages=question + messages, **fields)
