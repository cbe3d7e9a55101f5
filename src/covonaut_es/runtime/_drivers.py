"""Drivers perform the run loop's effects: one with blocking calls, one with ``await``.

Both drive the same program (:func:`covonaut_es.runtime._loop.run_program`): they send each
effect's result back into it, or throw the exception the effect raised, until the
program returns the run's output. Every decision stays in the program; a driver only
does the I/O, and how the agent commits a step is handed to it as a function.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed

from covonaut_es._aio import call_async, call_blocking
from covonaut_es.messages import ProviderRequest, ProviderResponse
from covonaut_es.providers import AsyncProvider, Provider
from covonaut_es.runtime._loop import (
    Commit,
    Complete,
    Effect,
    NextToolReport,
    PreparedCall,
    Program,
    RunTool,
    StartTools,
    ToolReport,
)


class _Cursor:
    """Where a program stands: its next effect, or its output once it returned."""

    def __init__(self, program: Program) -> None:
        self._program = program
        self.output = ""

    def advance(self, reply: object, error: Exception | None) -> Effect | None:
        """Hand the last effect's result (or error) to the program; its next effect, or
        None when it returned."""
        try:
            return self._program.throw(error) if error is not None else self._program.send(reply)
        except StopIteration as stop:
            self.output = str(stop.value)
            return None


class SyncDriver:
    """Performs effects with blocking calls; parallel tool calls run in threads.

    Args:
        provider: The model provider; an ``async def complete`` is run to completion.
        commit: Commits a step boundary.
    """

    def __init__(self, provider: Provider | AsyncProvider, commit: Callable[[Commit], None]):
        self._provider = provider
        self._commit = commit
        self._pending: Iterator[Future[ToolReport]] | None = None

    def drive(self, program: Program) -> str:
        """Run the program to its end and return its output."""
        cursor = _Cursor(program)
        effect = cursor.advance(None, None)
        while effect is not None:
            try:
                reply, error = self._perform(effect), None
            except Exception as exc:
                reply, error = None, exc
            effect = cursor.advance(reply, error)
        return cursor.output

    def _perform(self, effect: Effect) -> object:
        match effect:
            case Complete(request):
                return call_blocking(self._provider.complete, request)
            case Commit():
                self._commit(effect)
                return None
            case RunTool(prepared):
                return run_tool(prepared)
            case StartTools(calls):
                executor = ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="tool")
                futures = [executor.submit(run_tool, prepared) for prepared in calls]
                executor.shutdown(wait=False)
                self._pending = as_completed(futures)
                return None
            case NextToolReport():
                assert self._pending is not None
                return next(self._pending).result()
        raise AssertionError(f"unknown effect {effect!r}")  # pragma: no cover


class AsyncDriver:
    """Performs effects with ``await``; parallel tool calls run as concurrent tasks.

    Blocking providers, tools and commits run in worker threads, so the event loop keeps
    serving other agents while one waits.

    Args:
        provider: The model provider: its ``acomplete`` if it has one, else its
            ``complete`` (awaited if ``async def``, else in a worker thread).
        commit: Commits a step boundary.
    """

    def __init__(
        self, provider: Provider | AsyncProvider, commit: Callable[[Commit], Awaitable[None]]
    ):
        self._provider = provider
        self._commit = commit
        self._tasks: list[asyncio.Task[ToolReport]] = []
        self._pending: Iterator[Awaitable[ToolReport]] | None = None

    async def drive(self, program: Program) -> str:
        """Run the program to its end and return its output."""
        cursor = _Cursor(program)
        effect = cursor.advance(None, None)
        try:
            while effect is not None:
                try:
                    reply, error = await self._perform(effect), None
                except Exception as exc:
                    reply, error = None, exc
                effect = cursor.advance(reply, error)
        finally:
            for task in self._tasks:
                task.cancel()  # only tasks of a batch the run did not wait for
        return cursor.output

    async def _perform(self, effect: Effect) -> object:
        match effect:
            case Complete(request):
                return await self._complete(request)
            case Commit():
                await self._commit(effect)
                return None
            case RunTool(prepared):
                return await arun_tool(prepared)
            case StartTools(calls):
                self._tasks = [asyncio.create_task(arun_tool(prepared)) for prepared in calls]
                self._pending = asyncio.as_completed(self._tasks)
                return None
            case NextToolReport():
                assert self._pending is not None
                return await next(self._pending)
        raise AssertionError(f"unknown effect {effect!r}")  # pragma: no cover

    async def _complete(self, request: ProviderRequest) -> ProviderResponse:
        acomplete = getattr(self._provider, "acomplete", None)
        if acomplete is not None:
            response: ProviderResponse = await acomplete(request)
            return response
        return await call_async(self._provider.complete, request)


def run_tool(prepared: PreparedCall) -> ToolReport:
    """Execute a call, blocking; an ``async def`` tool runs in an event loop of its own."""
    try:
        value = call_blocking(prepared.tool.func, prepared.context, prepared.args)
    except Exception as exc:
        return ToolReport.raised(prepared, exc)
    return ToolReport.returned(prepared, value)


async def arun_tool(prepared: PreparedCall) -> ToolReport:
    """Execute a call: an ``async def`` tool is awaited, a blocking one runs in a thread."""
    try:
        value = await call_async(prepared.tool.func, prepared.context, prepared.args)
    except Exception as exc:
        return ToolReport.raised(prepared, exc)
    return ToolReport.returned(prepared, value)
