"""Bridges between blocking code and asyncio.

eventsourcing 9.5 is synchronous, and providers and tools may be written either way.
The async runtime calls blocking code in worker threads and awaits ``async def`` code;
the blocking runtime runs ``async def`` code to completion in an event loop of its own.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

P = ParamSpec("P")
T = TypeVar("T")
S = TypeVar("S")


def is_async_callable(func: object) -> bool:
    """Whether calling ``func`` returns a coroutine: an ``async def`` function, method,
    partial of one, or an object with an ``async def __call__``."""
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
        getattr(func, "__call__", None)  # noqa: B004 - the method itself is inspected
    )


def call_blocking(func: Callable[P, T | Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
    """Call ``func`` and return its result; an awaitable result is run to completion in
    a new event loop, so the blocking runtime accepts ``async def`` code too.

    Raises:
        RuntimeError: ``func`` is async and this thread already runs an event loop:
            await it there instead (the async runtime does).
    """
    value = func(*args, **kwargs)
    if inspect.isawaitable(value):
        return cast(T, asyncio.run(_awaited(value)))
    return value


async def call_async(func: Callable[P, T | Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
    """Await ``func`` if it is async; otherwise call it in a worker thread, so that
    blocking code never stalls the event loop."""
    if is_async_callable(func):
        value = func(*args, **kwargs)
    else:
        value = await asyncio.to_thread(func, *args, **kwargs)
    if inspect.isawaitable(value):
        return await value
    return value


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


def in_worker_thread(
    method: Callable[Concatenate[S, P], T],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
    """The async twin of a blocking method: the same call, run in a worker thread.

    Declared in a class body as ``aload = in_worker_thread(load)``.
    """

    @functools.wraps(method)
    async def twin(self: S, *args: P.args, **kwargs: P.kwargs) -> T:
        return await asyncio.to_thread(method, self, *args, **kwargs)

    twin.__name__ = f"a{method.__name__}"
    twin.__qualname__ = method.__qualname__.removesuffix(method.__name__) + twin.__name__
    twin.__doc__ = (
        f"Like :meth:`{method.__name__}`, awaited: the blocking call runs in a worker "
        "thread, so the event loop goes on serving other tasks."
    )
    return cast(Callable[Concatenate[S, P], Coroutine[Any, Any, T]], twin)
