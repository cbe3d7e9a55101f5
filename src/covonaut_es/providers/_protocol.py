"""The model provider protocol and the scripted provider used offline and in tests."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, runtime_checkable

from covonaut_es.errors import ScriptExhaustedError
from covonaut_es.messages import ProviderRequest, ProviderResponse, StreamDelta, ToolCall, Usage


@runtime_checkable
class Provider(Protocol):
    """A model behind an API: given the context and tools, it answers.

    Implementations raise :class:`~covonaut_es.errors.ProviderError` (or any exception, which
    the agent wraps in one) when the model cannot answer.
    """

    def complete(self, request: ProviderRequest) -> ProviderResponse:
        """Answer the request in one piece."""
        ...

    def stream(self, request: ProviderRequest) -> Iterator[StreamDelta]:
        """Answer the request piece by piece."""
        ...


@runtime_checkable
class AsyncProvider(Protocol):
    """A model provider whose ``complete`` is ``async def``.

    ``Agent.arun`` and its siblings await it; the blocking ``Agent.run`` runs it to
    completion in an event loop of its own. A blocking :class:`Provider` may also offer
    an ``async def acomplete(request)``, which the async methods then prefer to calling
    ``complete`` in a worker thread.
    """

    async def complete(self, request: ProviderRequest) -> ProviderResponse:
        """Answer the request in one piece."""
        ...


Responder = Callable[[ProviderRequest], ProviderResponse]
ScriptItem = ProviderResponse | Responder | BaseException


class ScriptedProvider:
    """A provider that plays back a script and records every request it got.

    Each script item answers one request: a :class:`ProviderResponse` is returned as
    is, a callable is called with the request, an exception is raised. When the script
    is used up, ``respond`` (if given) answers every further request; otherwise
    :class:`ScriptExhaustedError` is raised.

    Args:
        script: The answers, in order.
        respond: Answers requests after the script, e.g. a function of the messages.

    Attributes:
        requests: Every request received, in order.
    """

    def __init__(self, script: Iterable[ScriptItem] = (), *, respond: Responder | None = None):
        self._script: deque[ScriptItem] = deque(script)
        self._respond = respond
        self._lock = threading.Lock()
        self.requests: list[ProviderRequest] = []

    def complete(self, request: ProviderRequest) -> ProviderResponse:
        """Record the request and play the next script item."""
        with self._lock:
            self.requests.append(request)
            item: ScriptItem | None = self._script.popleft() if self._script else self._respond
        if item is None:
            msg = (
                f"the scripted provider has no answer for request {len(self.requests)}: "
                "its script is used up and it has no respond function"
            )
            raise ScriptExhaustedError(msg)
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, ProviderResponse):
            return item
        return item(request)

    def stream(self, request: ProviderRequest) -> Iterator[StreamDelta]:
        """Play the next script item as deltas: the text word by word, then the rest."""
        response = self.complete(request)
        words = response.content.split(" ")
        for word in words[:-1]:
            yield StreamDelta(content=word + " ")
        yield StreamDelta(
            content=words[-1],
            tool_calls=response.tool_calls,
            usage=response.usage,
            finish_reason=response.finish_reason,
        )

    @property
    def remaining(self) -> int:
        """Script items not yet played."""
        return len(self._script)


def collect_stream(deltas: Iterable[StreamDelta]) -> ProviderResponse:
    """Assemble streamed deltas into the response they add up to."""
    content: list[str] = []
    tool_calls: list[ToolCall] = []
    usage: Usage | None = None
    finish_reason: str | None = None
    for delta in deltas:
        content.append(delta.content)
        tool_calls.extend(delta.tool_calls)
        usage = delta.usage or usage
        finish_reason = delta.finish_reason or finish_reason
    return ProviderResponse(
        content="".join(content),
        tool_calls=tuple(tool_calls),
        usage=usage,
        finish_reason=finish_reason,
    )
