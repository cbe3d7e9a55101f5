"""What only AnthropicProvider does; what every adapter does is in
test_provider_contract.py."""

from __future__ import annotations

from types import ModuleType

import pytest

import anthropic_wire
from anthropic_wire import PARIS, message, usage_body
from covonaut_es import Message, Role
from covonaut_es.errors import ProviderServerError
from covonaut_es.messages import Usage
from covonaut_es.providers.anthropic import AnthropicProvider
from provider_wire import PARIS_RESULT, SYSTEM, ask
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
