"""An MCP server as a source of tools, driven from blocking code.

The MCP SDK is async, and an agent's run loop may be blocking (``Agent.run``) or async
(``Agent.arun``). Each :class:`MCPServer` owns one event loop in a daemon thread of its
own: the connection lives there, in one task from connect to close (the SDK's transports
are anyio task groups, which must be entered and left by the same task), and every
request is handed to that loop and waited for. So a call is the same blocking function
for both drivers, and one server's connection is shared by every agent that lists it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shlex
import sys
import threading
import urllib.parse
from collections.abc import Coroutine, Mapping, Sequence
from concurrent.futures import CancelledError
from typing import Any, Self, TypeVar

import httpx2
from mcp import Client, MCPError
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from covonaut_es import _logs
from covonaut_es.errors import ToolInDoubtError, ToolServerError
from covonaut_es.mcp._policy import (
    MAX_RESULT_BYTES,
    MAX_TOOLS,
    Listing,
    ToolPolicy,
    checked_listing,
    result_value,
    to_tool,
)
from covonaut_es.tools import Tool, ToolContext, check_seconds

IDEMPOTENCY_KEY_META = "covonaut/idempotency_key"
"""The ``_meta`` key of every ``tools/call`` request that carries the call's
idempotency key: stable for one recorded call across restores and retries."""

logger = _logs.logger("covonaut_es.mcp")

_T = TypeVar("_T")

# JSON-RPC errors that say the request was refused before any tool ran.
_REFUSED_CODES = frozenset({-32700, -32600, -32601, -32602})


class MCPServer:
    """An MCP server whose tools an agent may call (``AgentConfig(mcp_servers=[...])``).

    Make one with :meth:`stdio` or :meth:`http`, and use it as a context manager (``with``
    or ``async with``): leaving it closes the connection, stops the subprocess of a
    stdio server, and ends the server's event loop thread. The server is reached when
    its tools are first needed, and again after the connection drops.

    Each listed tool becomes a :class:`~covonaut_es.Tool` pinned to this server (see
    :class:`~covonaut_es.domain.ToolPin`): its ``inputSchema`` validates the model's
    arguments, and its annotations set its policy unless ``overrides`` does.

    Args:
        name: The name shown in reviews and errors.
        origin: How the server is reached, without credentials: covered by every tool
            digest, so an approval never runs another server's tool of the same name.
        connect: Opens the transport (an async context manager of the SDK's streams).
        overrides: By tool name (the server's), the application's policy; it always
            wins over the server's hints.
        tool_prefix: Put before each tool's name, for the model (two servers with a
            tool of the same name need one).
        timeout: Seconds a call may run (default: ``AgentConfig.tool_timeout``); the
            request is also cancelled on the server's loop then.
        connect_timeout: Seconds to reach the server and list its tools.
        max_result_bytes: The largest result text kept; a larger one is recorded as an
            error that says so.
    """

    def __init__(
        self,
        *,
        name: str,
        origin: str,
        connect: Any,
        overrides: Mapping[str, ToolPolicy] | None = None,
        tool_prefix: str = "",
        timeout: float | None = None,
        connect_timeout: float = 10.0,
        max_result_bytes: int = MAX_RESULT_BYTES,
    ) -> None:
        check_seconds("timeout", timeout)
        check_seconds("connect_timeout", connect_timeout)
        self._name = name
        self.origin = origin
        self._connect = connect
        self._overrides = dict(overrides or {})
        self._prefix = tool_prefix
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._max_result_bytes = max_result_bytes
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self._closing: asyncio.Event | None = None
        self._holding: asyncio.Future[None] | None = None
        self._tools: tuple[Tool, ...] | None = None

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        *,
        name: str | None = None,
        **options: Any,
    ) -> MCPServer:
        """A server run as a subprocess, spoken to over its stdin and stdout.

        ``env`` is added to a minimal environment (the SDK's); it is not part of the
        server's identity, so it may hold secrets. ``options`` are the constructor's.
        """
        params = StdioServerParameters(command=command, args=list(args), env=dict(env or {}))
        errlog = sys.__stderr__ or open(os.devnull, "w")  # noqa: SIM115 - lives with the process

        def connect() -> Any:
            return stdio_client(params, errlog=errlog)

        origin = "stdio:" + shlex.join([command, *args])
        return cls(
            name=name or os.path.basename(command), origin=origin, connect=connect, **options
        )

    @classmethod
    def http(
        cls,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        name: str | None = None,
        **options: Any,
    ) -> MCPServer:
        """A server reached over streamable HTTP at ``url``.

        ``headers`` (an ``Authorization`` token, say) go with every request; they and
        the URL's credentials and query are not part of the server's identity.
        """
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            msg = f"MCPServer.http needs an http:// or https:// URL, got {parts.scheme!r} URL"
            raise ValueError(msg)
        host = parts.hostname + (f":{parts.port}" if parts.port else "")
        origin = f"http:{parts.scheme}://{host}{parts.path}"

        @contextlib.asynccontextmanager
        async def connect() -> Any:
            timeout = httpx2.Timeout(30.0, read=300.0)
            async with (
                httpx2.AsyncClient(headers=dict(headers or {}), timeout=timeout) as http,
                streamable_http_client(url, http_client=http) as streams,
            ):
                yield streams

        return cls(name=name or host, origin=origin, connect=connect, **options)

    @property
    def name(self) -> str:
        """The name shown in reviews and errors."""
        return self._name

    def __repr__(self) -> str:
        return f"MCPServer(name={self._name!r}, origin={self.origin!r})"

    # Lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.tools()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        await asyncio.to_thread(self.tools)
        return self

    async def __aexit__(self, *_: object) -> None:
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        """Close the connection (stopping a stdio server) and end the loop thread; calls
        still running are cancelled. The server may be used again: it reconnects."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
            self._tools = None
        if loop is None or thread is None:
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._disconnect(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        if not thread.is_alive():
            loop.close()

    # Tools --------------------------------------------------------------------------

    def tools(self) -> tuple[Tool, ...]:
        """The server's tools as the model is offered them, listed once per connection
        (the first time they are needed).

        Raises:
            ToolServerError: The server cannot be reached within ``connect_timeout``, or
                its listing breaks a limit or holds a tool our checks refuse.
        """
        tools = self._tools
        if tools is None:
            listed = self._run(self._listed(), self._connect_timeout, "list its tools")
            tools = tuple(self._tool(item) for item in listed)
            self._tools = tools
        return tools

    def _tool(self, listing: Listing) -> Tool:
        return to_tool(
            listing,
            server=self._name,
            origin=self.origin,
            prefix=self._prefix,
            override=self._overrides.get(listing.name),
            func=functools.partial(self._call, listing.name),
        )

    def _call(self, tool: str, ctx: ToolContext, args: dict[str, Any]) -> str:
        """Run one tool on the server, blocking, with the call's idempotency key in the
        request's ``_meta``."""
        result = self._run(self._called(tool, args, ctx.idempotency_key), None, "call " + tool)
        return result_value(result, tool=tool, max_bytes=self._max_result_bytes)

    # On the server's loop -------------------------------------------------------------

    async def _listed(self) -> list[Listing]:
        client = await self._connected()
        tools: list[Any] = []
        cursor = None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None or len(tools) > MAX_TOOLS:
                return checked_listing(self._name, tools)

    async def _called(self, tool: str, args: dict[str, Any], key: str) -> Any:
        try:
            client = await asyncio.wait_for(self._connected(), self._connect_timeout)
        except Exception as exc:  # nothing was sent
            msg = f"MCP server {self._name!r} could not be reached to call {tool!r}: {exc}"
            raise ToolServerError(msg) from exc
        try:
            return await client.call_tool(
                tool, args, read_timeout_seconds=self._timeout, meta={IDEMPOTENCY_KEY_META: key}
            )
        except MCPError as exc:
            if exc.code in _REFUSED_CODES:
                raise ToolServerError(f"MCP server {self._name!r} refused the call: {exc}") from exc
            await self._drop()
            msg = f"MCP server {self._name!r} failed during the call: {exc.error.message}"
            raise ToolInDoubtError(msg) from exc
        except Exception as exc:  # a dropped connection, an answer that is not MCP
            await self._drop()
            msg = f"MCP server {self._name!r} gave no usable answer: {type(exc).__name__}"
            raise ToolInDoubtError(msg) from exc

    async def _connected(self) -> Any:
        if self._client is None:
            self._closing = asyncio.Event()
            ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._holding = asyncio.ensure_future(self._hold(ready, self._closing))
            self._client = await ready
        return self._client

    async def _hold(self, ready: asyncio.Future[Any], closing: asyncio.Event) -> None:
        """Open the connection and keep it until closing is set or it drops: one task
        enters and leaves the SDK's context managers."""
        try:
            async with Client(self._connect(), cache=None) as client:
                ready.set_result(client)
                await closing.wait()
        except BaseException as exc:  # a connection that fails or drops
            if not ready.done():
                ready.set_exception(exc)
            else:
                logger.warning("MCP server %r disconnected: %s", self._name, exc)
        finally:
            if self._closing is closing:
                self._client = None

    async def _drop(self) -> None:
        """Forget a connection that failed a call: the next call reconnects."""
        if self._closing is not None:
            self._closing.set()
        self._client = None

    async def _disconnect(self) -> None:
        """Cancel the calls still running (each is then in doubt), and let the holder
        leave the SDK's context managers."""
        holder = self._holding
        others = [t for t in asyncio.all_tasks() if t not in (asyncio.current_task(), holder)]
        for task in others:
            task.cancel()
        await self._drop()
        waited = [t for t in (holder, *others) if t is not None]
        if waited:
            await asyncio.wait(waited, timeout=5)

    def _run(self, work: Coroutine[Any, Any, _T], timeout: float | None, what: str) -> _T:
        """Run ``work`` on the server's loop and wait for it; past ``timeout``, cancel it
        and raise ``ToolServerError``."""
        future = asyncio.run_coroutine_threadsafe(work, self._running_loop())
        try:
            return future.result(timeout)
        except TimeoutError as exc:
            future.cancel()
            msg = (
                f"MCP server {self._name!r} ({self.origin}) did not {what} within "
                f"{timeout:g} s; check that it runs, or raise connect_timeout"
            )
            raise ToolServerError(msg) from exc
        except (ToolServerError, ToolInDoubtError):
            raise
        except CancelledError as exc:
            msg = f"MCP server {self._name!r} was closed while it was asked to {what}"
            if what.startswith("call"):
                raise ToolInDoubtError(msg) from exc
            raise ToolServerError(msg) from exc
        except Exception as exc:
            if what.startswith("call"):
                raise
            msg = f"MCP server {self._name!r} ({self.origin}) could not {what}: {exc}"
            raise ToolServerError(msg) from exc

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name=f"mcp {self._name}", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop
