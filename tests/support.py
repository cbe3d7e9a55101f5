"""Builders shared by the tests: a fixed clock, scripted responses and tools."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from covonaut_es import (
    InterruptError,
    ProviderRequest,
    ProviderResponse,
    ScriptedProvider,
    Tool,
    ToolCall,
    ToolContext,
    Usage,
)
from covonaut_es.providers import Responder, ScriptItem

OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}


def ticking_clock(start: datetime | None = None) -> Callable[[], datetime]:
    """A clock that advances one millisecond per reading, so times are distinct and
    tests are repeatable."""
    origin = start or datetime(2026, 1, 1, tzinfo=UTC)
    ticks: Iterator[int] = itertools.count()
    return lambda: origin + timedelta(milliseconds=next(ticks))


def answer(text: str, *, tokens: int = 0) -> ProviderResponse:
    """A final text answer."""
    return ProviderResponse(
        content=text, usage=Usage(tokens, tokens) if tokens else None, finish_reason="stop"
    )


def call(*calls: tuple[str, str, str]) -> ProviderResponse:
    """A response that calls tools: each item is (call id, tool name, JSON arguments)."""
    return ProviderResponse(
        tool_calls=tuple(ToolCall(i, n, a) for i, n, a in calls), finish_reason="tool_calls"
    )


def echo_tool(log: list[str] | None = None) -> Tool:
    """``echo``: returns its ``text`` argument and logs each execution."""

    def echo(ctx: ToolContext, args: dict[str, Any]) -> Any:
        if log is not None:
            log.append(ctx.tool_call_id)
        return {"echo": args["text"]}

    schema = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    }
    return Tool("echo", "Echo the text back", schema, echo)


def review_tool(log: list[str] | None = None, *, data: Any = None) -> Tool:
    """``review``: always interrupts, asking for a person's review."""

    def review(ctx: ToolContext, args: dict[str, Any]) -> Any:
        if log is not None:
            log.append(ctx.tool_call_id)
        raise InterruptError("human review required", data or {"request_id": ctx.tool_call_id})

    return Tool("review", "Ask a person to review", OBJECT_SCHEMA, review)


class AsyncScriptedProvider:
    """An ``async def complete`` provider: yields to the event loop, then plays the next
    item of a :class:`ScriptedProvider`'s script."""

    def __init__(self, script: Iterable[ScriptItem] = (), *, respond: Responder | None = None):
        self.scripted = ScriptedProvider(script, respond=respond)

    async def complete(self, request: ProviderRequest) -> ProviderResponse:
        """Answer after letting other tasks run."""
        await asyncio.sleep(0)
        return self.scripted.complete(request)

    @property
    def requests(self) -> list[ProviderRequest]:
        """Every request received, in order."""
        return self.scripted.requests
