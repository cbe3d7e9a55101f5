"""Streaming a turn's answer: the pieces a consumer sees beside the committed events.

A run that streams asks the provider with ``stream()`` instead of ``complete()`` for each
turn's answer, hands every piece to the consumer as it arrives, and gives the run loop
the response the pieces add up to, which the loop checks and commits as it would a
response in one piece (ADR 0033). Nothing here changes the thread: a piece is news, not
state, and only the committed events say what happened.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import TypeGuard

import attrs

from covonaut_es._aio import call_blocking
from covonaut_es.domain import AgentThread
from covonaut_es.messages import (
    Delta,
    ProviderRequest,
    ProviderResponse,
    StreamDelta,
    TextDelta,
    ToolCallDelta,
)
from covonaut_es.providers import AsyncProvider, Provider, StreamingProvider, collect_stream
from covonaut_es.providers._protocol import whole_pieces


@attrs.frozen
class CommittedEvent:
    """One of the thread's events, handed on once the step that recorded it is
    committed (as ``AgentConfig.on_event`` gets it).

    Attributes:
        event: The event.
    """

    event: AgentThread.Event


StreamItem = TextDelta | ToolCallDelta | CommittedEvent
"""What ``Agent.astream`` yields: the answer's pieces as the model produces them and, at
each commit point, the events committed. Tell them apart with ``match`` or
``isinstance``."""

Emit = Callable[[Delta], None]


class _Stopped(Exception):
    """The consumer went away: stop reading the provider's stream."""


def streams(provider: Provider | AsyncProvider) -> TypeGuard[StreamingProvider]:
    """Whether ``provider`` answers piece by piece (has a ``stream()`` method)."""
    return callable(getattr(provider, "stream", None))


def emit_whole(response: ProviderResponse, emit: Emit) -> ProviderResponse:
    """Emit an answer given in one piece as the pieces it holds (for a provider that
    cannot stream) and return it."""
    pieces = whole_pieces(response.tool_calls)
    whole = StreamDelta(content=response.content, tool_call_deltas=pieces)
    for piece in whole.pieces():
        emit(piece)
    return response


def stream_answer(
    provider: Provider | AsyncProvider,
    request: ProviderRequest,
    emit: Emit,
    stopped: threading.Event | None = None,
) -> ProviderResponse:
    """Ask ``provider`` for the answer piece by piece, emit each piece, and return the
    response the pieces add up to. A provider that cannot stream is asked with
    ``complete()``.

    Args:
        provider: The model provider.
        request: The request.
        emit: Gets each piece, in order.
        stopped: Once set, the stream is closed at its next delta (the consumer left).
    """
    if not streams(provider):
        return emit_whole(call_blocking(provider.complete, request), emit)
    deltas: Iterator[StreamDelta] = provider.stream(request)
    received: list[StreamDelta] = []
    try:
        for delta in deltas:
            if stopped is not None and stopped.is_set():
                raise _Stopped
            received.append(delta)
            for piece in delta.pieces():
                emit(piece)
    finally:
        close = getattr(deltas, "close", None)
        if callable(close):
            close()  # an adapter's stream releases its HTTP response
    return collect_stream(received)


async def astream_answer(
    provider: Provider | AsyncProvider, request: ProviderRequest, emit: Emit
) -> ProviderResponse:
    """:func:`stream_answer` in a worker thread; each piece is emitted on the event
    loop, in order and before the response is returned. A cancelled stream is closed at
    its next delta."""
    loop = asyncio.get_running_loop()
    stopped = threading.Event()

    def handed_over(piece: Delta) -> None:
        loop.call_soon_threadsafe(emit, piece)

    try:
        return await asyncio.to_thread(stream_answer, provider, request, handed_over, stopped)
    finally:
        stopped.set()
