"""How a user's ``mypy --strict`` sees the public API: checked by ``make typecheck``
(this folder is in ``[tool.mypy] files``), never run. A line that must be an error
carries a ``type: ignore`` naming it, which strict mode reports when it goes unused,
so the check fails if the error goes away."""

from __future__ import annotations

from collections.abc import Sequence

from covonaut_es import AgentConfig, ScriptedProvider, Tool, ToolContext, open_store
from covonaut_es.errors import ProviderCallError, ProviderError
from covonaut_es.messages import ProviderRequest, ProviderResponse
from covonaut_es.store import Store
from covonaut_es.workers import ReviewNotice, Worker


def to_slack(n: ReviewNotice) -> None:
    """A notifier whose parameter has a name of the user's own."""


def make_config(thread_id: str) -> AgentConfig:
    return AgentConfig(provider=ScriptedProvider(), tools=[])


class CompleteOnly:
    """A blocking provider that answers in one piece only."""

    def complete(self, request: ProviderRequest) -> ProviderResponse:
        return ProviderResponse(content="hi")


AgentConfig(provider=CompleteOnly())


Worker(open_store("memory://"), make_config, notifier=to_slack)


class Plugins:
    """A tool source whose tools are a list."""

    @property
    def name(self) -> str:
        return "plugins"

    def tools(self) -> Sequence[Tool]:
        return [Tool("echo", "Echo", {"type": "object"}, lambda ctx, args: args)]


AgentConfig(provider=ScriptedProvider(), mcp_servers=[Plugins()])


def waited(error: ProviderError) -> float | None:
    """The wait a provider's failure asked for, read from their one public base."""
    if isinstance(error, ProviderCallError):
        return error.retry_after
    return None


from covonaut_es import ThreadBusyErorr  # type: ignore[attr-defined]  # noqa: E402
from covonaut_es.runtime import Agnet  # type: ignore[attr-defined]  # noqa: E402
from covonaut_es.service import ThreadServise  # type: ignore[attr-defined]  # noqa: E402

Store.from_application(object())  # type: ignore[arg-type]
_ = (ToolContext, ThreadBusyErorr, Agnet, ThreadServise)
