"""The model provider protocol and the scripted provider used offline and in tests."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol, runtime_checkable

from covonaut_es.errors import ProviderConnectionError, ProviderError, ScriptExhaustedError
from covonaut_es.messages import (
    ProviderRequest,
    ProviderResponse,
    StreamDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)


@runtime_checkable
class Provider(Protocol):
    """A model behind an API: given the context and tools, it answers.

    Implementations raise :class:`~covonaut_es.errors.ProviderError` (or any exception, which
    the agent wraps in one) when the model cannot answer. One that can also answer piece
    by piece is a :class:`StreamingProvider`.
    """

    def complete(self, request: ProviderRequest) -> ProviderResponse:
        """Answer the request in one piece."""
        ...


@runtime_checkable
class StreamingProvider(Provider, Protocol):
    """A :class:`Provider` that can also answer piece by piece: a streaming run
    (``Agent.stream``, the AG-UI endpoint) reads its answer as the pieces come; a
    provider without ``stream`` is asked with ``complete`` and its answer given whole."""

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


StreamScript = tuple[StreamDelta | BaseException, ...]
"""An answer scripted delta by delta; an exception in it cuts the stream there."""
Responder = Callable[[ProviderRequest], ProviderResponse | StreamScript]
ScriptItem = ProviderResponse | StreamScript | Responder | BaseException


class ScriptedProvider:
    """A provider that plays back a script and records every request it got.

    Each script item answers one request: a :class:`ProviderResponse` is returned as
    is, a tuple of :class:`~covonaut_es.messages.StreamDelta` is streamed delta by delta
    (an exception among them is raised when its turn comes), a callable is called with
    the request, an exception is raised. When the script is used up, ``respond`` (if
    given) answers every further request; otherwise :class:`ScriptExhaustedError` is
    raised.

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
        item = self._next(request)
        if isinstance(item, ProviderResponse):
            return item
        return collect_stream(_played(item))

    def stream(self, request: ProviderRequest) -> Iterator[StreamDelta]:
        """Record the request and play the next script item as deltas: scripted deltas
        as they are; an answer's text word by word, then each tool call whole."""
        item = self._next(request)
        if not isinstance(item, ProviderResponse):
            yield from _played(item)
            return
        words = item.content.split(" ")
        for word in words[:-1]:
            yield StreamDelta(content=word + " ")
        yield StreamDelta(
            content=words[-1],
            tool_calls=item.tool_calls,
            usage=item.usage,
            finish_reason=item.finish_reason,
            tool_call_deltas=whole_pieces(item.tool_calls),
            model=item.model,
            final=True,
        )

    def _next(self, request: ProviderRequest) -> ProviderResponse | StreamScript:
        """Record the request; the answer the script gives it (raising a scripted
        exception)."""
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
        if isinstance(item, ProviderResponse | tuple):
            return item
        return item(request)


def _played(script: StreamScript) -> Iterator[StreamDelta]:
    for item in script:
        if isinstance(item, BaseException):
            raise item
        yield item


def collect_stream(deltas: Iterable[StreamDelta]) -> ProviderResponse:
    """Assemble streamed deltas into the response they add up to.

    The tool calls are those the deltas carry whole, if any does or a delta is marked
    ``final`` (an adapter assembles them in the vendor's canonical form, and leaves out
    what it refused); otherwise those their pieces add up to.
    """
    content: list[str] = []
    tool_calls: list[ToolCall] = []
    pieces: list[ToolCallDelta] = []
    usage: Usage | None = None
    finish_reason: str | None = None
    model = ""
    final = False
    for delta in deltas:
        final = final or delta.final
        content.append(delta.content)
        tool_calls.extend(delta.tool_calls)
        pieces.extend(delta.tool_call_deltas)
        usage = delta.usage or usage
        finish_reason = delta.finish_reason or finish_reason
        model = delta.model or model
    return ProviderResponse(
        content=joined(content),
        tool_calls=tuple(tool_calls) if final else tuple(tool_calls) or assembled_calls(pieces),
        usage=usage,
        finish_reason=finish_reason,
        model=model,
    )


def final_delta(
    api: str,
    end: str,
    ended: bool,
    *,
    tool_calls: tuple[ToolCall, ...],
    usage: Usage | None,
    finish_reason: str | None,
    model: str,
) -> StreamDelta:
    """The last delta of a stream that ``api`` said it ended, marked ``final``.

    A stream closed before its vendor's end marker (a proxy or server cut it cleanly)
    holds part of an answer: its text is cut off and its calls may be incomplete, so it
    is refused rather than taken for the whole answer.

    Args:
        api: The API's name in the message, e.g. ``"OpenAI"``.
        end: The vendor's end marker, named in the message, e.g. ``"message_stop"``.
        ended: Whether the stream carried it.
        tool_calls: The answer's calls, assembled by the adapter.
        usage: The answer's token usage, if reported.
        finish_reason: Why the model stopped, in the common vocabulary.
        model: The model that answered.

    Raises:
        ProviderConnectionError: The stream closed without ``end``.
    """
    if not ended:
        msg = (
            f"the {api} stream closed before the answer ended (no {end}): the partial "
            "answer is not used; try again"
        )
        raise ProviderConnectionError(msg)
    return StreamDelta(
        tool_calls=tool_calls, usage=usage, finish_reason=finish_reason, model=model, final=True
    )


def after_end(api: str, end: str, ended: bool, what: str) -> None:
    """Refuse ``what``, an event that adds to the answer, if the stream had ended.

    Only keep-alives and usage may follow a vendor's end marker: anything else (a tool
    call, more text, another finish reason) is not part of the answer the vendor said
    was whole, so the stream is refused rather than the event taken or passed over.

    Args:
        api: The API's name in the message, e.g. ``"OpenAI"``.
        end: The vendor's end marker, named in the message, e.g. ``"message_stop"``.
        ended: Whether the stream had carried it.
        what: What the event is, in the message, e.g. ``"content_block_start event"``.

    Raises:
        ProviderError: ``ended`` is true.
    """
    if ended:
        msg = (
            f"the {api} stream went on after its end ({end}) with a {what}: the answer is not used"
        )
        raise ProviderError(msg)


def joined(pieces: Iterable[str]) -> str:
    """Streamed pieces of text joined, a character the stream split between two pieces
    made whole again: a JSON string may escape a character beyond U+FFFF as a surrogate
    pair, and a vendor may cut a fragment between its halves, each of which then reads
    as a lone surrogate that no store can encode."""
    text = "".join(pieces)
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def whole_pieces(calls: Sequence[ToolCall]) -> tuple[ToolCallDelta, ...]:
    """Each of ``calls`` as one piece that holds all of it."""
    return tuple(
        ToolCallDelta(index=index, id=call.id, name=call.name, arguments=call.arguments)
        for index, call in enumerate(calls)
    )


def assembled_calls(pieces: Sequence[ToolCallDelta]) -> tuple[ToolCall, ...]:
    """The tool calls that streamed pieces add up to, in the order of their indexes: each
    call's first id and name given, and its argument fragments joined (``{}`` if none)."""
    ids: dict[int, str] = {}
    names: dict[int, str] = {}
    arguments: dict[int, list[str]] = {}
    for piece in pieces:
        if piece.id:
            ids.setdefault(piece.index, piece.id)
        if piece.name:
            names.setdefault(piece.index, piece.name)
        arguments.setdefault(piece.index, []).append(piece.arguments)
    return tuple(
        ToolCall(ids.get(index, ""), names.get(index, ""), joined(arguments[index]) or "{}")
        for index in sorted(arguments)
    )
