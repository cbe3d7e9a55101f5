"""What only OpenAIProvider does; what every adapter does is in test_provider_contract.py."""

from __future__ import annotations

from types import ModuleType

import pytest

import openai_wire
from covonaut_es.errors import ConfigurationError
from covonaut_es.providers.openai import OpenAIProvider
from provider_wire import ask
from wire_server import WireServer


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
