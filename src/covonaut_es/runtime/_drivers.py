"""Drivers perform the run loop's effects: one with blocking calls, one with ``await``.

Both drive the same program (:func:`covonaut_es.runtime._loop.run_program`): they send each
effect's result back into it, or throw the exception the effect raised, until the
program returns the run's output. Every decision stays in the program; a driver only
does the I/O, and how the agent commits a step is handed to it as a function.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from datetime import datetime

import attrs

from covonaut_es._aio import call_async, call_blocking, is_async_callable
from covonaut_es.messages import Delta, ProviderRequest, ProviderResponse
from covonaut_es.providers import AsyncProvider, Provider
from covonaut_es.runtime._loop import (
    Commit,
    Complete,
    Effect,
    NextToolReport,
    PreparedCall,
    Program,
    ReviewTime,
    RunTool,
    StartTools,
    ToolReport,
)
from covonaut_es.runtime._streaming import astream_answer, emit_whole, stream_answer, streams
from covonaut_es.service._running import listed


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


def _no_guard() -> None:
    pass


def _as_read(now: datetime) -> datetime:
    return now


class SyncDriver:
    """Performs effects with blocking calls; parallel tool calls run in threads.

    Args:
        provider: The model provider; an ``async def complete`` is run to completion.
        database: Names the database of the run's lease, where its calls are listed as
            running (:func:`covonaut_es.runtime.running_calls`).
        commit: Commits a step boundary.
        guard: Called before any tool call starts; raises to stop the run instead
            (the run lease was lost).
        on_delta: Gets each piece of a turn's answer as it streams in; None: the
            answer is asked for in one piece.
        review_time: Gives the time a review asked for at the runner's reading counts
            its deadline from (``ReviewTime``); by default that reading.
    """

    def __init__(
        self,
        provider: Provider | AsyncProvider,
        database: str,
        commit: Callable[[Commit], None],
        guard: Callable[[], None] = _no_guard,
        on_delta: Callable[[Delta], None] | None = None,
        review_time: Callable[[datetime], datetime] = _as_read,
    ):
        self._provider = provider
        self._tools = _ToolRunner(database)
        self._commit = commit
        self._guard = guard
        self._on_delta = on_delta
        self._review_time = review_time
        self._started: _Started | None = None

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
            case Complete(request, answer=True) if self._on_delta is not None:
                return stream_answer(self._provider, request, self._on_delta)
            case Complete(request):
                return call_blocking(self._provider.complete, request)
            case Commit():
                self._commit(effect)
                return None
            case ReviewTime(now):
                return self._review_time(now)
            case RunTool(prepared):
                self._guard()
                if prepared.timeout is None:
                    return self._tools.run(prepared)
                return _Started(self._tools, (prepared,)).next_report()
            case StartTools(calls):
                self._guard()
                self._started = _Started(self._tools, calls)
                return None
            case NextToolReport():
                assert self._started is not None
                return self._started.next_report()
        raise AssertionError(f"unknown effect {effect!r}")  # pragma: no cover


class _Started:
    """Calls started in threads of their own, each awaited until its deadline.

    The threads are daemons: a call that outran its timeout is left to finish on its
    own, and does not keep the process from exiting.
    """

    def __init__(self, tools: _ToolRunner, calls: tuple[PreparedCall, ...]) -> None:
        now = time.monotonic()
        self._calls: dict[Future[ToolReport], tuple[PreparedCall, float]] = {}
        for prepared in calls:
            deadline = math.inf if prepared.timeout is None else now + prepared.timeout
            self._calls[tools.in_thread(prepared)] = (prepared, deadline)

    def next_report(self) -> ToolReport:
        """How the next call ended: the first to return, or the first past its deadline."""
        while True:
            first = min(deadline for _, deadline in self._calls.values())
            wait_for = None if first == math.inf else max(0.0, first - time.monotonic())
            done, _ = wait(self._calls, timeout=wait_for, return_when=FIRST_COMPLETED)
            if done:
                future = next(iter(done))
                del self._calls[future]
                return future.result()
            for future, (prepared, deadline) in list(self._calls.items()):
                if deadline <= time.monotonic():
                    del self._calls[future]
                    return ToolReport.expired(prepared)


class AsyncDriver:
    """Performs effects with ``await``; parallel tool calls run as concurrent tasks.

    Blocking providers, tools and commits run in worker threads, so the event loop keeps
    serving other agents while one waits.

    Args:
        provider: The model provider: its ``acomplete`` if it has one, else its
            ``complete`` (awaited if ``async def``, else in a worker thread).
        database: As for :class:`SyncDriver`.
        commit: Commits a step boundary.
        guard: Awaited before any tool call starts; raises to stop the run instead.
        on_delta: Gets each piece of a turn's answer as it streams in, on the event
            loop; None: the answer is asked for in one piece.
        review_time: As for :class:`SyncDriver`; called in a worker thread.
    """

    def __init__(
        self,
        provider: Provider | AsyncProvider,
        database: str,
        commit: Callable[[Commit], Awaitable[None]],
        guard: Callable[[], Awaitable[None]] | None = None,
        on_delta: Callable[[Delta], None] | None = None,
        review_time: Callable[[datetime], datetime] = _as_read,
    ):
        self._provider = provider
        self._tools = _ToolRunner(database)
        self._commit = commit
        self._guard = guard
        self._on_delta = on_delta
        self._review_time = review_time
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
            case Complete(request, answer=True) if self._on_delta is not None:
                if streams(self._provider):
                    return await astream_answer(self._provider, request, self._on_delta)
                return emit_whole(await self._complete(request), self._on_delta)
            case Complete(request):
                return await self._complete(request)
            case Commit():
                await self._commit(effect)
                return None
            case ReviewTime(now):
                return await asyncio.to_thread(self._review_time, now)
            case RunTool(prepared):
                if self._guard is not None:
                    await self._guard()
                return await self._tools.timed(prepared)
            case StartTools(calls):
                if self._guard is not None:
                    await self._guard()
                self._tasks = [asyncio.create_task(self._tools.timed(p)) for p in calls]
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


@attrs.frozen
class _ToolRunner:
    """Executes tool calls, each listed as running in ``database`` until it returns."""

    database: str

    def run(self, prepared: PreparedCall) -> ToolReport:
        """Execute a call, blocking; an ``async def`` tool runs in an event loop of its
        own."""
        with self._listed(prepared):
            try:
                value = call_blocking(prepared.tool.func, prepared.context, prepared.args)
            except Exception as exc:
                return ToolReport.raised(prepared, exc)
        return ToolReport.returned(prepared, value)

    async def arun(self, prepared: PreparedCall) -> ToolReport:
        """Execute a call: an ``async def`` tool is awaited, a blocking one runs in a
        thread."""
        if not is_async_callable(prepared.tool.func):
            return await asyncio.to_thread(self.run, prepared)  # listed until it returns
        with self._listed(prepared):
            try:
                value = await call_async(prepared.tool.func, prepared.context, prepared.args)
            except Exception as exc:
                return ToolReport.raised(prepared, exc)
        return ToolReport.returned(prepared, value)

    async def timed(self, prepared: PreparedCall) -> ToolReport:
        """:meth:`arun`, or its expiry once the call outruns its timeout (an ``async
        def`` tool is cancelled; a blocking one is left to finish in its thread)."""
        if prepared.timeout is None:
            return await self.arun(prepared)
        try:
            return await asyncio.wait_for(self.arun(prepared), prepared.timeout)
        except TimeoutError:
            return ToolReport.expired(prepared)

    def in_thread(self, prepared: PreparedCall) -> Future[ToolReport]:
        """:meth:`run` in a daemon thread of its own."""
        future: Future[ToolReport] = Future()

        def target() -> None:
            try:
                future.set_result(self.run(prepared))
            except BaseException as exc:  # as an executor's worker reports it
                future.set_exception(exc)

        name = f"tool {prepared.call.name} {prepared.call.id}"
        threading.Thread(target=target, name=name, daemon=True).start()
        return future

    def _listed(self, prepared: PreparedCall) -> contextlib.AbstractContextManager[None]:
        context = prepared.context
        return listed(
            self.database,
            context.thread_id,
            context.tool_call_id,
            context.tool_name,
            prepared.timeout,
        )
